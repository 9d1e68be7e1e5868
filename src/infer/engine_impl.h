// rn50 inference: the engines behind make_inference_engine (rn50/inference.h).
#pragma once

#include <functional>
#include <memory>

#include "core/check.h"
#include "rn50/backend.h"
#include "rn50/inference.h"

namespace rn50 {

/// The precision an engine computes in: EngineOptions::precision's names (rn50/inference.h),
/// parsed once by make_inference_engine. Which engine has which: CPU fp32, bf16, int8; GPU
/// fp32 (IEEE f32 math), tf32, fp16, bf16; the reference backend fp32, fp16, bf16.
enum class EnginePrecision { fp32, tf32, fp16, bf16, int8 };

/// "fp32", "tf32", "fp16", "bf16" or "int8".
const char* engine_precision_name(EnginePrecision p);

/// The precision named `name` ("" means fp32). Throws rn50::Error naming --precision and the
/// names it takes otherwise.
EnginePrecision parse_engine_precision(const std::string& name);

/// A value as an op of a CPU engine's run() just wrote it: host NHWC data of `count` elements
/// stored as `type`, valid only during the observer's call. 8-bit values hold codes (real value
/// = code * scale; rn50/inference.h's INT8 rules); floats have scale 1.
struct ObservedValue {
  enum class Type : uint8_t { f32, bf16, u8, s8 };
  /// The program's value index (InferenceProgram::producer's indexing; 0 = the input), or, at
  /// or past producer.size(), a copy an INT8 engine made of one (quantized or dequantized).
  int value = 0;
  const void* data = nullptr;
  int64_t count = 0;
  Type type = Type::f32;
  float scale = 1.f;
  /// The data as f32; throws rn50::Error naming the value when it is stored otherwise.
  const float* f32() const {
    RN50_CHECK(type == Type::f32, "inference: value {} is not stored as f32", value);
    return static_cast<const float*>(data);
  }
};

/// Called after each op of an fp32 or INT8 CPU engine's run() with the value it wrote
/// (calibration: fp32; the INT8 tests: each join's codes).
using ValueObserver = std::function<void(const ObservedValue&)>;

/// Throws rn50::Error naming x's shape unless it is what InferenceEngine::run takes: a host f32
/// (N, 3, H, W) batch in NCHW or NHWC.
inline void check_image_batch(const Tensor& x) {
  RN50_CHECK(x.defined() && x.is_cpu() && x.dtype() == DType::f32 && x.ndim() == 4 &&
                 x.c() == 3 && (x.layout() == Layout::NCHW || x.layout() == Layout::NHWC),
             "inference: expected a host f32 (N, 3, H, W) image batch, got {}", x.str());
}

/// oneDNN engine (engine_cpu.cpp) computing in fp32, bf16 or int8 (rn50/inference.h); throws
/// rn50::Error naming the precision for tf32 and fp16 (the GPU engine's).
/// With an observer (fp32 or int8), every value is handed to it as it is written. Winograd 3x3
/// convolutions (fp32) only when conv_winograd_allowed() and not `batch_invariant`
/// (EngineOptions::batch_invariant, which also runs the fc image by image); f32 activations
/// in `layout` (EngineOptions::cpu_activations; NHWC with an observer).
std::unique_ptr<InferenceEngine> make_cpu_engine(
    InferenceProgram program, EnginePrecision precision, ValueObserver observer = {},
    bool batch_invariant = false, CpuActivationLayout layout = CpuActivationLayout::automatic);

/// The program on a compute backend (engine_device.cpp): every conv one
/// Backend::conv2d_bias_act_fwd (bias, residual and ReLU fused; cuDNN's
/// cudnnConvolutionBiasActivationForward on CUDA), NHWC activations in the precision's dtype
/// (fp32 and tf32: f32, fp16, bf16; int8 is refused), weights converted once into the backend's preferred
/// layout, one CUDA graph per input shape where the backend records. Throws rn50::Error when
/// the backend has no such convolution for the dtype.
std::unique_ptr<InferenceEngine> make_device_engine(InferenceProgram program,
                                                    std::unique_ptr<Backend> backend,
                                                    EnginePrecision precision);

}  // namespace rn50
