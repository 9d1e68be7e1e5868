// rn50: the bf16 weight gradient of a 1x1 NHWC convolution as our own AVX-512 BF16 GEMM (see
// conv1x1_wgrad_bf16.h).
// Why: on CPUs with AVX-512 BF16 but no AMX, oneDNN 2.6 computes these with its
// jit_bf16_1x1:avx512_core_bf16 kernel, which is weakest where the outputs are smallest: at
// ResNet-50's 7x7 layers, batch 32, 255-315 GFLOP/s on a 2-core AMD EPYC whose bf16 peak
// (`rn50 bench peak`) is 474; this GEMM reaches 360-390 there (bench_micro's
// BM_Conv1x1BwdWeightsBf16; conv1x1_own_wgrad_allowed holds the figures). oneDNN's matmul with a
// transposed dY was no faster in the step. The weight gradient is a GEMM whose reduction runs
// over the pixels, the slow dimension of both NHWC operands, so vdpbf16ps (which sums products
// of element PAIRS along the reduction) needs two consecutive pixels interleaved in both
// operands: packed here per chunk of pixels into small cache-resident buffers (the B panel
// 32 KiB, the A block of the thread's rows), the register tile 6 rows x 64 channels (24 f32
// accumulators) held over the whole chunk. At 28x28 and 56x56 outputs the packing and the
// streaming of the large operands from memory leave it level with oneDNN or behind (the tile
// itself runs at 90% of the peak from the caches).
#include "backend/cpu/conv1x1_wgrad_bf16.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/check.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && !defined(__AMX_BF16__)
#include <immintrin.h>
#define RN50_WGRAD_BF16 1
#else
#define RN50_WGRAD_BF16 0
#endif

namespace rn50::onednn {

namespace {

constexpr int64_t kPanel = 64;  ///< dW columns (input channels) of a register tile: 4 vectors
constexpr int kRows = 6;        ///< dW rows (output channels) of a register tile
constexpr int64_t kPc = 256;    ///< pixels of a chunk (kPc / 2 pairs), even

#if RN50_WGRAD_BF16

/// How the threads share dW: columns [n0, n1) (multiples of kPanel) and rows [m0, m1).
struct Share {
  int64_t m0, m1, n0, n1;
};

/// Thread t of nt: runs of kRows rows when dW has at least as many rows as columns (each thread
/// then reads its part of every dY row and all of X), else whole panels of columns when they
/// split evenly between the threads (each reads all of dY and its part of X): the larger
/// operand is read once.
Share share_of(int t, int nt, int64_t K, int64_t C) {
  const int64_t panels = C / kPanel;
  if (K < C && panels % nt == 0) {
    const int64_t per = panels / nt;
    return {0, K, t * per * kPanel, (t + 1) * per * kPanel};
  }
  const int64_t tiles = (K + kRows - 1) / kRows;
  const int64_t a = tiles * t / nt, b = tiles * (t + 1) / nt;
  return {std::min(K, a * kRows), std::min(K, b * kRows), 0, C};
}

/// Lane order for interleaving two rows of 32 bf16 (u, v): the first vector takes
/// u0 v0 u1 v1 .. u15 v15, the second u16 v16 .. u31 v31 (index i < 32 picks u[i], 32 + i v[i]).
struct Interleave {
  __m512i lo, hi;
  Interleave() {
    alignas(64) uint16_t l[32], h[32];
    for (int i = 0; i < 16; ++i) {
      l[2 * i] = static_cast<uint16_t>(i);
      l[2 * i + 1] = static_cast<uint16_t>(32 + i);
      h[2 * i] = static_cast<uint16_t>(16 + i);
      h[2 * i + 1] = static_cast<uint16_t>(48 + i);
    }
    lo = _mm512_load_si512(l);
    hi = _mm512_load_si512(h);
  }
};

/// Writes n (<= 32) pairs (u[i], v[i]) as 2n bf16 at out; v null: pairs (u[i], 0).
inline void interleave32(const Interleave& il, const uint16_t* u, const uint16_t* v, int64_t n,
                         uint16_t* out) {
  const __mmask32 m = n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
  const __m512i a = _mm512_maskz_loadu_epi16(m, u);
  const __m512i b = v != nullptr ? _mm512_maskz_loadu_epi16(m, v) : _mm512_setzero_si512();
  const __m512i lo = _mm512_permutex2var_epi16(a, il.lo, b);
  const __m512i hi = _mm512_permutex2var_epi16(a, il.hi, b);
  if (n >= 32) {
    _mm512_storeu_si512(out, lo);
    _mm512_storeu_si512(out + 32, hi);
  } else {  // 2n elements: the first min(2n, 32) from lo, the rest from hi
    const int64_t n2 = 2 * n;
    const __mmask32 mlo = n2 >= 32 ? ~__mmask32{0} : (__mmask32{1} << n2) - 1;
    _mm512_mask_storeu_epi16(out, mlo, lo);
    if (n2 > 32) _mm512_mask_storeu_epi16(out + 32, (__mmask32{1} << (n2 - 32)) - 1, hi);
  }
}

/// Packs `len` pixel rows (pointers rows[i], each `n` bf16 starting at column `col`) as pairs:
/// out[q][j][2] = (rows[2q][col + j], rows[2q + 1][col + j]), the second 0 past len.
void pack_pairs(const Interleave& il, const uint16_t* const* rows, int64_t len, int64_t col,
                int64_t n, uint16_t* out) {
  for (int64_t q = 0; 2 * q < len; ++q) {
    const uint16_t* u = rows[2 * q] + col;
    const uint16_t* v = 2 * q + 1 < len ? rows[2 * q + 1] + col : nullptr;
    uint16_t* o = out + q * n * 2;
    for (int64_t j = 0; j < n; j += 32)
      interleave32(il, u + j, v != nullptr ? v + j : nullptr, std::min<int64_t>(32, n - j),
                   o + 2 * j);
  }
}

/// acc (MR rows x 64 columns of dW, f32, row stride ldc) += A . B over `pairs` pixel pairs:
/// a: the rows' pairs, 32-bit (two bf16) each, pair q of row r at a[q * lda + r]; b: the panel,
/// pair q's 64 columns at b + q * 128 (bf16, pairs interleaved). init: acc starts at 0.
template <int MR>
void tile(const int32_t* a, int64_t lda, const uint16_t* b, int64_t pairs, float* c, int64_t ldc,
          bool init) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < 4; ++v)
      acc[r][v] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + 16 * v);
  for (int64_t q = 0; q < pairs; ++q, a += lda, b += 128) {
    __m512bh bv[4];
    for (int v = 0; v < 4; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + 32 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(a[r]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

using TileFn = void (*)(const int32_t*, int64_t, const uint16_t*, int64_t, float*, int64_t, bool);
constexpr TileFn kTiles[kRows + 1] = {nullptr,  &tile<1>, &tile<2>, &tile<3>,
                                      &tile<4>, &tile<5>, &tile<6>};

/// One thread's share of dW: f32 sums into work[K][C], then rounded into dw[K][C].
void run_share(const Conv1x1Geo& g, const Share& s, const uint16_t* x, const uint16_t* dy,
               uint16_t* dw, float* work) {
  static const Interleave il;
  const int64_t OH = g.OH(), OW = g.OW(), P = g.N * OH * OW, C = g.C, K = g.K;
  const int64_t rows = s.m1 - s.m0;
  if (rows <= 0 || s.n1 <= s.n0) return;
  thread_local std::vector<uint16_t> apack, bpack;
  thread_local std::vector<const uint16_t*> xrows, dyrows;
  apack.resize(static_cast<size_t>(kPc * rows));
  bpack.resize(static_cast<size_t>(kPc * kPanel));
  // Output pixel p's rows of dY and X (its input pixel, at the stride) for the chunk from p0.
  xrows.resize(kPc);
  dyrows.resize(kPc);
  for (int64_t p0 = 0; p0 < P; p0 += kPc) {
    const int64_t len = std::min(kPc, P - p0), pairs = (len + 1) / 2;
    int64_t n = p0 / (OH * OW), oh = p0 / OW % OH, ow = p0 % OW;
    for (int64_t i = 0; i < len; ++i) {
      xrows[i] = x + ((n * g.H + oh * g.stride) * g.W + ow * g.stride) * C;
      dyrows[i] = dy + (p0 + i) * K;
      if (++ow == OW) {
        ow = 0;
        if (++oh == OH) oh = 0, ++n;
      }
    }
    pack_pairs(il, dyrows.data(), len, s.m0, rows, apack.data());
    const auto* a32 = reinterpret_cast<const int32_t*>(apack.data());
    for (int64_t c0 = s.n0; c0 < s.n1; c0 += kPanel) {
      pack_pairs(il, xrows.data(), len, c0, kPanel, bpack.data());
      for (int64_t r = 0; r < rows; r += kRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kRows, rows - r));
        kTiles[mr](a32 + r, rows, bpack.data(), pairs, work + (s.m0 + r) * C + c0, C, p0 == 0);
      }
    }
  }
  // The sums rounded once to bf16 (vcvtneps2bf16: round to nearest even, as float_to_bf16).
  for (int64_t k = s.m0; k < s.m1; ++k)
    for (int64_t c = s.n0; c < s.n1; c += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(work + k * C + c));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dw + k * C + c), (__m256i)h);
    }
}

#endif

}  // namespace

bool conv1x1_wgrad_bf16_built() { return RN50_WGRAD_BF16 != 0; }

bool conv1x1_wgrad_bf16_fits(const Conv1x1Geo& g) {
  return conv1x1_wgrad_bf16_built() && g.N >= 1 && g.H >= 1 && g.W >= 1 && g.K >= 1 &&
         g.stride >= 1 && g.C >= kPanel && g.C % kPanel == 0;
}

int64_t conv1x1_wgrad_bf16_workspace(const Conv1x1Geo& g) { return g.K * g.C; }

void conv1x1_wgrad_bf16(const Conv1x1Geo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                        float* work) {
  RN50_CHECK(conv1x1_wgrad_bf16_fits(g),
             "conv1x1_wgrad_bf16: no kernel for N={} H={} W={} C={} K={} stride {} in this "
             "build (needs AVX-512 BF16 and C a multiple of {})",
             g.N, g.H, g.W, g.C, g.K, g.stride, kPanel);
#if RN50_WGRAD_BF16
#pragma omp parallel
  run_share(g, share_of(omp_get_thread_num(), omp_get_num_threads(), g.K, g.C), x, dy, dw, work);
#else
  (void)x, (void)dy, (void)dw, (void)work;
#endif
}

}  // namespace rn50::onednn
