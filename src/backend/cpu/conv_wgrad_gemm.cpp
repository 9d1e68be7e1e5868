// rn50: the weight gradient of an NHWC convolution as our own AVX-512 GEMM, in bf16 and in f32
// (see conv_wgrad_gemm.h).
// Why bf16: on CPUs with AVX-512 BF16 but no AMX, oneDNN 2.6 computes these with its
// jit_bf16_1x1 / jit_bf16 avx512_core_bf16 kernels, which are weakest where the outputs are
// smallest: at ResNet-50's 7x7 layers, batch 32, 255-315 GFLOP/s for the 1x1s on a 2-core AMD
// EPYC whose bf16 peak (`rn50 bench peak`) is 474; this GEMM reaches 360-390 there (bench_micro's
// BM_Conv1x1BwdWeightsBf16 and BM_ConvBwdWeightsBf16Own; conv_own_wgrad_faster holds the
// figures). oneDNN's matmul with a transposed dY was no faster in the step. The weight gradient
// is a GEMM whose reduction runs over the pixels, the slow dimension of both NHWC operands, so
// vdpbf16ps (which sums products of element PAIRS along the reduction) needs two consecutive
// pixels interleaved in both operands: packed here per chunk of pixels into small cache-resident
// buffers (the B panel 32 KiB, the A block of the thread's rows), the register tile 6 rows x 64
// channels (24 f32 accumulators) held over the whole chunk. A KxK conv is the same GEMM with
// R x S times the columns, each tap's panels packed from the input pixels that tap reads (the
// pixels whose tap falls in the padding left out of both operands). Outputs larger than 7x7 are
// split between the threads by pixel chunks, each thread streaming its own pixels of both
// operands into its own f32 partial and prefetching its next chunk's lines while the current
// chunk's tiles run; the partials are added after a barrier. There it is level with oneDNN or
// ahead by up to 10% (the 1x1s that are strided or widen fourfold); the packing still costs it
// 10-12% at 56x56 (timed by skipping it) and the tile itself runs at 91% of the peak from
// the caches over 128 pixel pairs.
// Why f32: the same GEMM with one pixel per step (vfmadd231ps, the A element broadcast from a
// block packed tile by tile) and chunks of 64 pixels (a 16 KiB panel); oneDNN 2.6's
// jit:avx512_core f32 kernels for the 1x1 weight gradients reach 120-330 GFLOP/s inside a
// ResNet-50 step on a 2-core Zen 5 EPYC whose f32 peak is 415-449, and this GEMM is ahead of
// them for the 1x1s that keep or widen the channels; on a Zen 4 EPYC (AVX-512 on 256-bit
// units, f32 peak 236) only for 64->256 at 56x56 (conv_own_wgrad_faster holds the
// comparisons, per CPU generation). Its 6 x 64 tile alone runs at 207 GFLOP/s on one core
// from L1 (92% of the core's peak); at 56x56 the packing of operands streamed from memory
// holds it to 50-60%.
// Both are one driver (run_share) over an element-type policy (Bf16Gemm, F32Gemm): how a chunk
// is packed, the register tile, and how the sums are stored.
#include "backend/cpu/conv_wgrad_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/aligned.h"
#include "core/check.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define RN50_WGRAD_F32 1
#else
#define RN50_WGRAD_F32 0
#endif
#if RN50_WGRAD_F32 && defined(__AVX512BF16__) && defined(__AVX512BW__) && !defined(__AMX_BF16__)
#define RN50_WGRAD_BF16 1
#else
#define RN50_WGRAD_BF16 0
#endif

namespace rn50::onednn {

namespace {

constexpr int64_t kPanel = 64;   ///< dW columns (input channels) of a register tile: 4 vectors
constexpr int kRows = 6;         ///< dW rows (output channels) of a register tile
/// Pixels of a bf16 chunk: 128 steps of a pixel pair, a 32 KiB column panel.
constexpr int64_t kPcBf16 = 256;
/// Pixels of an f32 chunk: 64 steps of one pixel, a 16 KiB column panel (bench_micro's
/// BM_Conv1x1BwdWeightsF32 on a Zen 5 EPYC: chunks of 128 pixels were 0-20% slower at
/// ResNet-50's 1x1s, of 256 up to 45% slower at 56x56).
constexpr int64_t kPcF32 = 64;

/// Pixel chunks of the GEMM's reduction: ceil(N OH OW / pc).
int64_t chunks_of(const WgradGeo& g, int64_t pc) {
  return (g.N * g.OH() * g.OW() + pc - 1) / pc;
}

bool splits_pixels(const WgradGeo& g, int threads, int64_t pc) {
  return threads > 1 && g.OH() * g.OW() > 49 && chunks_of(g, pc) >= 2 * int64_t{threads};
}

/// The most f32 partials of K x cols a call with up to omp_get_max_threads() threads sums into:
/// the largest team that splits the pixels, else 1.
int64_t partials(const WgradGeo& g, int64_t pc) {
  int64_t most = 1;
  for (int t = 2; t <= omp_get_max_threads(); ++t)
    if (splits_pixels(g, t, pc)) most = t;
  return most;
}

/// Whether dW's order is the GEMM's own, columns tap by tap then channel: a 1x1, or OHWI.
bool in_gemm_order(const WgradGeo& g) { return g.R * g.S == 1 || g.ohwi; }

/// The geometry both kernels take (conv_wgrad_bf16_fits without the build).
bool geometry_fits(const WgradGeo& g) {
  return g.N >= 1 && g.H >= 1 && g.W >= 1 && g.K >= 1 && g.stride >= 1 && g.R >= 1 &&
         g.S >= 1 && g.pad >= 0 && g.OH() >= 1 && g.OW() >= 1 && g.C >= kPanel &&
         g.C % kPanel == 0;
}

#if RN50_WGRAD_F32

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

#if RN50_WGRAD_BF16

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

/// acc (MR rows x 64 columns of dW, f32, row stride ldc) += A . B over `pairs` pixel pairs:
/// a: the rows' pairs, 32-bit (two bf16) each, pair q of row r at a[q * lda + r]; b: the panel,
/// pair q's 64 columns at b + q * 128 (bf16, pairs interleaved). init: acc starts at 0.
template <int MR>
void tile_bf16(const int32_t* a, int64_t lda, const uint16_t* b, int64_t pairs, float* c,
               int64_t ldc, bool init) {
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

/// The bf16 policy: steps of two pixels interleaved (vdpbf16ps's pair layout, Intel SDM
/// "VDPBF16PS"), the sums rounded once to bf16.
struct Bf16Gemm {
  using Elem = uint16_t;  ///< what x, dy and dw hold (bf16 bits)
  using AWord = int32_t;  ///< one packed A entry: a pair of bf16
  static constexpr int64_t kPc = kPcBf16;
  static constexpr int64_t kStep = 2;  ///< pixels per step
  using Tile = void (*)(const AWord*, int64_t, const Elem*, int64_t, float*, int64_t, bool);
  static constexpr Tile kTiles[kRows + 1] = {nullptr,       &tile_bf16<1>, &tile_bf16<2>,
                                             &tile_bf16<3>, &tile_bf16<4>, &tile_bf16<5>,
                                             &tile_bf16<6>};

  /// Packs `len` pixel rows (pointers rows[i], each `n` bf16 starting at column `col`) as
  /// pairs: out[q][j][2] = (rows[2q][col + j], rows[2q + 1][col + j]), the second 0 past len.
  static void pack(const Elem* const* rows, int64_t len, int64_t col, int64_t n, Elem* out) {
    static const Interleave il;
    for (int64_t q = 0; 2 * q < len; ++q) {
      const uint16_t* u = rows[2 * q] + col;
      const uint16_t* v = 2 * q + 1 < len ? rows[2 * q + 1] + col : nullptr;
      uint16_t* o = out + q * n * 2;
      for (int64_t j = 0; j < n; j += 32)
        interleave32(il, u + j, v != nullptr ? v + j : nullptr, std::min<int64_t>(32, n - j),
                     o + 2 * j);
    }
  }
  /// The A block: the dY rows [col, col + n) of `len` pixels, pairs as B's (pair q of row r at
  /// word q * n + r), n * len elements.
  static int64_t a_elems(int64_t n) { return kPc * n; }
  static void pack_a(const Elem* const* rows, int64_t len, int64_t col, int64_t n, Elem* out) {
    pack(rows, len, col, n, out);
  }
  /// Where rows [r, r + kRows) start in the A block, and its stride per step (n rows).
  static int64_t a_at(int64_t r) { return r; }
  static int64_t a_ld(int64_t n) { return n; }
  /// 16 sums rounded to bf16 (vcvtneps2bf16: round to nearest even, as float_to_bf16).
  static void store16(Elem* o, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), (__m256i)_mm512_cvtneps_pbh(v));
  }
};

#endif  // RN50_WGRAD_BF16

/// acc (MR rows x 64 columns of dW, row stride ldc) += A . B over `steps` pixels: a: the rows'
/// dY values, pixel q's row r at a[q * lda + r] (broadcast); b: the panel, pixel q's 64 columns
/// at b + q * 64. init: acc starts at 0.
template <int MR>
void tile_f32(const float* a, int64_t lda, const float* b, int64_t steps, float* c, int64_t ldc,
              bool init) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < 4; ++v)
      acc[r][v] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + 16 * v);
  for (int64_t q = 0; q < steps; ++q, a += lda, b += 64) {
    __m512 bv[4];
    for (int v = 0; v < 4; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

/// The f32 policy: a pixel per step, the sums stored as they are.
struct F32Gemm {
  using Elem = float;
  using AWord = float;
  static constexpr int64_t kPc = kPcF32;
  static constexpr int64_t kStep = 1;
  using Tile = void (*)(const AWord*, int64_t, const Elem*, int64_t, float*, int64_t, bool);
  static constexpr Tile kTiles[kRows + 1] = {nullptr,      &tile_f32<1>, &tile_f32<2>,
                                             &tile_f32<3>, &tile_f32<4>, &tile_f32<5>,
                                             &tile_f32<6>};

  /// Copies `len` pixel rows (rows[i] + col, n floats each) to out[i][n].
  static void pack(const Elem* const* rows, int64_t len, int64_t col, int64_t n, Elem* out) {
    for (int64_t i = 0; i < len; ++i)
      std::memcpy(out + i * n, rows[i] + col, sizeof(float) * static_cast<size_t>(n));
  }
  /// The A block tile by tile: rows [col + 6t, col + 6t + 6) of pixel i at out[(t kPc + i) 6]
  /// (the last tile's missing rows left as they are), so that a register tile streams its rows
  /// contiguously (1.5 KiB per chunk) instead of touching a line of every pixel's row of n.
  static int64_t a_elems(int64_t n) { return (n + kRows - 1) / kRows * kRows * kPc; }
  /// Pixel by pixel (each dY row read once, in order), six floats at a time.
  static void pack_a(const Elem* const* rows, int64_t len, int64_t col, int64_t n, Elem* out) {
    const int64_t full = n / kRows, rest = n % kRows;
    const __mmask16 six = (1u << kRows) - 1, tail = static_cast<__mmask16>((1u << rest) - 1);
    for (int64_t i = 0; i < len; ++i) {
      const float* row = rows[i] + col;
      float* o = out + i * kRows;
      for (int64_t t = 0; t < full; ++t, row += kRows, o += kPc * kRows)
        _mm512_mask_storeu_ps(o, six, _mm512_maskz_loadu_ps(six, row));
      if (rest != 0) _mm512_mask_storeu_ps(o, tail, _mm512_maskz_loadu_ps(tail, row));
    }
  }
  static int64_t a_at(int64_t r) { return r / kRows * kPc * kRows; }
  static int64_t a_ld(int64_t /*n*/) { return kRows; }
  static void store16(Elem* o, __m512 v) { _mm512_storeu_ps(o, v); }
};

/// Prefetches (into L2) the lines of the next chunk's operands a thread streams in the pixel
/// split: dY rows [q0, q1) (contiguous) and, per output pixel, the row of x its middle tap reads
/// (exact for the 1x1s the split serves; a KxK's other taps mostly share the lines). Spread over
/// the current chunk's tile calls, so that they arrive while the tiles run from the caches.
class NextChunk {
 public:
  template <class Elem>
  void gather(const WgradGeo& g, const Elem* x, const Elem* dy, int64_t q0, int64_t q1) {
    lines_.clear();
    next_ = 0;
    const int64_t OH = g.OH(), OW = g.OW(), row_bytes = g.C * int64_t{sizeof(Elem)};
    const auto* b = reinterpret_cast<const char*>(dy + q0 * g.K);
    const auto* e = reinterpret_cast<const char*>(dy + q1 * g.K);
    for (const char* c = b; c < e; c += 64) lines_.push_back(c);
    int64_t n = q0 / (OH * OW), oh = q0 / OW % OH, ow = q0 % OW;
    for (int64_t i = q0; i < q1; ++i) {
      const int64_t ih = oh * g.stride - g.pad + g.R / 2, iw = ow * g.stride - g.pad + g.S / 2;
      if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) {
        const auto* row = reinterpret_cast<const char*>(x + ((n * g.H + ih) * g.W + iw) * g.C);
        for (int64_t o = 0; o < row_bytes; o += 64) lines_.push_back(row + o);
      }
      if (++ow == OW) {
        ow = 0;
        if (++oh == OH) oh = 0, ++n;
      }
    }
  }
  /// Issues the next ceil(lines / calls) prefetches: one share of `calls` in the chunk.
  void issue(int64_t calls) {
    const auto total = static_cast<int64_t>(lines_.size());
    const int64_t end = std::min(total, next_ + (total + calls - 1) / calls);
    for (; next_ < end; ++next_) _mm_prefetch(lines_[static_cast<size_t>(next_)], _MM_HINT_T1);
  }

 private:
  std::vector<const char*> lines_;
  int64_t next_ = 0;
};

/// One thread's share of the f32 sums: rows and columns of `s` over output pixels [pbeg, pend)
/// into work[K][R*S*C] (columns tap by tap; the share's entries overwritten). prefetch: fetch
/// each next chunk's operands ahead (NextChunk).
template <class G>
void run_share(const WgradGeo& g, const Share& s, const typename G::Elem* x,
               const typename G::Elem* dy, int64_t pbeg, int64_t pend, bool prefetch,
               float* work) {
  using Elem = typename G::Elem;
  using AWord = typename G::AWord;
  constexpr int64_t kPc = G::kPc, kStep = G::kStep;
  const int64_t OH = g.OH(), OW = g.OW(), C = g.C, K = g.K, cols = g.cols();
  const int64_t rows = s.m1 - s.m0;
  if (rows <= 0 || s.n1 <= s.n0 || pend <= pbeg) return;
  thread_local aligned_vector<Elem> apack, tapack, bpack;
  thread_local std::vector<const Elem*> xrows, dyrows, tdyrows;
  thread_local std::vector<int64_t> origin;  // per pixel of the chunk: n, ih0, iw0
  thread_local NextChunk next;
  apack.resize(static_cast<size_t>(G::a_elems(rows)));
  tapack.resize(static_cast<size_t>(G::a_elems(rows)));
  tdyrows.resize(kPc);
  bpack.resize(static_cast<size_t>(kPc * kPanel));
  xrows.resize(kPc);
  dyrows.resize(kPc);
  origin.resize(3 * kPc);
  const int64_t calls = (s.n1 - s.n0) / kPanel * ((rows + kRows - 1) / kRows);
  for (int64_t p0 = pbeg; p0 < pend; p0 += kPc) {
    const int64_t len = std::min(kPc, pend - p0), steps = (len + kStep - 1) / kStep;
    if (prefetch) next.gather(g, x, dy, p0 + len, std::min(pend, p0 + len + kPc));
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
    G::pack_a(dyrows.data(), len, s.m0, rows, apack.data());
    const auto* a = reinterpret_cast<const AWord*>(apack.data());
    // Per tap, only the pixels whose input pixel lies inside the image: where the tap falls in
    // the padding the product is zero, so those pixels leave both operands (dY packed again for
    // the tap, a small cost beside its panels' tiles; 18% of the products at 7x7 with padding 1).
    int64_t tap = -1, tlen = len, tsteps = steps;
    const AWord* ta = a;
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
        tsteps = (tlen + kStep - 1) / kStep;
        ta = a;
        if (tlen < len) {
          G::pack_a(tdyrows.data(), tlen, s.m0, rows, tapack.data());
          ta = reinterpret_cast<const AWord*>(tapack.data());
        }
      }
      G::pack(xrows.data(), tlen, c0 % C, kPanel, bpack.data());
      for (int64_t r = 0; r < rows; r += kRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kRows, rows - r));
        if (prefetch) next.issue(calls);
        G::kTiles[mr](ta + G::a_at(r), G::a_ld(rows), bpack.data(), tsteps,
                      work + (s.m0 + r) * cols + c0, cols, p0 == pbeg);
      }
    }
  }
}

/// Rows [k0, k1), columns [n0, n1) of dW: the sum of the `nparts` f32 partials (each K x cols,
/// partial i at work + i K cols, added in order) stored by G::store16, column (tap, c) of row k
/// going to dw[k][c][tap] (OIHW), or to dw[k][tap][c] (OHWI: the GEMM's own order).
template <class G>
void store_rows(const WgradGeo& g, int64_t k0, int64_t k1, int64_t n0, int64_t n1,
                const float* work, int nparts, typename G::Elem* dw) {
  const int64_t C = g.C, cols = g.cols(), taps = g.R * g.S, part = g.K * cols;
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t c = n0; c < n1; c += 16) {
      __m512 v = _mm512_loadu_ps(work + k * cols + c);
      for (int i = 1; i < nparts; ++i)
        v = _mm512_add_ps(v, _mm512_loadu_ps(work + i * part + k * cols + c));
      if (in_gemm_order(g)) {
        G::store16(dw + k * cols + c, v);
      } else {
        alignas(64) typename G::Elem b[16];
        G::store16(b, v);
        const int64_t t = c / C, ci = c % C;
        typename G::Elem* o = dw + (k * C + ci) * taps + t;
        for (int j = 0; j < 16; ++j) o[j * taps] = b[j];
      }
    }
}

/// Whether conv_wgrad<G> sums straight into dW: f32, dW in the GEMM's own order, its pixels
/// not split.
template <class G>
bool sums_into_dw(const WgradGeo& g, int threads) {
  return std::is_same_v<typename G::Elem, float> && in_gemm_order(g) &&
         !splits_pixels(g, threads, G::kPc);
}

/// The whole weight gradient with policy G (conv_wgrad_bf16, conv_wgrad_f32).
template <class G>
void conv_wgrad(const WgradGeo& g, const typename G::Elem* x, const typename G::Elem* dy,
                typename G::Elem* dw, float* work) {
  const int64_t P = g.N * g.OH() * g.OW(), K = g.K, cols = g.cols();
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (splits_pixels(g, nt, G::kPc)) {
      // Thread t sums its own run of pixel chunks over all of dW into partial t (work + t K
      // cols), then, after the barrier, adds the partials in thread order for its rows.
      const int64_t chunks = chunks_of(g, G::kPc);
      const int64_t c0 = chunks * t / nt, c1 = chunks * (t + 1) / nt;
      run_share<G>(g, Share{0, K, 0, cols}, x, dy, c0 * G::kPc, std::min(P, c1 * G::kPc), true,
                   work + t * K * cols);
#pragma omp barrier
      store_rows<G>(g, K * t / nt, K * (t + 1) / nt, 0, cols, work, nt, dw);
    } else {
      const Share s = share_of(t, nt, K, cols);
      const bool direct = sums_into_dw<G>(g, nt);
      float* sums = work;
      if constexpr (std::is_same_v<typename G::Elem, float>) {
        if (direct) sums = dw;
      }
      run_share<G>(g, s, x, dy, 0, P, nt == 1, sums);
      if (!direct) store_rows<G>(g, s.m0, s.m1, s.n0, s.n1, work, 1, dw);
    }
  }
}

#endif  // RN50_WGRAD_F32

}  // namespace

bool conv_wgrad_bf16_built() { return RN50_WGRAD_BF16 != 0; }

bool conv_wgrad_bf16_fits(const WgradGeo& g) {
  return conv_wgrad_bf16_built() && geometry_fits(g);
}

bool conv_wgrad_bf16_splits_pixels(const WgradGeo& g, int threads) {
  return splits_pixels(g, threads, kPcBf16);
}

int64_t conv_wgrad_bf16_workspace(const WgradGeo& g) {
  return g.K * g.cols() * partials(g, kPcBf16);
}

void conv_wgrad_bf16(const WgradGeo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                     float* work) {
  RN50_CHECK(conv_wgrad_bf16_fits(g),
             "conv_wgrad_bf16: no kernel for N={} H={} W={} C={} K={} {}x{} stride {} pad {} in "
             "this build (needs AVX-512 BF16 and C a multiple of {})",
             g.N, g.H, g.W, g.C, g.K, g.R, g.S, g.stride, g.pad, kPanel);
#if RN50_WGRAD_BF16
  conv_wgrad<Bf16Gemm>(g, x, dy, dw, work);
#else
  (void)x, (void)dy, (void)dw, (void)work;
#endif
}

bool conv_wgrad_f32_built() { return RN50_WGRAD_F32 != 0; }

bool conv_wgrad_f32_fits(const WgradGeo& g) { return conv_wgrad_f32_built() && geometry_fits(g); }

bool conv_wgrad_f32_splits_pixels(const WgradGeo& g, int threads) {
  return splits_pixels(g, threads, kPcF32);
}

int64_t conv_wgrad_f32_workspace(const WgradGeo& g) {
  const int64_t parts = partials(g, kPcF32);
  if (parts == 1 && in_gemm_order(g)) return 0;  // summed straight into dW
  return g.K * g.cols() * parts;
}

void conv_wgrad_f32(const WgradGeo& g, const float* x, const float* dy, float* dw, float* work) {
  RN50_CHECK(conv_wgrad_f32_fits(g),
             "conv_wgrad_f32: no kernel for N={} H={} W={} C={} K={} {}x{} stride {} pad {} in "
             "this build (needs AVX-512 and C a multiple of {})",
             g.N, g.H, g.W, g.C, g.K, g.R, g.S, g.stride, g.pad, kPanel);
#if RN50_WGRAD_F32
  conv_wgrad<F32Gemm>(g, x, dy, dw, work);
#else
  (void)x, (void)dy, (void)dw, (void)work;
#endif
}

}  // namespace rn50::onednn
