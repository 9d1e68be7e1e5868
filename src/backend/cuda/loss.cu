// rn50 CUDA backend: softmax cross-entropy with label smoothing, exactly
// torch.nn.CrossEntropyLoss(label_smoothing=eps, reduction="mean") (see rn50/backend.h and the
// reference src/backend/ref/loss.cpp). logits, probs, dlogits f32 (N,K); labels i32 (N) on the
// device; loss f32 {1}. With q = (1 - eps) * onehot(label) + eps / K:
//   p = softmax(z) (max-subtracted),  lse = m + log sum_k exp(z_k - m)
//   loss = mean_n [ (1 - eps) * (lse_n - z[n,label]) + eps / K * (K * lse_n - sum_k z[n,k]) ]
//        = mean_n [ -sum_k q[n,k] * log p[n,k] ]
//   dlogits = scale * (p - q) / N   (scale further multiplied by state[loss_scale] on the device
//                                    when a step state is given)
// Kernels: forward, one block per row computes the row max, sum exp and sum z (double
// accumulation, fixed reduction tree), writes the row's probs and its loss (double) into
// loss_scratch; a single-block kernel then sums the N row losses in a fixed order (double) and
// writes the mean. Backward: one thread per element, in double. Deterministic, no atomics.
// topk_hits: one block per row counts the classes that outrank the label.
//
// Labels are validated by the caller (the trainer checks them on the host when it loads a
// batch); a kernel cannot throw. An out-of-range label (< 0 or >= K) is never read out of
// bounds: its row contributes NaN to the loss (so the logged loss shows the problem) and, in
// the backward, the row has no target class (q = eps / K everywhere).
#include "backend/cuda/kernels_common.cuh"

#include <algorithm>
#include <cmath>

namespace rn50::cuda {

namespace {

using namespace kern;

constexpr int kLossThreads = 256;
/// Minimum size of loss_scratch in rows (512 KiB of doubles).
constexpr size_t kMinScratchRows = 65536;

/// Sum (or max when MAX) over a 1-D block of kLossThreads threads; every thread gets the result.
/// Fixed order (deterministic). s has kLossThreads / 32 entries.
template <bool MAX, class A>
__device__ A block_reduce(A v, A* s) {
  v = MAX ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int kWarps = kLossThreads / 32;
  __syncthreads();  // s may still be read by a previous call
  if (lane == 0) s[warp] = v;
  __syncthreads();
  A r = s[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = MAX ? (s[w] > r ? s[w] : r) : r + s[w];
  return r;
}

/// Block n: row n of logits z (K values). Writes probs row n and row_loss[n] (double).
__global__ void __launch_bounds__(kLossThreads)
    xent_fwd_rows(const float* __restrict__ z, const int32_t* __restrict__ labels,
                  const int32_t* __restrict__ labels_b, const float* __restrict__ state,
                  int64_t K, double eps, float* __restrict__ probs, double* __restrict__ row_loss) {
  __shared__ float s_max[kLossThreads / 32];
  __shared__ double s_sum[kLossThreads / 32];
  const int64_t n = blockIdx.x;
  const float* zr = z + n * K;
  float m = -INFINITY;
  for (int64_t k = threadIdx.x; k < K; k += kLossThreads) m = zr[k] > m ? zr[k] : m;
  const double mx = static_cast<double>(block_reduce<true>(m, s_max));
  double se = 0, sz = 0;
  for (int64_t k = threadIdx.x; k < K; k += kLossThreads) {
    const double v = zr[k];
    se += exp(v - mx);
    sz += v;
  }
  se = block_reduce<false>(se, s_sum);
  sz = block_reduce<false>(sz, s_sum);
  const double lse = mx + log(se);
  float* pr = probs + n * K;
  for (int64_t k = threadIdx.x; k < K; k += kLossThreads)
    pr[k] = static_cast<float>(exp(static_cast<double>(zr[k]) - lse));
  if (threadIdx.x == 0) {
    const int32_t a = labels[n];
    const int32_t b = labels_b ? labels_b[n] : a;
    const double lam = labels_b ? static_cast<double>(state[StepState::mixup_lambda]) : 1.0;
    const double Kd = static_cast<double>(K);
    row_loss[n] = a >= 0 && a < K && b >= 0 && b < K
                      ? (1.0 - eps) * (lam * (lse - static_cast<double>(zr[a])) +
                                       (1.0 - lam) * (lse - static_cast<double>(zr[b]))) +
                            eps / Kd * (Kd * lse - sz)
                      : static_cast<double>(NAN);
  }
}

/// One block: loss[0] = mean of row_loss[0..N) (double, fixed order).
__global__ void __launch_bounds__(kLossThreads)
    xent_fwd_mean(const double* __restrict__ row_loss, int64_t N, float* __restrict__ loss) {
  __shared__ double s_sum[kLossThreads / 32];
  double s = 0;
  for (int64_t n = threadIdx.x; n < N; n += kLossThreads) s += row_loss[n];
  s = block_reduce<false>(s, s_sum);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(s / static_cast<double>(N));
}

/// dlogits[n,k] = f * (p[n,k] - q[n,k]), f = scale * (state ? state[loss_scale] : 1) / N;
/// with labels_b (mixup; state then required) q mixes the two labels by state[mixup_lambda].
__global__ void __launch_bounds__(kThreads)
    xent_bwd_kernel(const float* __restrict__ probs, const int32_t* __restrict__ labels,
                    const int32_t* __restrict__ labels_b, int64_t N, int64_t K, double eps,
                    float scale, const float* __restrict__ state, float* __restrict__ dlogits) {
  const double f = static_cast<double>(scale) *
                   (state ? static_cast<double>(state[StepState::loss_scale]) : 1.0) /
                   static_cast<double>(N);
  const double off = eps / static_cast<double>(K);
  const double lam = labels_b ? static_cast<double>(state[StepState::mixup_lambda]) : 1.0;
  const int64_t total = N * K;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t n = i / K, k = i - n * K;
    // An invalid label matches no class: no target there.
    const double t = labels_b ? (k == labels[n] ? lam : 0.0) + (k == labels_b[n] ? 1.0 - lam : 0.0)
                              : (k == labels[n] ? 1.0 : 0.0);
    const double q = (1.0 - eps) * t + off;
    dlogits[i] = static_cast<float>(f * (static_cast<double>(probs[i]) - q));
  }
}

/// Block n: the rank of row n's label (classes with a larger logit, or an equal one at a lower
/// index; a NaN label logit is never a hit); hits[0] += rank < 1, hits[1] += rank < 5 (float atomics
/// of integers below 2^24: exact, order-independent). An out-of-range label counts nothing.
__global__ void __launch_bounds__(kLossThreads)
    topk_hits_kernel(const float* __restrict__ z, const int32_t* __restrict__ labels, int64_t K,
                     float* __restrict__ hits) {
  __shared__ int64_t s_cnt[kLossThreads / 32];
  const int64_t n = blockIdx.x;
  const int32_t label = labels[n];
  if (label < 0 || label >= K) return;  // uniform across the block
  const float* zr = z + n * K;
  const float v = zr[label];
  if (isnan(v)) return;  // never a hit (uniform across the block)
  int64_t c = 0;
  for (int64_t k = threadIdx.x; k < K; k += kLossThreads) {
    const float u = zr[k];
    c += u > v || (u == v && k < label);
  }
  const int64_t rank = block_reduce<false>(c, s_cnt);
  if (threadIdx.x == 0) {
    if (rank < 1) atomicAdd(&hits[0], 1.f);
    if (rank < 5) atomicAdd(&hits[1], 1.f);
  }
}

/// Checks labels: i32 (N) on the device.
void check_labels(const CudaBackend& be, const char* op, const Tensor& labels, int64_t N) {
  be.check_device(op, "labels", labels);
  RN50_CHECK(labels.dtype() == DType::i32 && labels.ndim() == 1 && labels.dim(0) == N,
             "cuda {}: labels is {}, expected I32 ({})", op, labels.str(), N);
}

/// Checks an f32 (N,K) tensor.
void check_nk(const CudaBackend& be, const char* op, const char* name, const Tensor& t, int64_t N,
              int64_t K) {
  be.check_device(op, name, t);
  RN50_CHECK(t.dtype() == DType::f32 && t.ndim() == 2 && t.dim(0) == N && t.dim(1) == K,
             "cuda {}: {} is {}, expected F32 ({},{})", op, name, t.str(), N, K);
}

/// The loss with row n's target lam * q(labels[n]) + (1 - lam) * q(labels_b[n]),
/// lam = state[mixup_lambda] (labels_b null: the plain loss).
void xent_fwd(CudaBackend& be, const char* op, const Tensor& logits, const Tensor& labels,
              const Tensor* labels_b, const float* state, float smoothing, Tensor& loss,
              Tensor& probs) {
  be.check_device(op, "logits", logits);
  RN50_CHECK(logits.dtype() == DType::f32 && logits.ndim() == 2 && logits.dim(0) > 0 &&
                 logits.dim(1) > 0,
             "cuda {}: logits {} must be F32 (N,K) with N, K > 0", op, logits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  check_nk(be, op, "probs", probs, N, K);
  be.check_device(op, "loss", loss);
  RN50_CHECK(loss.dtype() == DType::f32 && loss.numel() == 1,
             "cuda {}: loss is {}, expected F32 {{1}}", op, loss.str());
  check_labels(be, op, labels, N);
  if (labels_b) check_labels(be, op, *labels_b, N);
  RN50_CHECK(smoothing >= 0.f && smoothing <= 1.f,
             "cuda {}: label smoothing {} not in [0, 1]", op, smoothing);
  RN50_CHECK(N <= 0x7fffffff, "cuda {}: {} rows exceed the grid limit", op, N);
  // At least kMinScratchRows rows, so that a later call with a larger batch (evaluation) does
  // not reallocate the buffer under a captured training graph that recorded its address.
  const size_t rows = std::max<size_t>(static_cast<size_t>(N), kMinScratchRows);
  double* row_loss = static_cast<double*>(be.loss_scratch.ensure(rows * sizeof(double)));
  xent_fwd_rows<<<static_cast<unsigned>(N), kLossThreads, 0, be.stream()>>>(
      logits.data_as<const float>(), labels.data_as<const int32_t>(),
      labels_b ? labels_b->data_as<const int32_t>() : nullptr, state, K, smoothing,
      probs.data_as<float>(), row_loss);
  RN50_CUDA_LAUNCH_CHECK();
  xent_fwd_mean<<<1, kLossThreads, 0, be.stream()>>>(row_loss, N, loss.data_as<float>());
  RN50_CUDA_LAUNCH_CHECK();
}

void xent_bwd(CudaBackend& be, const char* op, const Tensor& probs, const Tensor& labels,
              const Tensor* labels_b, float smoothing, float scale, Tensor& dlogits,
              const float* state) {
  be.check_device(op, "probs", probs);
  RN50_CHECK(probs.dtype() == DType::f32 && probs.ndim() == 2,
             "cuda {}: probs {} must be F32 (N,K)", op, probs.str());
  const int64_t N = probs.dim(0), K = probs.dim(1);
  check_nk(be, op, "dlogits", dlogits, N, K);
  check_labels(be, op, labels, N);
  if (labels_b) check_labels(be, op, *labels_b, N);
  const int64_t total = N * K;
  if (total == 0) return;
  xent_bwd_kernel<<<grid_for(total, kThreads), kThreads, 0, be.stream()>>>(
      probs.data_as<const float>(), labels.data_as<const int32_t>(),
      labels_b ? labels_b->data_as<const int32_t>() : nullptr, N, K, smoothing, scale, state,
      dlogits.data_as<float>());
  RN50_CUDA_LAUNCH_CHECK();
}

/// The step state's device pointer (checked), or null when state is undefined and optional.
const float* state_ptr(const CudaBackend& be, const char* op, const Tensor& state,
                       bool required) {
  if (!state.defined()) {
    RN50_CHECK(!required, "cuda {}: a step state is required", op);
    return nullptr;
  }
  check_state(be, op, state);
  return state.data_as<const float>();
}

}  // namespace

void CudaBackend::softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing,
                                   Tensor& loss, Tensor& probs) {
  xent_fwd(*this, "softmax_xent_fwd", logits, labels, nullptr, nullptr, smoothing, loss, probs);
}

void CudaBackend::softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing,
                                   float scale, Tensor& dlogits, const Tensor& state) {
  const char* op = "softmax_xent_bwd";
  xent_bwd(*this, op, probs, labels, nullptr, smoothing, scale, dlogits,
           state_ptr(*this, op, state, false));
}

void CudaBackend::softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels,
                                         const Tensor& labels_b, float smoothing,
                                         const Tensor& state, Tensor& loss, Tensor& probs) {
  const char* op = "softmax_xent_mixup_fwd";
  xent_fwd(*this, op, logits, labels, &labels_b, state_ptr(*this, op, state, true), smoothing,
           loss, probs);
}

void CudaBackend::softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels,
                                         const Tensor& labels_b, float smoothing, float scale,
                                         Tensor& dlogits, const Tensor& state) {
  const char* op = "softmax_xent_mixup_bwd";
  xent_bwd(*this, op, probs, labels, &labels_b, smoothing, scale, dlogits,
           state_ptr(*this, op, state, true));
}

void CudaBackend::topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) {
  const char* op = "topk_hits";
  check_device(op, "logits", logits);
  RN50_CHECK(logits.dtype() == DType::f32 && logits.ndim() == 2 && logits.dim(1) > 0,
             "cuda {}: logits {} must be F32 (N,K) with K > 0", op, logits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  check_labels(*this, op, labels, N);
  check_device(op, "hits", hits);
  RN50_CHECK(hits.dtype() == DType::f32 && hits.numel() == 2,
             "cuda {}: hits is {}, expected F32 {{2}}", op, hits.str());
  RN50_CHECK(N <= 0x7fffffff, "cuda {}: {} rows exceed the grid limit", op, N);
  RN50_CUDA_CHECK(cudaMemsetAsync(hits.data(), 0, 2 * sizeof(float), stream()));
  if (N == 0) return;
  topk_hits_kernel<<<static_cast<unsigned>(N), kLossThreads, 0, stream()>>>(
      logits.data_as<const float>(), labels.data_as<const int32_t>(), K, hits.data_as<float>());
  RN50_CUDA_LAUNCH_CHECK();
}

}  // namespace rn50::cuda
