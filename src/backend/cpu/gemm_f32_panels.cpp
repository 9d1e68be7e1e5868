// rn50: the panel-packed f32 GEMM (gemm_f32_panels.h).
// The AVX2 kernel is the usual register-blocked outer product (Goto and van de Geijn 2008,
// "Anatomy of High-Performance Matrix Multiplication"; BLIS's 6x16 haswell sgemm shape): 6 rows
// x 16 columns of accumulators (12 of the 16 ymm registers), per step of c two loads of B's
// panel row and six broadcasts of A, twelve FMAs. B is already packed (the panels), A is read
// in place: its rows are a chunk's transformed tiles, at most 64 of them, in L1/L2.
// The kernel is compiled for AVX2 + FMA in its own region (core/isa_region.h) and runs where
// cpu_info() has them; the plain loops elsewhere.
#include "backend/cpu/gemm_f32_panels.h"

#include <immintrin.h>

#include "core/cpu_info.h"
#include "core/isa_region.h"

namespace rn50::onednn {
namespace {

constexpr int kMR = 6;  ///< rows per kernel call

/// o (MR x 8 NV, ld ldo) = a (MR x C, ld lda) . b (C x 8 NV, ld ldb), plain loops.
template <int MR, int NV>
void kernel_plain(int64_t C, const float* a, int64_t lda, const float* b, int64_t ldb, float* o,
                  int64_t ldo) {
  float acc[MR][8 * NV] = {};
  for (int64_t c = 0; c < C; ++c)
    for (int r = 0; r < MR; ++r) {
      const float av = a[r * lda + c];
      for (int j = 0; j < 8 * NV; ++j) acc[r][j] += av * b[c * ldb + j];
    }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 8 * NV; ++j) o[r * ldo + j] = acc[r][j];
}

}  // namespace

RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX2)
namespace {

/// The same with AVX2 + FMA. The accumulators are named variables, not an array: GCC 12 keeps
/// an array of __m256 in registers but also stores every element back to the stack on each
/// step of c (12 stores per 12 FMAs).
template <int MR, int NV>
void kernel_avx2(int64_t C, const float* a, int64_t lda, const float* b, int64_t ldb, float* o,
                 int64_t ldo) {
  static_assert(MR >= 1 && MR <= 6 && (NV == 1 || NV == 2));
  const __m256 z = _mm256_setzero_ps();
  __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z,
         c41 = z, c50 = z, c51 = z;
  const float* a0 = a;
  for (int64_t c = 0; c < C; ++c, ++a0, b += ldb) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = NV > 1 ? _mm256_loadu_ps(b + 8) : z;
#define RN50_GEMM_ROW(r)                                    \
  if constexpr (MR > r) {                                   \
    const __m256 av = _mm256_broadcast_ss(a0 + r * lda);    \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);             \
    if constexpr (NV > 1) c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1); \
  }
    RN50_GEMM_ROW(0)
    RN50_GEMM_ROW(1)
    RN50_GEMM_ROW(2)
    RN50_GEMM_ROW(3)
    RN50_GEMM_ROW(4)
    RN50_GEMM_ROW(5)
#undef RN50_GEMM_ROW
  }
#define RN50_GEMM_STORE(r)                                          \
  if constexpr (MR > r) {                                           \
    _mm256_storeu_ps(o + r * ldo, c##r##0);                         \
    if constexpr (NV > 1) _mm256_storeu_ps(o + r * ldo + 8, c##r##1); \
  }
  RN50_GEMM_STORE(0)
  RN50_GEMM_STORE(1)
  RN50_GEMM_STORE(2)
  RN50_GEMM_STORE(3)
  RN50_GEMM_STORE(4)
  RN50_GEMM_STORE(5)
#undef RN50_GEMM_STORE
}

/// kernel_avx2<MR, NV> for a run-time MR in [1, kMR].
template <int NV>
void kernel_rows_avx2(int mr, int64_t C, const float* a, int64_t lda, const float* b,
                      int64_t ldb, float* o, int64_t ldo) {
  switch (mr) {
    case 6: return kernel_avx2<6, NV>(C, a, lda, b, ldb, o, ldo);
    case 5: return kernel_avx2<5, NV>(C, a, lda, b, ldb, o, ldo);
    case 4: return kernel_avx2<4, NV>(C, a, lda, b, ldb, o, ldo);
    case 3: return kernel_avx2<3, NV>(C, a, lda, b, ldb, o, ldo);
    case 2: return kernel_avx2<2, NV>(C, a, lda, b, ldb, o, ldo);
    default: return kernel_avx2<1, NV>(C, a, lda, b, ldb, o, ldo);
  }
}

}  // namespace
RN50_ISA_END

namespace {

/// The kernel for a run-time MR in [1, kMR]: AVX2's where the CPU has it.
template <int NV>
void kernel_rows(bool avx2, int mr, int64_t C, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* o, int64_t ldo) {
  if (avx2) return kernel_rows_avx2<NV>(mr, C, a, lda, b, ldb, o, ldo);
  switch (mr) {
    case 6: return kernel_plain<6, NV>(C, a, lda, b, ldb, o, ldo);
    case 5: return kernel_plain<5, NV>(C, a, lda, b, ldb, o, ldo);
    case 4: return kernel_plain<4, NV>(C, a, lda, b, ldb, o, ldo);
    case 3: return kernel_plain<3, NV>(C, a, lda, b, ldb, o, ldo);
    case 2: return kernel_plain<2, NV>(C, a, lda, b, ldb, o, ldo);
    default: return kernel_plain<1, NV>(C, a, lda, b, ldb, o, ldo);
  }
}

}  // namespace

void gemm_f32_panels(int64_t rows, int64_t C, const float* a, int64_t lda, const float* b,
                     int64_t K, int64_t k0, int64_t kt, float* out, int64_t ldo) {
  // Column groups of 16 where a whole 16-wide panel lies in [k0, k0 + kt), else of 8; within a
  // group every block of kMR rows, so that the group's panel is read from memory once and from
  // L1 by the other blocks. (Prefetching the next panel into L2 while the first block runs,
  // and the loops the other way round, rows outside, panels from L2, measured no faster and
  // slower on one image's 256-channel 14x14 conv with U from memory:
  // bench/results/cpu/2026-12-01-avx2-epyc/own_winograd_f43_panel_gemm.md.)
  const bool avx2 = cpu_info().avx2_fma();
  for (int64_t k = k0; k < k0 + kt;) {
    const int64_t p0 = k / kPanelCols * kPanelCols, width = std::min(kPanelCols, K - p0);
    const bool whole = k == p0 && width == kPanelCols && k + kPanelCols <= k0 + kt;
    const float* bp = b + p0 * C + (k - p0);
    float* op = out + (k - k0);
    for (int64_t r = 0; r < rows; r += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, rows - r));
      if (whole)
        kernel_rows<2>(avx2, mr, C, a + r * lda, lda, bp, width, op + r * ldo, ldo);
      else
        kernel_rows<1>(avx2, mr, C, a + r * lda, lda, bp, width, op + r * ldo, ldo);
    }
    k += whole ? kPanelCols : 8;
  }
}

}  // namespace rn50::onednn
