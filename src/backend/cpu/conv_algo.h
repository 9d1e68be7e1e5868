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
///    conv_matmul.cpp).
///  * direct: neither (every conv is oneDNN's direct convolution; the torchvision parity test).
///  * matmul: as auto, and 1x1 NHWC convs as matmuls in all three directions, in every dtype on
///    every CPU (the tests use it to check that path on machines without AMX).
enum class ConvAlgo { automatic, direct, matmul };

/// The three computations of a convolution.
enum class ConvDir { fwd, bwd_data, bwd_weights };

/// The active policy: set_conv_algo's, else RN50_CONV_ALGO's. Throws rn50::Error naming the
/// variable and the accepted values when RN50_CONV_ALGO holds anything else.
ConvAlgo conv_algo();
/// Overrides RN50_CONV_ALGO for this process (tests); std::nullopt hands the choice back to
/// the variable. Takes effect at the next convolution call of every backend (the primitive
/// cache keys include the policy).
void set_conv_algo(std::optional<ConvAlgo> a);

/// Whether f32 3x3 stride-1 pad-1 convolutions may use oneDNN's Winograd algorithm
/// (conv_algo() is not direct).
bool conv_winograd_allowed();

/// Whether direction `dir` of a 1x1 pad-0 convolution (any stride) with NHWC activations of
/// dtype `dt` runs as a oneDNN matmul under conv_algo(): always with `matmul` (f32, bf16); with
/// `automatic` for the bf16 backward directions when oneDNN's effective ISA has AMX; never with
/// `direct`.
bool conv1x1_matmul_allowed(DType dt, ConvDir dir);

}  // namespace rn50::onednn
