// rn50: training batch normalisation of NHWC activations in bf16 or f32 (see batchnorm_nhwc.h).
// Why our own loops: BatchNorm is memory-bound, and oneDNN 2.6's bf16 nspc kernel
// (bnorm_jit:avx512_core_bf16) takes as long as its f32 one on the same shapes although it moves
// half the bytes (ResNet-50 batch 32 training, per step: forward 221 vs 237 ms, backward 370 vs 411
// ms on a 2-core Sapphire Rapids); and oneDNN 2.6's batch norm cannot add a residual, which the
// loops fuse in (the block's residual join) in bf16 and f32 alike. The element-wise passes are
// plain C++ that the compiler vectorises over the channels (the innermost, contiguous dimension);
// the statistics passes run AVX-512 tiles where the build targets AVX-512 (with a plain C++
// fallback that gives the same bits, tested against each other). bf16 widens exactly to f32 by a
// shift, results narrow once with round-to-nearest-even (core/bf16.h), and the ReLU's mask in the
// backward is y > 0 (for bf16 y's bits read as int16 > 0, the same test on the bits). Per-channel
// sums: each thread sums chunks of kChunk rows in f32 (short, so little rounding), adds each chunk
// into its own f64 totals, and the threads' totals are added in thread order after the loop: with
// OpenMP's static schedule the result does not depend on timing.
#include "backend/cpu/batchnorm_nhwc.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define RN50_BN_AVX512 1
#else
#define RN50_BN_AVX512 0
#endif

namespace rn50::onednn {

namespace {

constexpr int64_t kChunk = 64;

/// An element as f32 (exact) and an f32 value rounded once to the element type.
inline float widen(uint16_t v) { return bf16_to_float(v); }
inline float widen(float v) { return v; }
template <class T>
T narrow(float v);
template <>
inline uint16_t narrow<uint16_t>(float v) {
  return float_to_bf16(v);
}
template <>
inline float narrow<float>(float v) {
  return v;
}

/// v * v + q, fused (one rounding) where the build targets FMA, as the AVX-512 tiles'
/// _mm512_fmadd_ps is: spelled out so that the row loops give the tiles' bits whatever the
/// compiler's contraction of a * b + c (none at -O0, as in the sanitized build).
inline float square_add(float v, float q) {
#if defined(__FMA__)
  return std::fma(v, v, q);
#else
  return v * v + q;
#endif
}

/// Whether a forward output is > 0 (the ReLU's mask): a bf16 is exactly when its bits, read as
/// int16, are.
inline bool positive(uint16_t y) { return static_cast<int16_t>(y) > 0; }
inline bool positive(float y) { return y > 0.f; }

/// Per-channel sums over the M rows of two per-element terms. `chunk(r0, r1, a, b)` writes the
/// f32 sums of rows [r0, r1) into a[C] and b[C]. Returns the totals in A[C] and B[C] (f64).
template <class Chunk>
void channel_sums(int64_t M, int64_t C, Chunk&& chunk, std::vector<double>& A,
                  std::vector<double>& B) {
  const int nt = omp_get_max_threads();
  std::vector<double> TA(static_cast<size_t>(nt * C), 0.0), TB(TA.size(), 0.0);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    double* ta = TA.data() + t * C;
    double* tb = TB.data() + t * C;
#pragma omp for schedule(static)
    for (int64_t r0 = 0; r0 < M; r0 += kChunk) {
      chunk(r0, std::min(M, r0 + kChunk), a.data(), b.data());
      for (int64_t c = 0; c < C; ++c) {
        ta[c] += a[c];
        tb[c] += b[c];
      }
    }
  }
  A.assign(static_cast<size_t>(C), 0.0);
  B.assign(static_cast<size_t>(C), 0.0);
  for (int t = 0; t < nt; ++t)
    for (int64_t c = 0; c < C; ++c) {
      A[c] += TA[t * C + c];
      B[c] += TB[t * C + c];
    }
}

/// A chunk's sums row by row over all C channels: `row(r, a, b)` adds row r's terms.
template <class Row>
auto by_rows(int64_t C, Row row) {
  return [C, row](int64_t r0, int64_t r1, float* a, float* b) {
    std::fill(a, a + C, 0.f);
    std::fill(b, b + C, 0.f);
    for (int64_t r = r0; r < r1; ++r) row(r, a, b);
  };
}

/// The forward's element-wise pass: y = max(x * k + b [+ z], lo), rounded once to T (lo is
/// 0 for a ReLU, -inf otherwise; a NaN stays NaN). The residual z is read when kResidual.
template <bool kResidual, class T>
void apply_rows(const T* x, const T* z, T* y, int64_t M, int64_t C, const float* k,
                const float* b, float lo) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r) {
    const int64_t o = r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float v = widen(x[o + c]) * k[c] + b[c];
      if constexpr (kResidual) v += widen(z[o + c]);
      y[o + c] = narrow<T>(v < lo ? lo : v);  // std::max would not vectorise
    }
  }
}

/// The backward's gradient reaching the normalisation: dy, or 0 where the ReLU's y <= 0.
template <class T>
inline float relu_grad(bool relu, const T* y, const T* dy, int64_t i) {
  const float g = widen(dy[i]);
  return !relu || positive(y[i]) ? g : 0.f;
}

#if RN50_BN_AVX512
// The forward's statistics pass in AVX-512 tiles of 4 vectors (or 1) x a chunk's rows (bf16: 128 or
// 32 channels, f32: 64 or 16), with the sums in registers: the row loops keep them in memory (a
// load and a store per term and row) and read x at 7-11 GB/s where a register-held sum of the same
// data reads 20-29 GB/s on a 2-core Sapphire Rapids; the whole forward took 10-15% less time on
// ResNet-50's shapes. (The backward's pass reads three tensors and gained nothing from tiles: it
// keeps the row loops.) The 32 bf16 values of a tile row widen exactly as two f32 vectors, the
// even-indexed channels (bits << 16) and the odd ones (bits & 0xffff0000); each channel's terms are
// added in the same order, with the same fused multiply-adds, as by the row loops.

/// Channels c0 .. c0+31 of a per-channel f32 array, split into even- and odd-indexed lanes.
inline void split_even_odd(const float* v, __m512& even, __m512& odd) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
  const __m512 lo = _mm512_loadu_ps(v), hi = _mm512_loadu_ps(v + 16);
  even = _mm512_permutex2var_ps(lo, ie, hi);
  odd = _mm512_permutex2var_ps(lo, io, hi);
}

/// 32 bf16 values as f32: the even-indexed ones and the odd-indexed ones (exact).
inline void widen_even_odd(__m512i w, __m512& even, __m512& odd) {
  even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));  // maskz: no GCC 12 warning
  odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

/// Stores even/odd lane sums back in channel order: a[c0 + 2i] = even[i], a[c0 + 2i + 1] = odd[i].
inline void store_even_odd(__m512 even, __m512 odd, float* a) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  _mm512_storeu_ps(a, _mm512_permutex2var_ps(even, lo, odd));
  _mm512_storeu_ps(a + 16, _mm512_permutex2var_ps(even, hi, odd));
}

/// Forward statistics of a chunk: a = sum (x - shift), b = sum (x - shift)^2 per channel, in
/// tiles of W x 32 bf16 channels (W = 4, or what is left).
template <int W>
void fwd_tile(const uint16_t* x, int64_t C, const float* shift, int64_t r0, int64_t r1, int64_t c0,
              float* a, float* b) {
  __m512 she[W], sho[W], se[W], so[W], qe[W], qo[W];
  for (int j = 0; j < W; ++j) {
    split_even_odd(shift + c0 + 32 * j, she[j], sho[j]);
    se[j] = so[j] = qe[j] = qo[j] = _mm512_setzero_ps();
  }
  const uint16_t* p = x + r0 * C + c0;
  for (int64_t r = r0; r < r1; ++r, p += C)
    for (int j = 0; j < W; ++j) {
      __m512 ve, vo;
      widen_even_odd(_mm512_loadu_si512(p + 32 * j), ve, vo);
      ve = _mm512_sub_ps(ve, she[j]);
      vo = _mm512_sub_ps(vo, sho[j]);
      se[j] = _mm512_add_ps(se[j], ve);
      so[j] = _mm512_add_ps(so[j], vo);
      qe[j] = _mm512_fmadd_ps(ve, ve, qe[j]);
      qo[j] = _mm512_fmadd_ps(vo, vo, qo[j]);
    }
  for (int j = 0; j < W; ++j) {
    store_even_odd(se[j], so[j], a + c0 + 32 * j);
    store_even_odd(qe[j], qo[j], b + c0 + 32 * j);
  }
}

/// The same over f32 activations, in tiles of W x 16 channels (no widening, no lane split).
template <int W>
void fwd_tile(const float* x, int64_t C, const float* shift, int64_t r0, int64_t r1, int64_t c0,
              float* a, float* b) {
  __m512 sh[W], s[W], q[W];
  for (int j = 0; j < W; ++j) {
    sh[j] = _mm512_loadu_ps(shift + c0 + 16 * j);
    s[j] = q[j] = _mm512_setzero_ps();
  }
  const float* p = x + r0 * C + c0;
  for (int64_t r = r0; r < r1; ++r, p += C)
    for (int j = 0; j < W; ++j) {
      const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(p + 16 * j), sh[j]);
      s[j] = _mm512_add_ps(s[j], v);
      q[j] = _mm512_fmadd_ps(v, v, q[j]);
    }
  for (int j = 0; j < W; ++j) {
    _mm512_storeu_ps(a + c0 + 16 * j, s[j]);
    _mm512_storeu_ps(b + c0 + 16 * j, q[j]);
  }
}

#endif

/// The channels of one AVX-512 vector of T.
template <class T>
constexpr int64_t kLanes = 64 / static_cast<int64_t>(sizeof(T));

/// Whether the AVX-512 tiles take the forward statistics of a layer with C channels.
template <class T>
bool tiled(int64_t C, BnLoops loops) {
#if RN50_BN_AVX512
  return loops == BnLoops::fastest && C % kLanes<T> == 0;
#else
  (void)C;
  (void)loops;
  return false;
#endif
}

/// Forward statistics of rows [r0, r1): AVX-512 tiles of 4 vectors, then single vectors.
template <class T>
void fwd_chunk_tiled(const T* x, int64_t C, const float* shift, int64_t r0, int64_t r1, float* a,
                     float* b) {
#if RN50_BN_AVX512
  constexpr int64_t L = kLanes<T>;
  int64_t c0 = 0;
  for (; c0 + 4 * L <= C; c0 += 4 * L) fwd_tile<4>(x, C, shift, r0, r1, c0, a, b);
  for (; c0 < C; c0 += L) fwd_tile<1>(x, C, shift, r0, r1, c0, a, b);
#else
  (void)x, (void)C, (void)shift, (void)r0, (void)r1, (void)a, (void)b;
  RN50_FAIL("batchnorm: AVX-512 statistics tiles asked for in a build without AVX-512");
#endif
}

}  // namespace

template <class T>
void bn_nhwc_fwd_train(const T* x, const T* residual, T* y, int64_t M, int64_t C,
                       const float* gamma, const float* beta, float eps, bool relu,
                       float* save_mean, float* save_var, BnLoops loops) {
  std::vector<float> shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) shift[c] = widen(x[c]);
  const float* sh = shift.data();
  std::vector<double> S, Q;
  if (tiled<T>(C, loops))
    channel_sums(
        M, C,
        [&](int64_t r0, int64_t r1, float* a, float* b) {
          fwd_chunk_tiled(x, C, sh, r0, r1, a, b);
        },
        S, Q);
  else
    channel_sums(M, C,
                 by_rows(C,
                         [x, C, sh](int64_t r, float* s, float* q) {
                           const T* xr = x + r * C;
#pragma omp simd
                           for (int64_t c = 0; c < C; ++c) {
                             const float v = widen(xr[c]) - sh[c];
                             s[c] += v;
                             q[c] = square_add(v, q[c]);
                           }
                         }),
                 S, Q);
  std::vector<float> scale(static_cast<size_t>(C)), bias(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double m = S[c] / static_cast<double>(M);
    const double var = std::max(0.0, Q[c] / static_cast<double>(M) - m * m);
    save_mean[c] = static_cast<float>(m + sh[c]);
    save_var[c] = static_cast<float>(var);
    const float rstd = 1.f / std::sqrt(save_var[c] + eps);
    scale[c] = gamma[c] * rstd;
    bias[c] = beta[c] - save_mean[c] * scale[c];
  }
  const float lo = relu ? 0.f : -INFINITY;
  if (residual != nullptr)
    apply_rows<true>(x, residual, y, M, C, scale.data(), bias.data(), lo);
  else
    apply_rows<false, T>(x, nullptr, y, M, C, scale.data(), bias.data(), lo);
}

namespace {

/// The backward's two passes over M x C: `grad1(i)` gives element i's gradient reaching the
/// normalisation in the statistics pass (it may also store it), `grad2(i)` the same value in
/// the dx pass. Writes dx, dgamma, dbeta as bn_nhwc_bwd documents.
template <class T, class Grad1, class Grad2>
void bwd_passes(const T* x, T* dx, int64_t M, int64_t C, const float* gamma, const float* mean,
                const float* save_var, float eps, float* dgamma, float* dbeta, Grad1 grad1,
                Grad2 grad2) {
  std::vector<double> S, Q;  // sum g, sum g * (x - mean)
  channel_sums(M, C,
               by_rows(C,
                       [=](int64_t r, float* s, float* q) {
                         const int64_t o = r * C;
#pragma omp simd
                         for (int64_t c = 0; c < C; ++c) {
                           const float g = grad1(o + c);
                           s[c] += g;
                           q[c] += g * (widen(x[o + c]) - mean[c]);
                         }
                       }),
               S, Q);
  // dx = k0 * (g - k1 - (x - mean) * k2) with k0 = gamma * rstd, k1 = dbeta / M,
  // k2 = dgamma * rstd / M (xhat * dgamma / M = (x - mean) * rstd * dgamma / M).
  std::vector<float> k0(static_cast<size_t>(C)), k1(k0.size()), k2(k0.size());
  const double inv_m = 1.0 / static_cast<double>(M);
  for (int64_t c = 0; c < C; ++c) {
    const double rstd = 1.0 / std::sqrt(static_cast<double>(save_var[c]) + eps);
    dbeta[c] = static_cast<float>(S[c]);
    dgamma[c] = static_cast<float>(Q[c] * rstd);
    k0[c] = static_cast<float>(gamma[c] * rstd);
    k1[c] = static_cast<float>(S[c] * inv_m);
    k2[c] = static_cast<float>(Q[c] * rstd * rstd * inv_m);
  }
  const float *a0 = k0.data(), *a1 = k1.data(), *a2 = k2.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r) {
    const int64_t o = r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float g = grad2(o + c);
      const float xm = widen(x[o + c]) - mean[c];
      dx[o + c] = narrow<T>(a0[c] * (g - a1[c] - xm * a2[c]));
    }
  }
}

}  // namespace

template <class T>
void bn_nhwc_bwd(const T* x, const T* y, const T* dy, T* dx, int64_t M, int64_t C,
                 const float* gamma, const float* save_mean, const float* save_var, float eps,
                 bool relu, float* dgamma, float* dbeta) {
  auto g = [=](int64_t i) { return relu_grad(relu, y, dy, i); };
  bwd_passes(x, dx, M, C, gamma, save_mean, save_var, eps, dgamma, dbeta, g, g);
}

template <class T>
void bn_nhwc_add_relu_bwd(const T* x, const T* y, const T* g1, const T* g2, T* dres, T* dx,
                          int64_t M, int64_t C, const float* gamma, const float* save_mean,
                          const float* save_var, float eps, float* dgamma, float* dbeta) {
  // The statistics pass makes dres as add_relu_bwd / relu_bwd do (the sum rounded once, masked
  // where y <= 0) and sums the rounded value, so the result is the separate ops' bits.
  auto join = [=](int64_t i) {
    const float s = g2 != nullptr ? widen(g1[i]) + widen(g2[i]) : widen(g1[i]);
    const T d = narrow<T>(widen(y[i]) > 0.f ? s : 0.f);
    dres[i] = d;
    return widen(d);
  };
  auto stored = [=](int64_t i) { return widen(dres[i]); };
  bwd_passes(x, dx, M, C, gamma, save_mean, save_var, eps, dgamma, dbeta, join, stored);
}

#define RN50_BN_NHWC_INSTANTIATE(T)                                                            \
  template void bn_nhwc_fwd_train<T>(const T*, const T*, T*, int64_t, int64_t, const float*,   \
                                     const float*, float, bool, float*, float*, BnLoops);      \
  template void bn_nhwc_bwd<T>(const T*, const T*, const T*, T*, int64_t, int64_t,             \
                               const float*, const float*, const float*, float, bool, float*, \
                               float*);                                                        \
  template void bn_nhwc_add_relu_bwd<T>(const T*, const T*, const T*, const T*, T*, T*,        \
                                        int64_t, int64_t, const float*, const float*,          \
                                        const float*, float, float*, float*);
RN50_BN_NHWC_INSTANTIATE(uint16_t)
RN50_BN_NHWC_INSTANTIATE(float)
#undef RN50_BN_NHWC_INSTANTIATE

}  // namespace rn50::onednn
