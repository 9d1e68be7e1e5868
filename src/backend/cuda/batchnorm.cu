// rn50 CUDA backend: batch normalisation, torch.nn.BatchNorm2d semantics (see BatchNormParams in
// rn50/backend.h and the reference src/backend/ref/batchnorm.cpp), optionally fused with ReLU.
//
// Tensors: x, y, dy, dx (N,C,H,W), one dtype (f32, f16 or bf16) and one layout (NCHW or NHWC);
// gamma, beta, running_*, save_*, dgamma, dbeta f32 (C). Per channel c over M = N*H*W values:
//   training forward  mean = sum x / M, var = sum (x - mean)^2 / M (biased),
//                     y = (x - mean) * (gamma / sqrt(var + eps)) + beta  [max(y, 0) if relu],
//                     running_mean = (1 - momentum) * running_mean + momentum * mean,
//                     running_var  = (1 - momentum) * running_var + momentum * var * M / (M - 1)
//   inference         y = (x - running_mean) * (gamma / sqrt(running_var + eps)) + beta [relu]
//   backward          g = relu ? (y > 0 ? dy : 0) : dy, invstd = 1 / sqrt(save_var + eps),
//                     dbeta = sum g, dgamma = invstd * sum g * (x - mean),
//                     dx = gamma * invstd / M * (M * g - dbeta - xhat * dgamma)
//                        = a * g - e * (x - mean) - f   with a = gamma * invstd,
//                          e = a * dgamma * invstd / M, f = a * dbeta / M
//                     (torch's batch_norm_backward, training mode).
//
// Kernels (all on the backend stream; per-channel reductions are deterministic: no atomics,
// a fixed reduction tree for a given shape):
//  1. stats: every block reduces a slice of rows for a range of channels and writes one partial
//     per (block row, channel) into bn_scratch. Forward partials are (count, mean, M2) from a
//     per-thread Welford update (float), merged in the block with Chan's formula; backward
//     partials are the float sums (sum g, sum g * (x - mean)).
//       NHWC: x seen as an (M, C) row-major matrix; threads along C (16-byte packs of 4 floats /
//             8 halves when C allows), block rows along M: coalesced, no index division.
//       NCHW: one block column per channel; threads walk the channel's M values (one 32-bit
//             division per element).
//  2. finalize: one warp per channel combines the G partials in double (Chan merge / sums),
//     writes save_mean/save_var and the running statistics (forward) or dgamma/dbeta
//     (backward), and the per-channel coefficients of the elementwise pass into bn_scratch.
//  3. apply: a flat grid-stride pass over the elements (16-byte packs when the layout allows),
//     computing y (forward) or dx (backward) from the per-channel coefficients.
// bn_scratch holds the partials and the coefficients; its size depends on C only (see scratch()),
// it is grown on the first call with a larger C and then reused: captured graphs never allocate.
#include "backend/cuda/kernels_common.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace rn50::cuda {

namespace {

using namespace kern;

/// Maximum number of row slices (partials per channel) of the stats kernels.
constexpr uint32_t kMaxSlices = 1024;
/// Target number of rows (NHWC) or values (NCHW) each thread reduces.
constexpr uint32_t kRowsPerThread = 16;
/// Finalize kernels: channels (warps) per block.
constexpr int kFinalizeWarps = 8;

// ------------------------------------------------------------------ in-block reductions

/// NHWC blocks are (tx, ty): threads with the same threadIdx.x hold the same channels. Merges the
/// ty Welford summaries of each column into threadIdx.y == 0 (ty a power of two). s_* are
/// shared arrays of blockDim.x * blockDim.y (* V) entries.
template <int V>
__device__ void column_merge_welford(float& n, float (&mean)[V], float (&m2)[V], float* s_n,
                                     float* s_mean, float* s_m2) {
  const uint32_t tx = blockDim.x, x = threadIdx.x, y = threadIdx.y;
  for (uint32_t s = blockDim.y / 2; s > 0; s >>= 1) {
    if (y >= s && y < 2 * s) {
      const uint32_t i = (y - s) * tx + x;
      s_n[i] = n;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        s_mean[i * V + j] = mean[j];
        s_m2[i * V + j] = m2[j];
      }
    }
    __syncthreads();
    if (y < s) {
      const uint32_t i = y * tx + x;
      const float nb = s_n[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float nj = n;  // the count is shared by the V channels: merge each with a copy
        chan_merge(nj, mean[j], m2[j], nb, s_mean[i * V + j], s_m2[i * V + j]);
      }
      n += nb;
    }
    __syncthreads();
  }
}

/// As column_merge_welford for the backward's two sums per channel.
template <int V>
__device__ void column_merge_sums(float (&s1)[V], float (&s2)[V], float* sh1, float* sh2) {
  const uint32_t tx = blockDim.x, x = threadIdx.x, y = threadIdx.y;
  for (uint32_t s = blockDim.y / 2; s > 0; s >>= 1) {
    if (y >= s && y < 2 * s) {
      const uint32_t i = (y - s) * tx + x;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sh1[i * V + j] = s1[j];
        sh2[i * V + j] = s2[j];
      }
    }
    __syncthreads();
    if (y < s) {
      const uint32_t i = y * tx + x;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        s1[j] += sh1[i * V + j];
        s2[j] += sh2[i * V + j];
      }
    }
    __syncthreads();
  }
}

/// Merges the Welford summaries of a 1-D block (blockDim.x a multiple of 32, at most 1024)
/// into thread 0.
__device__ void block_merge_welford(float& n, float& mean, float& m2) {
  __shared__ float s_n[32], s_mean[32], s_m2[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float nb = __shfl_down_sync(0xffffffffu, n, o);
    const float mb = __shfl_down_sync(0xffffffffu, mean, o);
    const float m2b = __shfl_down_sync(0xffffffffu, m2, o);
    chan_merge(n, mean, m2, nb, mb, m2b);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  if (lane == 0) {
    s_n[warp] = n;
    s_mean[warp] = mean;
    s_m2[warp] = m2;
  }
  __syncthreads();
  if (warp == 0) {
    n = lane < nwarps ? s_n[lane] : 0.f;
    mean = lane < nwarps ? s_mean[lane] : 0.f;
    m2 = lane < nwarps ? s_m2[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float nb = __shfl_down_sync(0xffffffffu, n, o);
      const float mb = __shfl_down_sync(0xffffffffu, mean, o);
      const float m2b = __shfl_down_sync(0xffffffffu, m2, o);
      chan_merge(n, mean, m2, nb, mb, m2b);
    }
  }
}

/// Sums v over a 1-D block (blockDim.x a multiple of 32, at most 1024); the result is valid in
/// thread 0. Fixed order (deterministic).
__device__ float block_sum(float v, float* s_warp /* 32 entries */) {
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  __syncthreads();  // s_warp may still be read by a previous call
  if (lane == 0) s_warp[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < nwarps ? s_warp[lane] : 0.f);
  return v;
}

// ------------------------------------------------------------------ forward statistics

/// NHWC forward statistics. x is (M, C) row-major; thread (tx, ty) of block (bx, by) handles
/// channels [c0, c0 + V), c0 = (bx * blockDim.x + tx) * V, rows by * blockDim.y + ty + k *
/// gridDim.y * blockDim.y. Writes partial (count, mean, M2) of slice by for each channel at
/// [by * C + c]. Requires C % V == 0 and x 16-byte aligned when V > 1.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    bn_fwd_stats_nhwc(const T* __restrict__ x, uint32_t M, uint32_t C, float* __restrict__ p_cnt,
                      float* __restrict__ p_mean, float* __restrict__ p_m2) {
  __shared__ float s_n[kThreads], s_mean[kThreads * V], s_m2[kThreads * V];
  const uint32_t c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  const bool active = c0 < C;
  float n = 0.f, mean[V], m2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) mean[j] = m2[j] = 0.f;
  if (active) {
    const uint64_t step = static_cast<uint64_t>(gridDim.y) * blockDim.y;
    uint64_t r = static_cast<uint64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    // Two rows per iteration: two independent loads in flight per thread.
    for (; r + step < M; r += 2 * step) {
      float a[V], b[V];
      load_pack<T, V>(x + r * C + c0, a);
      load_pack<T, V>(x + (r + step) * C + c0, b);
      n += 1.f;
      float inv = __frcp_rn(n);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = a[j] - mean[j];
        mean[j] += d * inv;
        m2[j] += d * (a[j] - mean[j]);
      }
      n += 1.f;
      inv = __frcp_rn(n);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = b[j] - mean[j];
        mean[j] += d * inv;
        m2[j] += d * (b[j] - mean[j]);
      }
    }
    if (r < M) {
      float a[V];
      load_pack<T, V>(x + r * C + c0, a);
      n += 1.f;
      const float inv = __frcp_rn(n);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = a[j] - mean[j];
        mean[j] += d * inv;
        m2[j] += d * (a[j] - mean[j]);
      }
    }
  }
  column_merge_welford<V>(n, mean, m2, s_n, s_mean, s_m2);
  if (threadIdx.y == 0 && active) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t i = blockIdx.y * C + c0 + j;
      p_cnt[i] = n;
      p_mean[i] = mean[j];
      p_m2[i] = m2[j];
    }
  }
}

/// NCHW forward statistics: block (c, g) reduces values j = g * blockDim.x + tid + k *
/// gridDim.y * blockDim.x of channel c (value j is x[n, c, hw] with n = j / HW, hw = j % HW).
template <class T>
__global__ void __launch_bounds__(kThreads)
    bn_fwd_stats_nchw(const T* __restrict__ x, uint32_t M, uint32_t C, uint32_t HW,
                      float* __restrict__ p_cnt, float* __restrict__ p_mean,
                      float* __restrict__ p_m2) {
  const uint32_t c = blockIdx.x;
  float n = 0.f, mean = 0.f, m2 = 0.f;
  const uint64_t step = static_cast<uint64_t>(gridDim.y) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < M;
       j += step) {
    const uint32_t jj = static_cast<uint32_t>(j);
    const uint32_t nn = jj / HW, hw = jj - nn * HW;
    const float v = to_float(x[(nn * C + c) * HW + hw]);
    n += 1.f;
    const float d = v - mean;
    mean += d * __frcp_rn(n);
    m2 += d * (v - mean);
  }
  block_merge_welford(n, mean, m2);
  if (threadIdx.x == 0) {
    const uint32_t i = blockIdx.y * C + c;
    p_cnt[i] = n;
    p_mean[i] = mean;
    p_m2[i] = m2;
  }
}

/// One warp per channel: merges the G partials in double and writes the batch statistics, the
/// running statistics and the coefficients (mean, scale = gamma * invstd) of the apply pass.
__global__ void bn_fwd_finalize(const float* __restrict__ p_cnt, const float* __restrict__ p_mean,
                                const float* __restrict__ p_m2, uint32_t G, uint32_t C, double M,
                                double eps, double momentum, const float* __restrict__ gamma,
                                float* running_mean, float* running_var, float* save_mean,
                                float* save_var, float* __restrict__ k_mean,
                                float* __restrict__ k_scale) {
  const uint32_t c = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;  // uniform per warp
  double n = 0, mean = 0, m2 = 0;
  for (uint32_t g = lane; g < G; g += 32) {
    const uint32_t i = g * C + c;
    chan_merge<double>(n, mean, m2, p_cnt[i], p_mean[i], p_m2[i]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double nb = __shfl_down_sync(0xffffffffu, n, o);
    const double mb = __shfl_down_sync(0xffffffffu, mean, o);
    const double m2b = __shfl_down_sync(0xffffffffu, m2, o);
    chan_merge(n, mean, m2, nb, mb, m2b);
  }
  if (lane != 0) return;
  const double var = m2 / M;  // biased
  const double invstd = 1.0 / sqrt(var + eps);
  save_mean[c] = static_cast<float>(mean);
  save_var[c] = static_cast<float>(var);
  running_mean[c] =
      static_cast<float>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
  running_var[c] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_var[c]) +
                                      momentum * var * M / (M - 1.0));
  k_mean[c] = static_cast<float>(mean);
  k_scale[c] = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
}

/// Inference coefficients: scale = gamma / sqrt(running_var + eps) (double).
__global__ void bn_infer_coeffs(const float* __restrict__ gamma,
                                const float* __restrict__ running_var, uint32_t C, double eps,
                                float* __restrict__ k_scale) {
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C)
    k_scale[c] = static_cast<float>(static_cast<double>(gamma[c]) /
                                    sqrt(static_cast<double>(running_var[c]) + eps));
}

/// Forward apply: y = (x - mean[c]) * scale[c] + shift[c], then max(y, 0) when relu. Flat over
/// the n elements in memory order, V-element packs (NHWC: C % V == 0; NCHW: HW % V == 0, so a
/// pack never straddles a channel boundary the other way; pointers 16-byte aligned when V > 1).
template <class T, int V, bool NHWC>
__global__ void __launch_bounds__(kThreads)
    bn_fwd_apply(const T* x, T* y, uint32_t n, uint32_t C, uint32_t HW,
                 const float* __restrict__ mean, const float* __restrict__ scale,
                 const float* __restrict__ shift, bool relu) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t npack = n / V;
  for (uint64_t p = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < npack;
       p += stride) {
    const uint32_t i0 = static_cast<uint32_t>(p * V);
    float v[V];
    load_pack<T, V>(x + i0, v);
    const uint32_t cb = NHWC ? i0 % C : (i0 / HW) % C;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t c = NHWC ? cb + j : cb;
      float o = (v[j] - mean[c]) * scale[c] + shift[c];
      if (relu) o = o < 0.f ? 0.f : o;  // NaN propagates (torch.relu, the reference)
      v[j] = o;
    }
    store_pack<T, V>(y + i0, v);
  }
}

// ------------------------------------------------------------------ backward statistics

/// NHWC backward sums (layout of the blocks as in bn_fwd_stats_nhwc): per channel
/// s1 = sum g, s2 = sum g * (x - mean), g = RELU ? (y > 0 ? dy : 0) : dy. Writes partials at
/// [by * C + c].
template <class T, int V, bool RELU>
__global__ void __launch_bounds__(kThreads)
    bn_bwd_stats_nhwc(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                      uint32_t M, uint32_t C, const float* __restrict__ mean,
                      float* __restrict__ p_s1, float* __restrict__ p_s2) {
  __shared__ float sh1[kThreads * V], sh2[kThreads * V];
  const uint32_t c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  const bool active = c0 < C;
  float s1[V], s2[V], mu[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    s1[j] = s2[j] = 0.f;
    mu[j] = active ? mean[c0 + j] : 0.f;
  }
  if (active) {
    const uint64_t step = static_cast<uint64_t>(gridDim.y) * blockDim.y;
    for (uint64_t r = static_cast<uint64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < M;
         r += step) {
      const uint64_t off = r * C + c0;
      float xv[V], g[V];
      load_pack<T, V>(x + off, xv);
      load_pack<T, V>(dy + off, g);
      if constexpr (RELU) {
        float yv[V];
        load_pack<T, V>(y + off, yv);
#pragma unroll
        for (int j = 0; j < V; ++j) g[j] = yv[j] > 0.f ? g[j] : 0.f;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        s1[j] += g[j];
        s2[j] += g[j] * (xv[j] - mu[j]);
      }
    }
  }
  column_merge_sums<V>(s1, s2, sh1, sh2);
  if (threadIdx.y == 0 && active) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t i = blockIdx.y * C + c0 + j;
      p_s1[i] = s1[j];
      p_s2[i] = s2[j];
    }
  }
}

/// NCHW backward sums; block (c, g) as in bn_fwd_stats_nchw.
template <class T, bool RELU>
__global__ void __launch_bounds__(kThreads)
    bn_bwd_stats_nchw(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                      uint32_t M, uint32_t C, uint32_t HW, const float* __restrict__ mean,
                      float* __restrict__ p_s1, float* __restrict__ p_s2) {
  __shared__ float s_warp[32];
  const uint32_t c = blockIdx.x;
  const float mu = mean[c];
  float s1 = 0.f, s2 = 0.f;
  const uint64_t step = static_cast<uint64_t>(gridDim.y) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < M;
       j += step) {
    const uint32_t jj = static_cast<uint32_t>(j);
    const uint32_t nn = jj / HW, hw = jj - nn * HW;
    const uint32_t off = (nn * C + c) * HW + hw;
    float g = to_float(dy[off]);
    if constexpr (RELU) g = to_float(y[off]) > 0.f ? g : 0.f;
    s1 += g;
    s2 += g * (to_float(x[off]) - mu);
  }
  s1 = block_sum(s1, s_warp);
  s2 = block_sum(s2, s_warp);
  if (threadIdx.x == 0) {
    const uint32_t i = blockIdx.y * C + c;
    p_s1[i] = s1;
    p_s2[i] = s2;
  }
}

/// One warp per channel: sums the G partials in double, writes dgamma, dbeta and the dx
/// coefficients a = gamma * invstd, e = a * dgamma * invstd / M, f = a * dbeta / M.
__global__ void bn_bwd_finalize(const float* __restrict__ p_s1, const float* __restrict__ p_s2,
                                uint32_t G, uint32_t C, double M, double eps,
                                const float* __restrict__ gamma, const float* __restrict__ save_var,
                                float* __restrict__ dgamma, float* __restrict__ dbeta,
                                float* __restrict__ k_a, float* __restrict__ k_e,
                                float* __restrict__ k_f) {
  const uint32_t c = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;  // uniform per warp
  double s1 = 0, s2 = 0;
  for (uint32_t g = lane; g < G; g += 32) {
    s1 += p_s1[g * C + c];
    s2 += p_s2[g * C + c];
  }
  s1 = warp_sum(s1);
  s2 = warp_sum(s2);
  if (lane != 0) return;
  const double invstd = 1.0 / sqrt(static_cast<double>(save_var[c]) + eps);
  const double dg = s2 * invstd, db = s1;
  const double a = static_cast<double>(gamma[c]) * invstd;
  dgamma[c] = static_cast<float>(dg);
  dbeta[c] = static_cast<float>(db);
  k_a[c] = static_cast<float>(a);
  k_e[c] = static_cast<float>(a * dg * invstd / M);
  k_f[c] = static_cast<float>(a * db / M);
}

/// Backward apply: dx = a[c] * g - e[c] * (x - mean[c]) - f[c]; packs as in bn_fwd_apply.
template <class T, int V, bool NHWC, bool RELU>
__global__ void __launch_bounds__(kThreads)
    bn_bwd_apply(const T* x, const T* y, const T* dy, T* dx, uint32_t n, uint32_t C,
                 uint32_t HW, const float* __restrict__ mean, const float* __restrict__ ka,
                 const float* __restrict__ ke, const float* __restrict__ kf) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t npack = n / V;
  for (uint64_t p = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < npack;
       p += stride) {
    const uint32_t i0 = static_cast<uint32_t>(p * V);
    float xv[V], g[V];
    load_pack<T, V>(x + i0, xv);
    load_pack<T, V>(dy + i0, g);
    if constexpr (RELU) {
      float yv[V];
      load_pack<T, V>(y + i0, yv);
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = yv[j] > 0.f ? g[j] : 0.f;
    }
    const uint32_t cb = NHWC ? i0 % C : (i0 / HW) % C;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t c = NHWC ? cb + j : cb;
      xv[j] = ka[c] * g[j] - ke[c] * (xv[j] - mean[c]) - kf[c];
    }
    store_pack<T, V>(dx + i0, xv);
  }
}

// ------------------------------------------------------------------ launch configuration

uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

/// Launch shape of the NHWC stats kernels for C channels in packs of V and M rows.
struct NhwcStatsCfg {
  dim3 grid, block;
  uint32_t slices = 1;  // gridDim.y: partials per channel
};
NhwcStatsCfg nhwc_stats_cfg(uint32_t M, uint32_t C, int V) {
  const uint32_t packs = C / V;
  const uint32_t tx = std::min<uint32_t>(32, next_pow2(packs));
  const uint32_t ty = kThreads / tx;
  NhwcStatsCfg cfg;
  cfg.slices = std::clamp<uint32_t>(ceil_div(M, uint64_t{ty} * kRowsPerThread), 1, kMaxSlices);
  cfg.block = dim3(tx, ty);
  cfg.grid = dim3(ceil_div(packs, tx), cfg.slices);
  return cfg;
}

/// Slices (gridDim.y) of the NCHW stats kernels.
uint32_t nchw_slices(uint32_t M) {
  return std::clamp<uint32_t>(ceil_div(M, uint64_t{kThreads} * kRowsPerThread), 1, kMaxSlices);
}

/// Elements per pack of the apply kernels for a tensor of dtype T: 16-byte packs when every
/// pointer is aligned and packs stay inside one channel run, else 1.
template <class T>
int apply_vec(bool nhwc, uint32_t C, uint32_t HW, std::initializer_list<const void*> ptrs) {
  constexpr int V = kVec16<T>;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return 1;
  return (nhwc ? C % V == 0 : HW % V == 0) ? V : 1;
}

/// bn_scratch for C channels; the callers lay out `partial_planes` planes of slices * C partials
/// followed by `coeff_planes` planes of C coefficients in it. Every batchnorm op asks for the
/// same size, that of the largest layout (3 planes of kMaxSlices * C partials + 4 coefficient
/// planes), which depends on C only: the buffer stops growing once the largest C of the
/// network has been seen in the first (eager) step, whatever the batch size of later calls, so
/// it is never reallocated under a captured graph that recorded its address.
float* scratch(DeviceBuffer& buf, uint32_t C) {
  const size_t floats = (3 * static_cast<size_t>(kMaxSlices) + 4) * C;
  return static_cast<float*>(buf.ensure(floats * sizeof(float)));
}

unsigned finalize_grid(uint32_t C) { return ceil_div(C, kFinalizeWarps); }

/// Forward apply launch (dispatches pack width, layout).
template <class T>
void launch_fwd_apply(cudaStream_t st, const T* x, T* y, uint32_t n, uint32_t C, uint32_t HW,
                      bool nhwc, const float* mean, const float* scale, const float* shift,
                      bool relu) {
  constexpr int VV = kVec16<T>;
  const int V = apply_vec<T>(nhwc, C, HW, {x, y});
  const unsigned grid = grid_for(n / V, kThreads);
  if (V == VV) {
    if (nhwc)
      bn_fwd_apply<T, VV, true><<<grid, kThreads, 0, st>>>(x, y, n, C, HW, mean, scale, shift,
                                                           relu);
    else
      bn_fwd_apply<T, VV, false><<<grid, kThreads, 0, st>>>(x, y, n, C, HW, mean, scale, shift,
                                                            relu);
  } else {
    if (nhwc)
      bn_fwd_apply<T, 1, true><<<grid, kThreads, 0, st>>>(x, y, n, C, HW, mean, scale, shift,
                                                          relu);
    else
      bn_fwd_apply<T, 1, false><<<grid, kThreads, 0, st>>>(x, y, n, C, HW, mean, scale, shift,
                                                           relu);
  }
  RN50_CUDA_LAUNCH_CHECK();
}

/// Checks the activations of a batchnorm op: 4-D, float dtype, one shape, dtype and layout.
void check_bn_acts(const CudaBackend& be, const char* op,
                   std::initializer_list<std::pair<const char*, const Tensor*>> acts) {
  const auto& [n0, t0] = *acts.begin();
  for (const auto& [name, t] : acts) {
    check_float4(be, op, name, *t);
    RN50_CHECK(t->same_shape(*t0) && t->dtype() == t0->dtype() && t->layout() == t0->layout(),
               "cuda {}: {} {} and {} {} must have the same shape, dtype and layout", op, n0,
               t0->str(), name, t->str());
  }
}

}  // namespace

// ------------------------------------------------------------------ ops

void CudaBackend::batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      Tensor& running_mean, Tensor& running_var, Tensor& y,
                                      Tensor& save_mean, Tensor& save_var) {
  const char* op = "batchnorm_fwd_train";
  check_bn_acts(*this, op, {{"x", &x}, {"y", &y}});
  const uint32_t C = static_cast<uint32_t>(x.c()), HW = static_cast<uint32_t>(x.h() * x.w());
  const uint32_t M = static_cast<uint32_t>(x.n()) * HW;
  check_channel_vec(*this, op, "gamma", gamma, C);
  check_channel_vec(*this, op, "beta", beta, C);
  check_channel_vec(*this, op, "running_mean", running_mean, C);
  check_channel_vec(*this, op, "running_var", running_var, C);
  check_channel_vec(*this, op, "save_mean", save_mean, C);
  check_channel_vec(*this, op, "save_var", save_var, C);
  RN50_CHECK(M > 1, "cuda {}: expected more than 1 value per channel when training, got x {}",
             op, x.str());
  if (C == 0) return;
  const bool nhwc = x.layout() == Layout::NHWC;
  const uint32_t n = static_cast<uint32_t>(x.numel());
  cudaStream_t st = stream();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int VV = kVec16<T>;
    const T* xp = x.data_as<const T>();
    T* yp = y.data_as<T>();
    // 1. partial statistics
    float *p_cnt, *p_mean, *p_m2, *k_mean, *k_scale;
    uint32_t slices;
    auto carve = [&](uint32_t s) {
      slices = s;
      float* base = scratch(bn_scratch, C);
      const size_t plane = static_cast<size_t>(s) * C;
      p_cnt = base;
      p_mean = base + plane;
      p_m2 = base + 2 * plane;
      k_mean = base + 3 * plane;
      k_scale = k_mean + C;
    };
    if (nhwc) {
      const int V = (C % VV == 0 && aligned16(xp)) ? VV : 1;
      const NhwcStatsCfg cfg = nhwc_stats_cfg(M, C, V);
      carve(cfg.slices);
      if (V == VV)
        bn_fwd_stats_nhwc<T, VV>
            <<<cfg.grid, cfg.block, 0, st>>>(xp, M, C, p_cnt, p_mean, p_m2);
      else
        bn_fwd_stats_nhwc<T, 1><<<cfg.grid, cfg.block, 0, st>>>(xp, M, C, p_cnt, p_mean, p_m2);
    } else {
      carve(nchw_slices(M));
      bn_fwd_stats_nchw<T>
          <<<dim3(C, slices), kThreads, 0, st>>>(xp, M, C, HW, p_cnt, p_mean, p_m2);
    }
    RN50_CUDA_LAUNCH_CHECK();
    // 2. statistics, running statistics, coefficients
    bn_fwd_finalize<<<finalize_grid(C), kFinalizeWarps * 32, 0, st>>>(
        p_cnt, p_mean, p_m2, slices, C, static_cast<double>(M), p.eps, p.momentum,
        gamma.data_as<const float>(), running_mean.data_as<float>(),
        running_var.data_as<float>(), save_mean.data_as<float>(), save_var.data_as<float>(),
        k_mean, k_scale);
    RN50_CUDA_LAUNCH_CHECK();
    // 3. y
    launch_fwd_apply<T>(st, xp, yp, n, C, HW, nhwc, k_mean, k_scale, beta.data_as<const float>(),
                        p.relu);
  });
}

void CudaBackend::batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      Tensor& y) {
  const char* op = "batchnorm_fwd_infer";
  check_bn_acts(*this, op, {{"x", &x}, {"y", &y}});
  const uint32_t C = static_cast<uint32_t>(x.c()), HW = static_cast<uint32_t>(x.h() * x.w());
  check_channel_vec(*this, op, "gamma", gamma, C);
  check_channel_vec(*this, op, "beta", beta, C);
  check_channel_vec(*this, op, "running_mean", running_mean, C);
  check_channel_vec(*this, op, "running_var", running_var, C);
  if (x.numel() == 0) return;
  const bool nhwc = x.layout() == Layout::NHWC;
  const uint32_t n = static_cast<uint32_t>(x.numel());
  cudaStream_t st = stream();
  float* k_scale = scratch(bn_scratch, C);
  bn_infer_coeffs<<<ceil_div(C, kThreads), kThreads, 0, st>>>(
      gamma.data_as<const float>(), running_var.data_as<const float>(), C, p.eps, k_scale);
  RN50_CUDA_LAUNCH_CHECK();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_fwd_apply<T>(st, x.data_as<const T>(), y.data_as<T>(), n, C, HW, nhwc,
                        running_mean.data_as<const float>(), k_scale,
                        beta.data_as<const float>(), p.relu);
  });
}

void CudaBackend::batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_var, Tensor& dx, Tensor& dgamma,
                                Tensor& dbeta) {
  const char* op = "batchnorm_bwd";
  if (p.relu)
    check_bn_acts(*this, op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}, {"y (ReLU mask)", &y}});
  else
    check_bn_acts(*this, op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  const uint32_t C = static_cast<uint32_t>(x.c()), HW = static_cast<uint32_t>(x.h() * x.w());
  const uint32_t M = static_cast<uint32_t>(x.n()) * HW;
  check_channel_vec(*this, op, "gamma", gamma, C);
  check_channel_vec(*this, op, "save_mean", save_mean, C);
  check_channel_vec(*this, op, "save_var", save_var, C);
  check_channel_vec(*this, op, "dgamma", dgamma, C);
  check_channel_vec(*this, op, "dbeta", dbeta, C);
  RN50_CHECK(M > 0, "cuda {}: x {} has no values per channel", op, x.str());
  if (C == 0) return;
  const bool nhwc = x.layout() == Layout::NHWC;
  const uint32_t n = static_cast<uint32_t>(x.numel());
  cudaStream_t st = stream();
  const float* mean = save_mean.data_as<const float>();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int VV = kVec16<T>;
    const T* xp = x.data_as<const T>();
    const T* yp = p.relu ? y.data_as<const T>() : nullptr;
    const T* dyp = dy.data_as<const T>();
    T* dxp = dx.data_as<T>();
    // 1. partial sums
    float *p_s1, *p_s2, *k_a, *k_e, *k_f;
    uint32_t slices;
    auto carve = [&](uint32_t s) {
      slices = s;
      float* base = scratch(bn_scratch, C);
      const size_t plane = static_cast<size_t>(s) * C;
      p_s1 = base;
      p_s2 = base + plane;
      k_a = base + 2 * plane;
      k_e = k_a + C;
      k_f = k_e + C;
    };
    if (nhwc) {
      const bool vec = C % VV == 0 && aligned16(xp) && aligned16(dyp) && (!yp || aligned16(yp));
      const int V = vec ? VV : 1;
      const NhwcStatsCfg cfg = nhwc_stats_cfg(M, C, V);
      carve(cfg.slices);
      if (vec) {
        if (p.relu)
          bn_bwd_stats_nhwc<T, VV, true>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, M, C, mean, p_s1, p_s2);
        else
          bn_bwd_stats_nhwc<T, VV, false>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, M, C, mean, p_s1, p_s2);
      } else {
        if (p.relu)
          bn_bwd_stats_nhwc<T, 1, true>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, M, C, mean, p_s1, p_s2);
        else
          bn_bwd_stats_nhwc<T, 1, false>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, M, C, mean, p_s1, p_s2);
      }
    } else {
      carve(nchw_slices(M));
      const dim3 grid(C, slices);
      if (p.relu)
        bn_bwd_stats_nchw<T, true>
            <<<grid, kThreads, 0, st>>>(xp, yp, dyp, M, C, HW, mean, p_s1, p_s2);
      else
        bn_bwd_stats_nchw<T, false>
            <<<grid, kThreads, 0, st>>>(xp, yp, dyp, M, C, HW, mean, p_s1, p_s2);
    }
    RN50_CUDA_LAUNCH_CHECK();
    // 2. dgamma, dbeta, coefficients
    bn_bwd_finalize<<<finalize_grid(C), kFinalizeWarps * 32, 0, st>>>(
        p_s1, p_s2, slices, C, static_cast<double>(M), p.eps, gamma.data_as<const float>(),
        save_var.data_as<const float>(), dgamma.data_as<float>(), dbeta.data_as<float>(), k_a,
        k_e, k_f);
    RN50_CUDA_LAUNCH_CHECK();
    // 3. dx
    const int V = apply_vec<T>(nhwc, C, HW, {xp, yp, dyp, dxp});
    const unsigned grid = grid_for(n / V, kThreads);
    auto launch = [&](auto vtag, auto ltag, auto rtag) {
      constexpr int VT = decltype(vtag)::value;
      constexpr bool L = decltype(ltag)::value, R = decltype(rtag)::value;
      bn_bwd_apply<T, VT, L, R>
          <<<grid, kThreads, 0, st>>>(xp, yp, dyp, dxp, n, C, HW, mean, k_a, k_e, k_f);
    };
    using VecT = std::integral_constant<int, VV>;
    using One = std::integral_constant<int, 1>;
    using Yes = std::true_type;
    using No = std::false_type;
    if (V == VV) {
      if (nhwc)
        p.relu ? launch(VecT{}, Yes{}, Yes{}) : launch(VecT{}, Yes{}, No{});
      else
        p.relu ? launch(VecT{}, No{}, Yes{}) : launch(VecT{}, No{}, No{});
    } else {
      if (nhwc)
        p.relu ? launch(One{}, Yes{}, Yes{}) : launch(One{}, Yes{}, No{});
      else
        p.relu ? launch(One{}, No{}, Yes{}) : launch(One{}, No{}, No{});
    }
    RN50_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace rn50::cuda
