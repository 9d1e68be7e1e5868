// rn50: training batch normalisation of bf16 NHWC activations (see batchnorm_nhwc.h).
// Why our own loops: BatchNorm is memory-bound, and oneDNN 2.6's bf16 nspc kernel
// (bnorm_jit:avx512_core_bf16) takes as long as its f32 one on the same shapes although it moves
// half the bytes (ResNet-50 batch 32 training, per step: forward 221 vs 237 ms, backward 370 vs
// 411 ms on a 2-core Sapphire Rapids). These loops are plain C++ that the compiler vectorises
// over the channels (the innermost, contiguous dimension): bf16 widens exactly to f32 by a
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

namespace rn50::onednn {

namespace {

constexpr int64_t kChunk = 64;

/// Per-channel sums over the M rows of two per-element terms: `row(r, a, b)` adds row r's
/// terms into a[C] and b[C] (f32). Returns the totals in A[C] and B[C] (f64).
template <class Row>
void channel_sums(int64_t M, int64_t C, Row&& row, std::vector<double>& A,
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
      std::fill(a.begin(), a.end(), 0.f);
      std::fill(b.begin(), b.end(), 0.f);
      const int64_t r1 = std::min(M, r0 + kChunk);
      for (int64_t r = r0; r < r1; ++r) row(r, a.data(), b.data());
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

/// The backward's gradient reaching the normalisation: dy, or 0 where the ReLU's y <= 0.
inline float relu_grad(bool relu, const uint16_t* y, const uint16_t* dy, int64_t i) {
  const float g = bf16_to_float(dy[i]);
  return !relu || static_cast<int16_t>(y[i]) > 0 ? g : 0.f;
}

}  // namespace

void bn_bf16_nhwc_fwd_train(const uint16_t* x, uint16_t* y, int64_t M, int64_t C,
                            const float* gamma, const float* beta, float eps, bool relu,
                            float* save_mean, float* save_var) {
  std::vector<float> shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) shift[c] = bf16_to_float(x[c]);
  const float* sh = shift.data();
  std::vector<double> S, Q;
  channel_sums(
      M, C,
      [&](int64_t r, float* s, float* q) {
        const uint16_t* xr = x + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float v = bf16_to_float(xr[c]) - sh[c];
          s[c] += v;
          q[c] += v * v;
        }
      },
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
  const float* k = scale.data();
  const float* b = bias.data();
  const float lo = relu ? 0.f : -INFINITY;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r) {
    const uint16_t* xr = x + r * C;
    uint16_t* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float v = bf16_to_float(xr[c]) * k[c] + b[c];
      yr[c] = float_to_bf16(v < lo ? lo : v);  // a NaN stays NaN (std::max would not vectorise)
    }
  }
}

void bn_bf16_nhwc_bwd(const uint16_t* x, const uint16_t* y, const uint16_t* dy, uint16_t* dx,
                      int64_t M, int64_t C, const float* gamma, const float* save_mean,
                      const float* save_var, float eps, bool relu, float* dgamma, float* dbeta) {
  const float* mean = save_mean;
  std::vector<double> S, Q;  // sum g, sum g * (x - mean)
  channel_sums(
      M, C,
      [&](int64_t r, float* s, float* q) {
        const int64_t o = r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float g = relu_grad(relu, y, dy, o + c);
          s[c] += g;
          q[c] += g * (bf16_to_float(x[o + c]) - mean[c]);
        }
      },
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
      const float g = relu_grad(relu, y, dy, o + c);
      const float xm = bf16_to_float(x[o + c]) - mean[c];
      dx[o + c] = float_to_bf16(a0[c] * (g - a1[c] - xm * a2[c]));
    }
  }
}

}  // namespace rn50::onednn
