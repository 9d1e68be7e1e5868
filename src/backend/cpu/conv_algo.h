// rn50: the CPU convolution algorithm choice shared by the oneDNN training backend (conv.cpp,
// conv_matmul.cpp) and the CPU inference engine (infer/engine_cpu.cpp).
#pragma once

#include <optional>

#include "rn50/tensor.h"

namespace rn50::onednn {

/// Which algorithms a CPU convolution may use besides oneDNN's direct convolution
/// (environment variable RN50_CONV_ALGO, read once; set_conv_algo overrides it):
///  * auto (default, also "winograd" for compatibility): Winograd F(4x4, 3x3) for f32 3x3
///    stride-1 pad-1 convs (jit_wino_4x3; 2.0-2.6x faster than direct per direction at
///    ResNet-50's shapes, batch 32, AVX-512), and the backward (data and weights) of 1x1 convs
///    on NHWC activations as oneDNN matmuls in bf16 when the CPU has AMX (inside a ResNet-50
///    step, oneDNN 2.6's AMX direct kernels for them reach 75-500 GFLOP/s, its AMX matmul
///    290-590; the forward stays direct, whose brgconv_1x1 kernel beats the matmul in the step;
///    conv_matmul.cpp), and the bf16 weight gradient of KxK convs with outputs of 14x14 pixels
///    or fewer as im2col + matmuls on AMX CPUs (1.5-4x the direct kernel; conv_im2col.cpp), and
///    the f32 weight gradient of every KxK NHWC conv as im2col + matmuls on CPUs without
///    AVX-512 (1.3-2.1x oneDNN's jit:avx2 kernel at ResNet-50's shapes; no Winograd there), and
///    with AVX-512 that of the stride-2 3x3s (1.2-1.4x oneDNN's jit:avx512_core kernel), and
///    there f32 3x3 stride-1 NHWC convs as our own Winograd F(4x4, 3x3) (conv_winograd.cpp;
///    forward and backward data on our panel GEMM, the weight gradient's products on oneDNN's
///    batched matmul) where it has enough tiles, in all three directions (the weight
///    gradient then not as im2col), and on CPUs with AVX-512 BF16 but no AMX the bf16 weight
///    gradient of NHWC convs with outputs of 7x7 pixels or fewer (and some 1x1s) as our own
///    GEMM (1.1-1.4x oneDNN's kernels there; conv_wgrad_gemm.h), and on CPUs with AVX-512 and
///    no AMX the f32 weight gradient of the NHWC 1x1s that keep or widen the channels or have
///    outputs of 7x7 or fewer as the same GEMM in f32 (1.0-1.4x), and there bf16 3x3 stride-1
///    NHWC convs with outputs of 14x14 or more as our own Winograd F(2x2, 3x3) in all three
///    directions (1.1-1.7x oneDNN's direct kernel; winograd_f23_bf16.h).
///  * direct: neither (every conv is oneDNN's direct convolution; the torchvision parity test).
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
/// `matmul` (f32, bf16); with `automatic` for bf16 on CPUs with AMX at the shapes where it was
/// measured faster than oneDNN's direct kernel, and for f32 on CPUs without AVX-512 and for
/// f32 3x3 stride-2 convs with it (see the definition); never with `direct`.
bool conv_im2col_allowed(DType dt, const ConvShapeInfo& s);

/// Whether direction `dir` of a 1x1 pad-0 convolution (any stride) with NHWC activations of
/// dtype `dt` runs as a oneDNN matmul under conv_algo(): always with `matmul` (f32, bf16); with
/// `automatic` for the bf16 backward directions when oneDNN's effective ISA has AMX; never with
/// `direct`.
bool conv1x1_matmul_allowed(DType dt, ConvDir dir);

/// The machines whose measurements conv_own_wgrad_faster's rules come from: the own GEMM's
/// speed against oneDNN's kernels differs between AVX-512 on 256-bit units and on 512-bit ones.
enum class WgradTuning {
  zen4,  ///< AMD Zen 4 (family 19h: AVX-512 on 256-bit units), and every CPU not named below
         ///< (Intel AVX-512 CPUs without AMX were not measured: they get the smaller rule set)
  zen5,  ///< AMD Zen 5 and later (family 1Ah and above: AVX-512 on 512-bit units)
};

/// This CPU's WgradTuning, from cpu_info()'s vendor and family (core/cpu_info.h): `zen5` on AMD
/// family 1Ah or above, `zen4` otherwise (and off x86).
WgradTuning cpu_wgrad_tuning();

/// Whether our own AVX-512 GEMM (conv_wgrad_gemm.h) was measured faster than oneDNN 2.6's
/// kernel for the weight gradient of a convolution of shape `s` with activations in `dt` on
/// machines of `tuning` (the measurements are in the definition). The shape rule alone: bf16
/// on both, outputs of 7x7 pixels or fewer, 1x1s that are strided or widen at least fourfold,
/// strided KxKs with outputs of 14x14 or fewer, and on zen5 also 1x1s that narrow the
/// channels; f32 1x1s only, on zen5 those with K >= C or outputs of 7x7 or fewer, on zen4
/// those that widen at least fourfold at 56x56 or more. False for other dtypes.
bool conv_own_wgrad_faster(DType dt, const ConvShapeInfo& s, WgradTuning tuning);

/// Whether the weight gradient of a convolution with NHWC activations of dtype `dt` and shape
/// `s` (1x1 or KxK, any stride and padding) runs as our own AVX-512 GEMM (conv_wgrad_gemm.h)
/// when its shape fits: with `automatic` on CPUs without AMX whose build has the kernel for
/// `dt`, where conv_own_wgrad_faster(dt, s, cpu_wgrad_tuning()); never with `direct`; never
/// with `matmul` (the matmul and im2col paths take these convolutions there).
bool conv_own_wgrad_allowed(DType dt, const ConvShapeInfo& s);
/// Whether the training backend's f32 3x3 stride-1 convs on NHWC activations may run forward,
/// backward-data and backward-weights as our own Winograd F(4x4, 3x3) (conv_winograd.h): with
/// `automatic` on CPUs without AVX-512 (where oneDNN has no Winograd), always with `matmul` (so
/// that the tests run it on any CPU), never with `direct`.
bool conv_own_winograd_allowed();

/// Whether the bf16 3x3 stride-1 pad-1 convolution of shape `s` on NHWC activations runs as
/// our own Winograd F(2x2, 3x3) in all three directions (winograd_f23_bf16.h) when the build
/// has it (AVX-512 BF16 without AMX): with `automatic` at the output sizes where it beats
/// oneDNN 2.6's direct jit_bf16 kernel (see the definition for the measurements), always with
/// `matmul` (the tests), never with `direct`.
bool conv_own_winograd_bf16_allowed(const ConvShapeInfo& s);

/// Whether the CPU inference engine's f32 activations are best kept in oneDNN's blocked
/// layout (infer_activation_block()) rather than NHWC on this CPU
/// (CpuActivationLayout::automatic): yes on CPUs with and without AVX-512 (see the definition
/// for the measurements).
bool infer_blocked_activations_preferred();
/// The channel block of the engine's blocked f32 layout: 16 (nChw16c, the layout of oneDNN's
/// AVX-512 kernels and of its Winograd convs) on CPUs with AVX-512, else 8 (nChw8c, AVX2's,
/// which our own Winograd F(4x4, 3x3) reads).
int infer_activation_block();

/// Whether the CPU inference engine at --precision int8 runs the ops a calibrated model keeps in
/// floating point (the stem conv reading the image, its max pool and the fc; rn50/inference.h)
/// in bf16 rather than f32: where oneDNN has native bf16 kernels (AVX-512 BF16 or AMX; see the
/// definition for the measurement). Their outputs are quantized to 8 bits (the stem's) or are
/// the logits, accumulated in f32 either way. Models with QAT ranges keep f32 (the trained grid).
/// set_infer_int8_float_ops_bf16 overrides the CPU's answer.
bool infer_int8_float_ops_bf16();
/// Overrides infer_int8_float_ops_bf16 for the engines built after the call (tests: both paths
/// on one CPU; true where oneDNN has no native bf16 runs its slower emulation or fails to build
/// the plan); std::nullopt hands the choice back to the CPU.
void set_infer_int8_float_ops_bf16(std::optional<bool> bf16);

}  // namespace rn50::onednn
