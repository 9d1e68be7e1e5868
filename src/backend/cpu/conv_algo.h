// rn50: the CPU convolution algorithm choice shared by the oneDNN training backend (conv.cpp,
// conv_matmul.cpp) and the CPU inference engine (infer/engine_cpu.cpp).
#pragma once

#include <optional>

#include "rn50/tensor.h"

namespace rn50::onednn {

/// Which algorithms a CPU convolution may use besides oneDNN's own (its direct convolution,
/// and its Winograd for f32 3x3 stride-1 convs where oneDNN has one: AVX-512)
/// (environment variable RN50_CONV_ALGO, read once; set_conv_algo overrides it):
///  * auto (default, also "winograd" for compatibility): the implementations of the registry
///    (conv_registry.h) where the rule table (conv_rules.h) says they were measured faster on
///    this CPU's class: 1x1 backward as oneDNN matmuls (bf16, AMX), KxK weight gradients as
///    im2col + matmuls (bf16 on AMX; f32 without AVX-512, and f32 3x3 stride 2 with it), our
///    Winograd F(4x4, 3x3) (f32 without AVX-512) and F(2x2, 3x3) (bf16 on AVX-512 BF16 without
///    AMX), our weight-gradient GEMM (AVX-512 without AMX; shapes per CPU class).
///    docs/perf/cpu-kernels.md explains each.
///  * direct: none of them, and no Winograd (every conv is oneDNN's direct convolution; the
///    torchvision parity test).
///  * matmul: as auto, and 1x1 NHWC convs as matmuls in all three directions, and every KxK
///    NHWC conv's weight gradient as im2col + matmuls, in f32 and bf16 on every CPU, and our own
///    Winograd on every CPU (f32), and in bf16 at every size where the build has it (the tests
///    use it to check those paths on machines without AMX or with AVX-512).
enum class ConvAlgo { automatic, direct, matmul };

/// The three computations of a convolution.
enum class ConvDir { fwd, bwd_data, bwd_weights };

/// The active policy: a ScopedConvAlgo's on this thread, else set_conv_algo's, else
/// RN50_CONV_ALGO's. Throws rn50::Error naming the
/// variable and the accepted values when RN50_CONV_ALGO holds anything else.
ConvAlgo conv_algo();
/// Overrides RN50_CONV_ALGO for this process (tests); std::nullopt hands the choice back to
/// the variable. Takes effect at the next convolution call of every backend (the primitive
/// cache keys include the policy).
void set_conv_algo(std::optional<ConvAlgo> a);

/// Makes conv_algo() answer `a` on this thread for its lifetime (the convolution registry
/// asks its kernels' shape limits this way when RN50_CONV_IMPL forces one: conv_registry.h).
class ScopedConvAlgo {
 public:
  explicit ScopedConvAlgo(ConvAlgo a);
  ~ScopedConvAlgo();
  ScopedConvAlgo(const ScopedConvAlgo&) = delete;
  ScopedConvAlgo& operator=(const ScopedConvAlgo&) = delete;

 private:
  int prev_;
};

/// Whether f32 3x3 stride-1 pad-1 convolutions may use oneDNN's Winograd algorithm
/// (conv_algo() is not direct).
bool conv_winograd_allowed();

/// What the im2col policy looks at of a KxK convolution (conv_im2col_allowed).
struct ConvShapeInfo {
  int64_t C = 0, K = 0;    ///< input and output channels
  int64_t R = 0;  ///< kernel height (= width in ResNets; the own wgrad rule takes R 1 as 1x1)
  int64_t stride = 1;
  int64_t out_pixels = 0;  ///< OH x OW
};

/// Whether the weight gradient of a KxK convolution (R x S above 1 x 1) with NHWC activations
/// of dtype `dt` runs as im2col + matmuls (conv_im2col.cpp) under conv_algo(): always with
/// `matmul` (f32, bf16); with `automatic` where conv_rules.h's table takes "im2col_matmul";
/// never with `direct`.
bool conv_im2col_allowed(DType dt, const ConvShapeInfo& s);

/// Whether direction `dir` of a 1x1 pad-0 convolution (any stride) with NHWC activations of
/// dtype `dt` runs as a oneDNN matmul under conv_algo(): always with `matmul` (f32, bf16); with
/// `automatic` where the rule table takes "onednn_matmul_1x1"; never with `direct`.
bool conv1x1_matmul_allowed(DType dt, ConvDir dir);

/// Whether the weight gradient of a convolution with NHWC activations of dtype `dt` and shape
/// `s` (1x1 or KxK, any stride and padding) runs as our own AVX-512 GEMM (conv_wgrad_gemm.h)
/// when its shape fits: with `automatic` where the build has the kernel for `dt` on this CPU
/// and the rule table takes "own_wgrad_gemm"; never with `direct`; never with `matmul` (the
/// matmul and im2col paths take these convolutions there).
bool conv_own_wgrad_allowed(DType dt, const ConvShapeInfo& s);
/// Whether the training backend's f32 3x3 stride-1 convs on NHWC activations may run forward,
/// backward-data and backward-weights as our own Winograd F(4x4, 3x3) (conv_winograd.h): with
/// `automatic` where the rule table takes "own_winograd_f43" (CPUs without AVX-512, where
/// oneDNN has no Winograd), always with `matmul` (so that the tests run it on any CPU), never
/// with `direct`.
bool conv_own_winograd_allowed();

/// Whether the bf16 3x3 stride-1 pad-1 convolution of shape `s` on NHWC activations runs as
/// our own Winograd F(2x2, 3x3) in all three directions (winograd_f23_bf16.h) when the build
/// has it (AVX-512 BF16 without AMX): with `automatic` where the rule table takes
/// "own_winograd_f23_bf16", always with `matmul` (the tests), never with `direct`. The CPU
/// inference engine asks the same.
bool conv_own_winograd_bf16_allowed(const ConvShapeInfo& s);

/// Whether the CPU inference engine's f32 activations are best kept in oneDNN's blocked
/// layout (infer_activation_block()) rather than NHWC on this CPU
/// (CpuActivationLayout::automatic): yes on CPUs with and without AVX-512 (the definition names
/// the measurements under bench/results/cpu/).
bool infer_blocked_activations_preferred();
/// The channel block of the engine's blocked f32 layout: 16 (nChw16c, the layout of oneDNN's
/// AVX-512 kernels and of its Winograd convs) on CPUs with AVX-512, else 8 (nChw8c, AVX2's,
/// which our own Winograd F(4x4, 3x3) reads).
int infer_activation_block();

/// Whether the CPU inference engine at --precision int8 runs the ops a calibrated model keeps in
/// floating point (the stem conv reading the image, its max pool and the fc; rn50/inference.h)
/// in bf16 rather than f32: where oneDNN has native bf16 kernels (AVX-512 BF16 or AMX; the
/// definition names the measurement). Their outputs are quantized to 8 bits (the stem's) or are
/// the logits, accumulated in f32 either way. Models with QAT ranges keep f32 (the trained grid).
/// set_infer_int8_float_ops_bf16 overrides the CPU's answer.
bool infer_int8_float_ops_bf16();
/// Overrides infer_int8_float_ops_bf16 for the engines built after the call (tests: both paths
/// on one CPU; true where oneDNN has no native bf16 runs its slower emulation or fails to build
/// the plan); std::nullopt hands the choice back to the CPU.
void set_infer_int8_float_ops_bf16(std::optional<bool> bf16);

}  // namespace rn50::onednn
