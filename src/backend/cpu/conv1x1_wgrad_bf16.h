// rn50: the bf16 weight gradient of a 1x1 convolution on NHWC activations, our own AVX-512 BF16
// GEMM (conv1x1_wgrad_bf16.cpp).
#pragma once

#include <cstdint>

namespace rn50::onednn {

/// Geometry of a 1x1 pad-0 convolution over NHWC activations: x (N, H, W, C), dy (N, OH, OW, K)
/// with OH = (H - 1) / stride + 1 and OW likewise.
struct Conv1x1Geo {
  int64_t N = 0, H = 0, W = 0, C = 0;  ///< input batch, height, width, channels
  int64_t K = 0;                       ///< output channels
  int64_t stride = 1;
  int64_t OH() const { return (H - 1) / stride + 1; }
  int64_t OW() const { return (W - 1) / stride + 1; }
};

/// Whether this build carries the kernel: compiled for a CPU with AVX-512 BF16 (vdpbf16ps;
/// the build is -march=native) and not for AMX (where oneDNN's AMX matmuls take these
/// convolutions, conv_algo.h).
bool conv1x1_wgrad_bf16_built();

/// Whether the kernel takes a 1x1 conv of this geometry: built, and C a multiple of 64 (the
/// kernel's column panel; every 1x1 conv of ResNet-50 is), K >= 1.
bool conv1x1_wgrad_bf16_fits(const Conv1x1Geo& g);

/// f32 floats of workspace conv1x1_wgrad_bf16 needs for `g`: K * C (the f32 sums).
int64_t conv1x1_wgrad_bf16_workspace(const Conv1x1Geo& g);

/// dw[k][c] = sum over n, oh, ow of dy[n][oh][ow][k] * x[n][oh*stride][ow*stride][c]: the weight
/// gradient of the conv (K, C, 1, 1), in bf16 (the bits, round-to-nearest-even once from the
/// f32 sum). x bf16 NHWC (N, H, W, C), dy bf16 NHWC (N, OH, OW, K), dw bf16 [K][C] (OIHW of a
/// 1x1 kernel), overwritten; `work` at least conv1x1_wgrad_bf16_workspace(g) floats.
/// The GEMM dW[K, C] = dY^T[K, P] . Xs[P, C] over the P = N * OH * OW output pixels, blocked
/// as in Goto & van de Geijn, "Anatomy of High-Performance Matrix Multiplication", ACM TOMS 34(3),
/// 2008: pixel chunks of kPc, both operands packed per chunk into vdpbf16ps's pair layout (two
/// consecutive pixels interleaved, Intel SDM "VDPBF16PS"), register tiles of 6 rows x 64
/// channels, dW split between the threads by rows, or by column panels when it has more
/// columns than rows (no reduction; the result does not depend on the thread count). Products
/// are summed in f32 by vdpbf16ps, which treats bf16 subnormal inputs as zero (as oneDNN's bf16
/// kernels do). Throws rn50::Error when !fits(g).
void conv1x1_wgrad_bf16(const Conv1x1Geo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                        float* work);

}  // namespace rn50::onednn
