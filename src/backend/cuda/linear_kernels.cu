// rn50 CUDA backend: the two small kernels of the fc layer (linear.cpp).
//  * linear_bias_fill: y[n, k] = b[k] for a row-major (N, K) y: the bias, written before the
//    cuBLASLt matmul that then accumulates x w^T into it (beta = 1), so y = x w^T + b is rounded
//    once into y's dtype.
//  * linear_bias_grad: db[k] = sum_n dy[n, k] (torch Linear's bias gradient), f32 accumulation
//    in a fixed order (deterministic), one thread per output column k (coalesced reads).
// Element types: F32, F16 or BF16 for every pointer, independently.
#include "backend/cuda/kernels_common.cuh"  // first: see its header comment

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_util.h"
#include "core/check.h"
#include "rn50/tensor.h"

namespace rn50::cuda {
namespace {

constexpr int kThreads = 256;

template <class B, class Y>
__global__ void bias_fill_kernel(const B* __restrict__ b, Y* __restrict__ y, int64_t N,
                                 int64_t K) {
  const int64_t total = N * K;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step)
    y[i] = kern::from_float<Y>(kern::to_float(b[i % K]));
}

template <class S, class D>
__global__ void bias_grad_kernel(const S* __restrict__ dy, D* __restrict__ db, int64_t N,
                                 int64_t K) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < K;
       k += step) {
    float acc = 0.f;
    for (int64_t n = 0; n < N; ++n) acc += kern::to_float(dy[n * K + k]);
    db[k] = kern::from_float<D>(acc);
  }
}

/// Calls f(std::type_identity<T>{}) with T the element type of float dtype `t` (F32, F16, BF16).
template <class F>
void with_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::f32: return f(std::type_identity<float>{});
    case DType::f16: return f(std::type_identity<__half>{});
    case DType::bf16: return f(std::type_identity<__nv_bfloat16>{});
    default: break;
  }
  RN50_FAIL("cuda linear: {} has dtype {} (F32, F16 or BF16 only)", what, dtype_name(t));
}

}  // namespace

/// y (N, K) row-major of dtype yt = broadcast of b (K) of dtype bt over the rows.
void linear_bias_fill(const void* b, DType bt, void* y, DType yt, int64_t N, int64_t K,
                      cudaStream_t stream) {
  if (N * K == 0) return;
  with_type(bt, "b", [&](auto bv) {
    using B = typename decltype(bv)::type;
    with_type(yt, "y", [&](auto yv) {
      using Y = typename decltype(yv)::type;
      bias_fill_kernel<B, Y><<<grid_for(N * K, kThreads), kThreads, 0, stream>>>(
          static_cast<const B*>(b), static_cast<Y*>(y), N, K);
      RN50_CUDA_LAUNCH_CHECK();
    });
  });
}

/// db (K) of dtype dbt = column sums of dy (N, K) row-major of dtype dyt.
void linear_bias_grad(const void* dy, DType dyt, void* db, DType dbt, int64_t N, int64_t K,
                      cudaStream_t stream) {
  if (K == 0) return;
  with_type(dyt, "dy", [&](auto sv) {
    using S = typename decltype(sv)::type;
    with_type(dbt, "db", [&](auto dv) {
      using D = typename decltype(dv)::type;
      bias_grad_kernel<S, D><<<grid_for(K, kThreads), kThreads, 0, stream>>>(
          static_cast<const S*>(dy), static_cast<D*>(db), N, K);
      RN50_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace rn50::cuda
