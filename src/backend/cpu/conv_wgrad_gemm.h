// rn50: the weight gradient of a convolution on NHWC activations (1x1 or KxK, any stride and
// padding) as our own AVX-512 GEMM, in bf16 (vdpbf16ps) and in f32 (vfmadd231ps)
// (conv_wgrad_gemm.cpp).
#pragma once

#include <cstdint>

namespace rn50::onednn {

/// Geometry of a convolution over NHWC activations: x (N, H, W, C), weights (K, C, R, S), dy
/// (N, OH, OW, K) with OH = (H + 2 pad - R) / stride + 1 and OW likewise (torch's sizes).
struct WgradGeo {
  int64_t N = 0, H = 0, W = 0, C = 0;  ///< input batch, height, width, channels
  int64_t K = 0;                       ///< output channels
  int64_t stride = 1;
  int64_t R = 1, S = 1;  ///< kernel height and width
  int64_t pad = 0;       ///< zero padding on every side
  bool ohwi = false;     ///< dw in OHWI (KRSC) order instead of OIHW
  int64_t OH() const { return (H + 2 * pad - R) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - S) / stride + 1; }
  /// Columns of the GEMM: the R x S taps times C.
  int64_t cols() const { return R * S * C; }
};

/// Whether this CPU runs the kernel (cpu_info(), core/cpu_info.h): AVX-512 with BF16
/// (vdpbf16ps) and no AMX (where oneDNN's AMX matmuls take these convolutions, conv_algo.h).
bool conv_wgrad_bf16_built();

/// Whether the kernel takes a conv of this geometry: built, C a multiple of 64 (the kernel's
/// column panel; every conv of ResNet-50 but the stem), K, R, S, stride >= 1, pad >= 0 and an
/// output of at least one pixel.
bool conv_wgrad_bf16_fits(const WgradGeo& g);

/// Whether conv_wgrad_bf16 splits the output pixels between `threads` OpenMP threads (each
/// summing its own run of pixel chunks over all of dW into its own f32 partial) rather than dW's
/// rows or column panels: for more than one thread, outputs larger than 7x7 and at least two
/// pixel chunks per thread. There each thread streams only its own part of both operands from
/// memory and packs nothing another thread packs too.
bool conv_wgrad_bf16_splits_pixels(const WgradGeo& g, int threads);

/// f32 floats of workspace conv_wgrad_bf16 needs for `g` when called with at most
/// omp_get_max_threads() threads: K * R * S * C (the f32 sums), times the largest such thread
/// count that splits the pixels (conv_wgrad_bf16_splits_pixels; a smaller team may split where
/// the full one does not).
int64_t conv_wgrad_bf16_workspace(const WgradGeo& g);

/// dw[k][c][r][s] = sum over n, oh, ow of dy[n][oh][ow][k] * x[n][oh*stride + r - pad]
/// [ow*stride + s - pad][c] (x zero outside the image): the weight gradient of the conv, in bf16
/// (the bits, round-to-nearest-even once from the f32 sum). x bf16 NHWC (N, H, W, C), dy bf16
/// NHWC (N, OH, OW, K), dw bf16 OIHW (K, C, R, S) or, with g.ohwi, OHWI (K, R, S, C),
/// overwritten; `work` at least conv_wgrad_bf16_workspace(g) floats.
/// The GEMM dW[K, R*S*C] = dY^T[K, P] . Xcol[P, R*S*C] over the P = N * OH * OW output pixels,
/// Xcol's row p holding, tap by tap, the input pixel each tap of p reads (im2col, Chellapilla et
/// al., "High Performance Convolutional Neural Networks for Document Processing", 2006, gathered
/// per chunk, never stored whole; the pixels whose tap falls in the padding left out), blocked
/// as in Goto & van de Geijn, "Anatomy of High-Performance Matrix Multiplication", ACM TOMS
/// 34(3), 2008: pixel chunks of 256, both operands packed per chunk into vdpbf16ps's pair layout
/// (two consecutive pixels interleaved, Intel SDM "VDPBF16PS"), register tiles of 6 rows x 64
/// columns. dW is split between the threads by rows, or by column panels when it has more
/// columns than rows (no reduction; the result does not depend on the thread count), except
/// where conv_wgrad_bf16_splits_pixels: then the threads' partials are added in thread order
/// before the one rounding, so the bits depend on the thread count (as oneDNN's do), and each
/// thread prefetches its next chunk's operands while the current one's tiles run (as a single
/// thread does). Products are
/// summed in f32 by vdpbf16ps, which treats bf16 subnormal inputs as zero (as oneDNN's bf16
/// kernels do). Throws rn50::Error when !fits(g).
void conv_wgrad_bf16(const WgradGeo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                     float* work);

/// Whether this CPU runs the f32 kernel: AVX-512 (F, BW, VL, DQ; cpu_info()).
bool conv_wgrad_f32_built();

/// Whether the f32 kernel takes a conv of this geometry: as conv_wgrad_bf16_fits, with
/// conv_wgrad_f32_built.
bool conv_wgrad_f32_fits(const WgradGeo& g);

/// As conv_wgrad_bf16_splits_pixels for the f32 kernel, whose pixel chunks hold 64 pixels.
bool conv_wgrad_f32_splits_pixels(const WgradGeo& g, int threads);

/// f32 floats of workspace conv_wgrad_f32 needs for `g` with at most omp_get_max_threads()
/// threads: 0 where the sums go straight into dW (a 1x1 or OHWI gradient whose pixels are not
/// split), else as conv_wgrad_bf16_workspace.
int64_t conv_wgrad_f32_workspace(const WgradGeo& g);

/// The same GEMM as conv_wgrad_bf16 in f32: x f32 NHWC (N, H, W, C), dy f32 NHWC (N, OH, OW,
/// K), dw f32 OIHW (K, C, R, S) or, with g.ohwi, OHWI (K, R, S, C), overwritten; `work` at least
/// conv_wgrad_f32_workspace(g) floats (may be null when that is 0). Products are summed by
/// vfmadd231ps (one rounding per product and sum) per register tile of 6 rows x 64 columns over
/// pixel chunks of 64, one pixel per step (no pairs); the threads share dW as conv_wgrad_bf16's
/// do (same bits on any thread count unless the pixels are split, where the partials are added
/// in thread order). Denormal inputs are used as they are. Throws rn50::Error when !fits(g).
void conv_wgrad_f32(const WgradGeo& g, const float* x, const float* dy, float* dw, float* work);

}  // namespace rn50::onednn
