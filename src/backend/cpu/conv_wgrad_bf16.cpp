// rn50: the bf16 weight gradient of an NHWC convolution as our own AVX-512 BF16 GEMM (see
// conv_wgrad_bf16.h).
// Why: on CPUs with AVX-512 BF16 but no AMX, oneDNN 2.6 computes these with its
// jit_bf16_1x1 / jit_bf16 avx512_core_bf16 kernels, which are weakest where the outputs are
// smallest: at ResNet-50's 7x7 layers, batch 32, 255-315 GFLOP/s for the 1x1s on a 2-core AMD
// EPYC whose bf16 peak (`rn50 bench peak`) is 474; this GEMM reaches 360-390 there (bench_micro's
// BM_Conv1x1BwdWeightsBf16 and BM_ConvBwdWeightsBf16Own; conv_own_wgrad_allowed holds the
// figures). oneDNN's matmul with a transposed dY was no faster in the step. The weight gradient
// is a GEMM whose reduction runs over the pixels, the slow dimension of both NHWC operands, so
// vdpbf16ps (which sums products of element PAIRS along the reduction) needs two consecutive
// pixels interleaved in both operands: packed here per chunk of pixels into small cache-resident
// buffers (the B panel 32 KiB, the A block of the thread's rows), the register tile 6 rows x 64
// channels (24 f32 accumulators) held over the whole chunk. A KxK conv is the same GEMM with
// R x S times the columns, each tap's panels packed from the input pixels that tap reads (the
// pixels whose tap falls in the padding left out of both operands). At 28x28 and 56x56 outputs
// the packing and the streaming of the large operands from memory leave it level with oneDNN or
// behind (the tile itself runs at 90% of the peak from the caches).
#include "backend/cpu/conv_wgrad_bf16.h"

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

/// One thread's share of dW: f32 sums into work[K][R*S*C] (columns tap by tap), then rounded
/// into dw (OIHW, or OHWI with g.ohwi).
void run_share(const WgradGeo& g, const Share& s, const uint16_t* x, const uint16_t* dy,
               uint16_t* dw, float* work) {
  static const Interleave il;
  const int64_t OH = g.OH(), OW = g.OW(), P = g.N * OH * OW, C = g.C, K = g.K, cols = g.cols();
  const int64_t rows = s.m1 - s.m0, taps = g.R * g.S;
  if (rows <= 0 || s.n1 <= s.n0) return;
  thread_local std::vector<uint16_t> apack, tapack, bpack;
  thread_local std::vector<const uint16_t*> xrows, dyrows, tdyrows;
  thread_local std::vector<int64_t> origin;  // per pixel of the chunk: n, ih0, iw0
  apack.resize(static_cast<size_t>(kPc * rows));
  tapack.resize(static_cast<size_t>(kPc * rows));
  tdyrows.resize(kPc);
  bpack.resize(static_cast<size_t>(kPc * kPanel));
  xrows.resize(kPc);
  dyrows.resize(kPc);
  origin.resize(3 * kPc);
  for (int64_t p0 = 0; p0 < P; p0 += kPc) {
    const int64_t len = std::min(kPc, P - p0), pairs = (len + 1) / 2;
    // Output pixel p's row of dY, and where its window starts in x (the tap (0, 0)).
    int64_t n = p0 / (OH * OW), oh = p0 / OW % OH, ow = p0 % OW;
    for (int64_t i = 0; i < len; ++i) {
      dyrows[i] = dy + (p0 + i) * K;
      origin[3 * i] = n;
      origin[3 * i + 1] = oh * g.stride - g.pad;
      origin[3 * i + 2] = ow * g.stride - g.pad;
      if (++ow == OW) {
        ow = 0;
        if (++oh == OH) oh = 0, ++n;
      }
    }
    pack_pairs(il, dyrows.data(), len, s.m0, rows, apack.data());
    const auto* a32 = reinterpret_cast<const int32_t*>(apack.data());
    // Per tap, only the pixels whose input pixel lies inside the image: where the tap falls in
    // the padding the product is zero, so those pixels leave both operands (dY packed again for
    // the tap, a small cost beside its panels' tiles; 18% of the products at 7x7 with padding 1).
    int64_t tap = -1, tlen = len, tpairs = pairs;
    const int32_t* ta = a32;
    for (int64_t c0 = s.n0; c0 < s.n1; c0 += kPanel) {
      if (c0 / C != tap) {
        tap = c0 / C;
        const int64_t r = tap / g.S, q = tap % g.S;
        tlen = 0;
        for (int64_t i = 0; i < len; ++i) {
          const int64_t ih = origin[3 * i + 1] + r, iw = origin[3 * i + 2] + q;
          if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
          xrows[tlen] = x + ((origin[3 * i] * g.H + ih) * g.W + iw) * C;
          tdyrows[tlen++] = dyrows[i];
        }
        tpairs = (tlen + 1) / 2;
        ta = a32;
        if (tlen < len) {
          pack_pairs(il, tdyrows.data(), tlen, s.m0, rows, tapack.data());
          ta = reinterpret_cast<const int32_t*>(tapack.data());
        }
      }
      pack_pairs(il, xrows.data(), tlen, c0 % C, kPanel, bpack.data());
      for (int64_t r = 0; r < rows; r += kRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kRows, rows - r));
        kTiles[mr](ta + r, rows, bpack.data(), tpairs, work + (s.m0 + r) * cols + c0, cols,
                   p0 == 0);
      }
    }
  }
  // The sums rounded once to bf16 (vcvtneps2bf16: round to nearest even, as float_to_bf16),
  // column (tap, c) of row k going to dw[k][c][tap] (OIHW), or to dw[k][tap][c] (OHWI: the
  // GEMM's own order).
  for (int64_t k = s.m0; k < s.m1; ++k)
    for (int64_t c = s.n0; c < s.n1; c += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(work + k * cols + c));
      if (taps == 1 || g.ohwi) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dw + k * cols + c), (__m256i)h);
      } else {
        alignas(32) uint16_t v[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(v), (__m256i)h);
        const int64_t t = c / C, ci = c % C;
        uint16_t* o = dw + (k * C + ci) * taps + t;
        for (int j = 0; j < 16; ++j) o[j * taps] = v[j];
      }
    }
}

#endif

}  // namespace

bool conv_wgrad_bf16_built() { return RN50_WGRAD_BF16 != 0; }

bool conv_wgrad_bf16_fits(const WgradGeo& g) {
  return conv_wgrad_bf16_built() && g.N >= 1 && g.H >= 1 && g.W >= 1 && g.K >= 1 &&
         g.stride >= 1 && g.R >= 1 && g.S >= 1 && g.pad >= 0 && g.OH() >= 1 && g.OW() >= 1 &&
         g.C >= kPanel && g.C % kPanel == 0;
}

int64_t conv_wgrad_bf16_workspace(const WgradGeo& g) { return g.K * g.cols(); }

void conv_wgrad_bf16(const WgradGeo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                     float* work) {
  RN50_CHECK(conv_wgrad_bf16_fits(g),
             "conv_wgrad_bf16: no kernel for N={} H={} W={} C={} K={} {}x{} stride {} pad {} in "
             "this build (needs AVX-512 BF16 and C a multiple of {})",
             g.N, g.H, g.W, g.C, g.K, g.R, g.S, g.stride, g.pad, kPanel);
#if RN50_WGRAD_BF16
#pragma omp parallel
  run_share(g, share_of(omp_get_thread_num(), omp_get_num_threads(), g.K, g.cols()), x, dy, dw,
            work);
#else
  (void)x, (void)dy, (void)dw, (void)work;
#endif
}

}  // namespace rn50::onednn
