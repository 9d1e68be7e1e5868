// rn50 CUDA backend: fake quantization for QAT (--qat), the arithmetic of src/core/fake_quant.h
// in device code (explicitly rounded f32 operations, so that no FMA contraction makes a result
// differ from the host backends'):
//   fake_quant_act     cudaMemsetAsync(scratch = 0); absmax_kernel (max |x| into the state's
//                      scratch word with an integer atomicMax: non-negative floats order as their
//                      bit patterns, and a NaN's pattern is above inf's, so a NaN wins);
//                      update_kernel (one thread: the moving average); quantize_kernel (every
//                      element with amax read on the device). Everything stays on the stream, so
//                      a recorded training step (CUDA graph) replays the update each step.
//   fake_quant_weight  one block per output channel: the block's max |w_k|, then its elements.
#include "backend/cuda/kernels_common.cuh"
#include "core/fake_quant.h"

namespace rn50::cuda {

namespace {

using namespace kern;

/// Block-wide max of v (all threads participate; blockDim.x a multiple of 32, at most 1024).
__device__ float block_max(float v) {
  __shared__ float part[32];
  v = warp_max(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = threadIdx.x < warps ? part[threadIdx.x] : 0.f;
  if (warp == 0) v = warp_max(v);
  if (threadIdx.x == 0) part[0] = v;
  __syncthreads();
  v = part[0];
  __syncthreads();
  return v;
}

__device__ __forceinline__ float quant_dequant(float x, float s, float inv) {
  const float q = nearbyintf(__fmul_rn(x, inv));
  return __fmul_rn(fminf(fake_quant::kMaxCode, fmaxf(-fake_quant::kMaxCode, q)), s);
}

/// max |x| (as float bits) into *scratch, which holds 0 before the launch.
template <class T>
__global__ void __launch_bounds__(kThreads)
    absmax_kernel(const T* __restrict__ x, int64_t n, unsigned* __restrict__ scratch) {
  float m = 0.f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = fabsf(to_float(x[i]));
    m = (v > m || isnan(v)) ? v : m;  // keep a NaN
  }
  // A NaN's bit pattern orders above every finite value and inf: compare as integers.
  unsigned bits = __float_as_uint(m);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, o));
  __shared__ unsigned part[kThreads / 32];
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = bits;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned b = 0;
    for (int w = 0; w < kThreads / 32; ++w) b = max(b, part[w]);
    atomicMax(scratch, b);
  }
}

__global__ void update_kernel(float* __restrict__ st) {
  const float m = st[fake_quant::scratch];
  if (!isfinite(m)) return;
  const float s = __fadd_rn(__fmul_rn(fake_quant::kMovingRate, st[fake_quant::state]), 1.f);
  const float a = __fadd_rn(__fmul_rn(fake_quant::kMovingRate, st[fake_quant::accum]), m);
  st[fake_quant::state] = s;
  st[fake_quant::accum] = a;
  st[fake_quant::amax] = __fdiv_rn(a, s);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* x, T* y, int64_t n, const float* __restrict__ st) {
  const float amax = st[fake_quant::amax];
  const float s = __fdiv_rn(amax, fake_quant::kMaxCode), inv = __fdiv_rn(1.f, s);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_float<T>(amax > 0.f ? quant_dequant(to_float(x[i]), s, inv) : 0.f);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    weight_kernel(const float* __restrict__ w, T* __restrict__ y, int64_t per) {
  const float* src = w + blockIdx.x * per;
  T* dst = y + blockIdx.x * per;
  float m = 0.f;
  for (int64_t i = threadIdx.x; i < per; i += blockDim.x) m = fmaxf(m, fabsf(src[i]));
  m = block_max(m);
  const float s = __fdiv_rn(m, fake_quant::kMaxCode), inv = __fdiv_rn(1.f, s);
  for (int64_t i = threadIdx.x; i < per; i += blockDim.x)
    dst[i] = from_float<T>(m > 0.f ? quant_dequant(src[i], s, inv) : 0.f);
}

void check_pair(const CudaBackend& be, const char* op, const char* an, const Tensor& a,
                const Tensor& y) {
  check_float_tensor(be, op, an, a);
  check_float_tensor(be, op, "y", y);
  RN50_CHECK(a.same_shape(y) && (a.ndim() != 4 || a.layout() == y.layout()),
             "cuda {}: y {} must have {}'s shape and layout ({})", op, y.str(), an, a.str());
}

}  // namespace

void CudaBackend::fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) {
  const char* op = "fake_quant_act";
  check_pair(*this, op, "x", x, y);
  RN50_CHECK(x.dtype() == y.dtype(), "cuda {}: y {} must have x's dtype ({})", op, y.str(),
             x.str());
  check_device(op, "qstate", qstate);
  RN50_CHECK(qstate.dtype() == DType::f32 && qstate.numel() == fake_quant::state_size,
             "cuda {}: qstate is {}, expected F32 of {} elements", op, qstate.str(),
             static_cast<int>(fake_quant::state_size));
  const int64_t n = x.numel();
  float* st = qstate.data_as<float>();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (update) {
      RN50_CUDA_CHECK(cudaMemsetAsync(st + fake_quant::scratch, 0, sizeof(float), stream()));
      if (n > 0) {
        absmax_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
            x.data_as<const T>(), n, reinterpret_cast<unsigned*>(st + fake_quant::scratch));
        RN50_CUDA_LAUNCH_CHECK();
      }
      update_kernel<<<1, 1, 0, stream()>>>(st);
      RN50_CUDA_LAUNCH_CHECK();
    }
    if (n == 0) return;
    quantize_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x.data_as<const T>(),
                                                                         y.data_as<T>(), n, st);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::fake_quant_weight(const Tensor& w, Tensor& y) {
  const char* op = "fake_quant_weight";
  check_pair(*this, op, "w", w, y);
  RN50_CHECK(w.dtype() == DType::f32 && w.ndim() >= 2,
             "cuda {}: w must be an F32 weight (K, ...), got {}", op, w.str());
  const int64_t k = w.dim(0), per = w.numel() / k;
  RN50_CHECK(k <= 2147483647, "cuda {}: {} output channels are too many", op, k);
  if (k == 0) return;
  dispatch_float(y.dtype(), op, y, [&](auto tag) {
    using T = typename decltype(tag)::type;
    weight_kernel<T><<<static_cast<unsigned>(k), kThreads, 0, stream()>>>(w.data_as<const float>(),
                                                                          y.data_as<T>(), per);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace rn50::cuda
