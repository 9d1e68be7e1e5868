// rn50: the CPU convolution algorithm choice shared by the oneDNN training backend (conv.cpp)
// and the CPU inference engine (infer/engine_cpu.cpp).
#pragma once

namespace rn50::onednn {

/// Whether f32 3x3 stride-1 pad-1 convolutions may use oneDNN's Winograd F(4x4, 3x3) algorithm
/// (jit_wino_4x3; 2.0-2.6x faster than direct per direction at ResNet-50's shapes, batch 32,
/// AVX-512). From the environment variable RN50_CONV_ALGO, read once: unset, "auto" or
/// "winograd" -> true; "direct" -> false. Throws rn50::Error naming the variable and the
/// accepted values for anything else.
bool conv_winograd_allowed();

}  // namespace rn50::onednn
