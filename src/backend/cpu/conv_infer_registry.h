// rn50: the CPU inference engine's convolution implementations (src/infer/engine_cpu.cpp), one
// ordered list chosen from as the training registry is (conv_registry.h): the same policy
// (RN50_CONV_ALGO), the same rule table (conv_rules.h), the same pin (RN50_CONV_IMPL), the same
// names in --profile rows and in RN50_CONV_LOG. What differs from training is what the engine
// gives a kernel: weights fixed for the engine's life (our Winograds transform them once, when
// the first plan is built, and every batch size's plan shares them: their `fits` asks the
// cached-weights speed rule), the bias, shortcut and ReLU fused into the convolution, and the
// activations in the engine's layout (NHWC, nChw16c or nChw8c).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rn50/tensor.h"

namespace rn50::onednn {

/// One convolution of a CPU inference plan (forward_inference) as the engine's plan builder
/// sees it. Shapes in elements: input (n, c, ., .), weights (k, c, kernel, kernel), output
/// (n, k, oh, ow).
struct InferConvQuery {
  /// The activations' dtype: f32 or bf16; an int8 conv (u8/s8 codes) sets `int8` instead.
  DType dt = DType::f32;
  bool int8 = false;
  int64_t n = 0, c = 0, k = 0, kernel = 0, stride = 1, pad = 0, oh = 0, ow = 0;
  /// The shortcut is added in the convolution's epilogue (a residual join).
  bool residual = false;
  /// The channel block of the input and output activations: 8 (nChw8c) or 16 (nChw16c), or
  /// 0 when either is plain (NHWC; the stem's NCHW image).
  int block = 0;
  /// EngineOptions::batch_invariant (rn50 serve): every image's result independent of the
  /// batch; Winograd mixes images in its chunks, so no Winograd.
  bool batch_invariant = false;
  /// An int8 calibration run: the observer reads each step's destination as NHWC, so the
  /// convolution must write the buffer's own layout.
  bool observed = false;
};

/// What an engine implementation is, for the engine's plan builder (one code path each).
enum class InferConvKind {
  onednn_winograd,
  own_winograd_f43,
  own_winograd_f23_bf16,
  onednn_direct
};

/// One implementation the engine can give a convolution to.
struct InferConvImpl {
  InferConvKind kind;
  /// Its name in profiles and logs: "onednn_winograd", "own_winograd_f43",
  /// "own_winograd_f23_bf16" or "onednn_direct" (the training registry's names: its "onednn"
  /// entry reports the first and last of them as what ran).
  const char* name;
  /// The RN50_CONV_IMPL value that pins it (conv_impl_names()): "onednn" for oneDNN's two.
  const char* pinned_by;
  /// Whether it takes `q` under the active policy, the rule table and its speed rule on this
  /// CPU. onednn_winograd is only a candidate: oneDNN may still have no Winograd kernel for the
  /// shape or CPU (no AVX-512), and the engine then tries the next.
  bool (*fits)(const InferConvQuery& q);
  /// Whether its kernel can compute `q` here at all (what a pinned run takes).
  bool (*takes)(const InferConvQuery& q);
};

/// The engine's implementations in the order they are tried: onednn_winograd,
/// own_winograd_f43, own_winograd_f23_bf16, onednn_direct (which fits every convolution).
std::span<const InferConvImpl> infer_conv_impls();

/// The implementations to try for `q`, best first, ending with onednn_direct. With
/// RN50_CONV_IMPL=F (conv_forced_impl()): F's entry first where it takes `q`, then oneDNN's
/// that fit (a convolution F cannot compute runs oneDNN, as in training); otherwise every
/// entry that fits, in list order. Throws what conv_forced_impl() throws.
std::vector<const InferConvImpl*> infer_conv_candidates(const InferConvQuery& q);

/// Appends one RN50_CONV_LOG line for the engine's choice `impl` for `q` ("conv fwd (engine)
/// x [N,C,-,-] w [K,C,R,R] y [N,K,OH,OW] stride S pad P <f32|bf16|int8> <nChw16c|nChw8c|plain>
/// policy <policy>[ residual][ RN50_CONV_IMPL=<pin>]: <impl>"); nothing when RN50_CONV_LOG is
/// unset. Throws rn50::Error when its file cannot be opened.
void log_infer_conv(const InferConvQuery& q, const char* impl);

}  // namespace rn50::onednn
