// rn50: a small f32 GEMM whose right-hand matrix is stored in column panels, packed once by its
// producer: the products of our Winograd F(4x4, 3x3) (winograd_f43.h), M = V . U per position
// of a transformed tile, with V a thread's chunk of tiles (a few to 64 rows) and U the
// transformed weights.
// Why not oneDNN's matmul: oneDNN 2.6's gemm:jit (the only f32 matmul it has on AVX2) packs U
// into its own blocked layout on every call. With few rows (one image's 256-channel 14x14 conv:
// 16 tiles per chunk) that packing is most of the call, well beyond the time to read U from
// memory once (measured with ONEDNN_VERBOSE in
// bench/results/cpu/2026-12-01-avx2-epyc/own_winograd_f43_panel_gemm.md). Here U is read in place:
// each panel (C rows of 16 contiguous floats) streams in once per chunk and stays in L1/L2
// while every block of rows is multiplied by it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rn50::onednn {

/// Columns per panel of a panel-packed matrix.
constexpr int64_t kPanelCols = 16;

/// Offset of element (c, k) in a C x K f32 matrix packed in column panels: the columns in
/// panels of kPanelCols (the last one K % kPanelCols wide when that is not zero), panel after
/// panel, each panel its C rows one after another, a row's columns contiguous. Panel j starts
/// at j * kPanelCols * C and holds columns [16 j, 16 j + width).
inline int64_t panel_offset(int64_t c, int64_t k, int64_t C, int64_t K) {
  const int64_t k0 = k / kPanelCols * kPanelCols, width = std::min(kPanelCols, K - k0);
  return k0 * C + c * width + (k - k0);
}

/// out[r][j] = sum over c of a[r * lda + c] * B[c][k0 + j], for r < rows and j < kt: A (rows x
/// C, row-major with leading dimension lda) times columns [k0, k0 + kt) of B (C x K f32,
/// panel-packed as panel_offset says), into out (rows x kt, leading dimension ldo; overwritten,
/// not added to). k0 and kt multiples of 8, k0 + kt <= K. Runs on the calling thread (AVX2 +
/// FMA kernels of 6 rows x 16 columns where the CPU has them (cpu_info), plain loops otherwise); the sum
/// over c runs in order, in f32.
void gemm_f32_panels(int64_t rows, int64_t C, const float* a, int64_t lda, const float* b,
                     int64_t K, int64_t k0, int64_t kt, float* out, int64_t ldo);

}  // namespace rn50::onednn
