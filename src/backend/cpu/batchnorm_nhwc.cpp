// rn50: training batch normalisation of bf16 NHWC activations (see batchnorm_nhwc.h).
// Why our own loops: BatchNorm is memory-bound, and oneDNN 2.6's bf16 nspc kernel
// (bnorm_jit:avx512_core_bf16) takes as long as its f32 one on the same shapes although it moves
// half the bytes (ResNet-50 batch 32 training, per step: forward 221 vs 237 ms, backward 370 vs
// 411 ms on a 2-core Sapphire Rapids). The element-wise passes are plain C++ that the compiler
// vectorises over the channels (the innermost, contiguous dimension); the statistics passes run
// AVX-512 tiles where the build targets AVX-512 (with a plain C++ fallback that gives the same
// bits, tested against each other). bf16 widens exactly to f32 by a
// shift, results narrow once with round-to-nearest-even (core/bf16.h), and the ReLU's mask in
// the backward is y's sign bit (a bf16 y is > 0 exactly when its bits, read as int16, are > 0).
// Per-channel sums: each thread sums chunks of kChunk rows in f32 (short, so little rounding),
// adds each chunk into its own f64 totals, and the threads' totals are added in thread order
// after the loop: with OpenMP's static schedule the result does not depend on timing.
#include "backend/cpu/batchnorm_nhwc.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/bf16.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define RN50_BN_AVX512 1
#else
#define RN50_BN_AVX512 0
#endif

namespace rn50::onednn {

namespace {

constexpr int64_t kChunk = 64;

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

/// The forward's element-wise pass: y = max(x * k + b [+ z], lo), rounded once to bf16 (lo is
/// 0 for a ReLU, -inf otherwise; a NaN stays NaN). The residual z is read when kResidual.
template <bool kResidual>
void apply_rows(const uint16_t* x, const uint16_t* z, uint16_t* y, int64_t M, int64_t C,
                const float* k, const float* b, float lo) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r) {
    const int64_t o = r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float v = bf16_to_float(x[o + c]) * k[c] + b[c];
      if constexpr (kResidual) v += bf16_to_float(z[o + c]);
      y[o + c] = float_to_bf16(v < lo ? lo : v);  // std::max would not vectorise
    }
  }
}

/// The backward's gradient reaching the normalisation: dy, or 0 where the ReLU's y <= 0.
inline float relu_grad(bool relu, const uint16_t* y, const uint16_t* dy, int64_t i) {
  const float g = bf16_to_float(dy[i]);
  return !relu || static_cast<int16_t>(y[i]) > 0 ? g : 0.f;
}

#if RN50_BN_AVX512
// The forward's statistics pass in AVX-512 tiles of 128 (or 32) channels x a chunk's rows, with
// the sums in registers: the row loops keep them in memory (a load and a store per term and row)
// and read x at 7-11 GB/s where a register-held sum of the same data reads 20-29 GB/s on a 2-core
// Sapphire Rapids; the whole forward took 10-15% less time on ResNet-50's shapes. (The
// backward's pass reads three tensors and gained nothing from tiles: it keeps the row loops.)
// The 32 bf16 values of a tile row widen exactly as two f32 vectors, the even-indexed channels
// (bits << 16) and the odd ones (bits & 0xffff0000); each channel's terms are added in the same
// order, with the same fused multiply-adds, as by the row loops.

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
/// tiles of W x 32 channels (W = 4, or what is left).
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

void fwd_chunk_avx512(const uint16_t* x, int64_t C, const float* shift, int64_t r0, int64_t r1,
                      float* a, float* b) {
  int64_t c0 = 0;
  for (; c0 + 128 <= C; c0 += 128) fwd_tile<4>(x, C, shift, r0, r1, c0, a, b);
  for (; c0 < C; c0 += 32) fwd_tile<1>(x, C, shift, r0, r1, c0, a, b);
}

#endif

/// Whether the AVX-512 tiles take the forward statistics of a layer with C channels.
bool tiled(int64_t C, BnLoops loops) {
#if RN50_BN_AVX512
  return loops == BnLoops::fastest && C % 32 == 0;
#else
  (void)C;
  (void)loops;
  return false;
#endif
}

}  // namespace

void bn_bf16_nhwc_fwd_train(const uint16_t* x, const uint16_t* residual, uint16_t* y, int64_t M,
                            int64_t C, const float* gamma, const float* beta, float eps, bool relu,
                            float* save_mean, float* save_var, BnLoops loops) {
  std::vector<float> shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) shift[c] = bf16_to_float(x[c]);
  const float* sh = shift.data();
  std::vector<double> S, Q;
#if RN50_BN_AVX512
  if (tiled(C, loops))
    channel_sums(
        M, C,
        [&](int64_t r0, int64_t r1, float* a, float* b) {
          fwd_chunk_avx512(x, C, sh, r0, r1, a, b);
        },
        S, Q);
  else
#endif
    channel_sums(M, C,
                 by_rows(C,
                         [x, C, sh](int64_t r, float* s, float* q) {
                           const uint16_t* xr = x + r * C;
#pragma omp simd
                           for (int64_t c = 0; c < C; ++c) {
                             const float v = bf16_to_float(xr[c]) - sh[c];
                             s[c] += v;
                             q[c] += v * v;
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
    apply_rows<false>(x, nullptr, y, M, C, scale.data(), bias.data(), lo);
}

namespace {

/// The backward's two passes over M x C: `grad1(i)` gives element i's gradient reaching the
/// normalisation in the statistics pass (it may also store it), `grad2(i)` the same value in
/// the dx pass. Writes dx, dgamma, dbeta as bn_bf16_nhwc_bwd documents.
template <class Grad1, class Grad2>
void bwd_passes(const uint16_t* x, uint16_t* dx, int64_t M, int64_t C, const float* gamma,
                const float* mean, const float* save_var, float eps, float* dgamma, float* dbeta,
                Grad1 grad1, Grad2 grad2) {
  std::vector<double> S, Q;  // sum g, sum g * (x - mean)
  channel_sums(M, C,
               by_rows(C,
                       [=](int64_t r, float* s, float* q) {
                         const int64_t o = r * C;
#pragma omp simd
                         for (int64_t c = 0; c < C; ++c) {
                           const float g = grad1(o + c);
                           s[c] += g;
                           q[c] += g * (bf16_to_float(x[o + c]) - mean[c]);
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
      const float xm = bf16_to_float(x[o + c]) - mean[c];
      dx[o + c] = float_to_bf16(a0[c] * (g - a1[c] - xm * a2[c]));
    }
  }
}

}  // namespace

void bn_bf16_nhwc_bwd(const uint16_t* x, const uint16_t* y, const uint16_t* dy, uint16_t* dx,
                      int64_t M, int64_t C, const float* gamma, const float* save_mean,
                      const float* save_var, float eps, bool relu, float* dgamma, float* dbeta) {
  auto g = [=](int64_t i) { return relu_grad(relu, y, dy, i); };
  bwd_passes(x, dx, M, C, gamma, save_mean, save_var, eps, dgamma, dbeta, g, g);
}

void bn_bf16_nhwc_add_relu_bwd(const uint16_t* x, const uint16_t* y, const uint16_t* g1,
                               const uint16_t* g2, uint16_t* dres, uint16_t* dx, int64_t M,
                               int64_t C, const float* gamma, const float* save_mean,
                               const float* save_var, float eps, float* dgamma, float* dbeta) {
  // The statistics pass makes dres as add_relu_bwd / relu_bwd do (the sum rounded once, masked
  // where y <= 0) and sums the rounded value, so the result is the separate ops' bits.
  auto join = [=](int64_t i) {
    const float s =
        g2 != nullptr ? bf16_to_float(g1[i]) + bf16_to_float(g2[i]) : bf16_to_float(g1[i]);
    const uint16_t d = float_to_bf16(bf16_to_float(y[i]) > 0.f ? s : 0.f);
    dres[i] = d;
    return bf16_to_float(d);
  };
  auto stored = [=](int64_t i) { return bf16_to_float(dres[i]); };
  bwd_passes(x, dx, M, C, gamma, save_mean, save_var, eps, dgamma, dbeta, join, stored);
}

}  // namespace rn50::onednn
