// rn50 CUDA backend: error checks and small helpers shared by the .cpp and .cu files.
// Every CUDA runtime, cuDNN and cuBLASLt call goes through one of the CHECK macros, which throw
// rn50::Error with the call, the library's error string, and the file:line of the call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

#include "core/check.h"
#include "rn50/tensor.h"

#define RN50_CUDA_CHECK(expr)                                                                 \
  do {                                                                                        \
    cudaError_t rn50_err_ = (expr);                                                           \
    RN50_CHECK(rn50_err_ == cudaSuccess, "CUDA error {} ({}) in {} at {}:{}",                 \
               cudaGetErrorName(rn50_err_), cudaGetErrorString(rn50_err_), #expr, __FILE__,   \
               __LINE__);                                                                     \
  } while (0)

#define RN50_CUDNN_CHECK(expr)                                                                \
  do {                                                                                        \
    cudnnStatus_t rn50_st_ = (expr);                                                          \
    RN50_CHECK(rn50_st_ == CUDNN_STATUS_SUCCESS, "cuDNN error {} in {} at {}:{}",             \
               cudnnGetErrorString(rn50_st_), #expr, __FILE__, __LINE__);                     \
  } while (0)

#define RN50_CUBLAS_CHECK(expr)                                                               \
  do {                                                                                        \
    cublasStatus_t rn50_st_ = (expr);                                                         \
    RN50_CHECK(rn50_st_ == CUBLAS_STATUS_SUCCESS, "cuBLAS error {} ({}) in {} at {}:{}",      \
               static_cast<int>(rn50_st_), cublasLtGetStatusString(rn50_st_), #expr,          \
               __FILE__, __LINE__);                                                           \
  } while (0)

/// Checks the launch of the kernel just queued (cudaGetLastError).
#define RN50_CUDA_LAUNCH_CHECK() RN50_CUDA_CHECK(cudaGetLastError())

namespace rn50::cuda {

/// cuDNN data type of an rn50 dtype (f32, f16, bf16, f64); throws on others.
cudnnDataType_t cudnn_dtype(DType t);
/// CUDA library data type (cudaDataType_t) for cuBLASLt; throws on unsupported dtypes.
cudaDataType_t cuda_dtype(DType t);

/// True when host pointer `p` (any address inside the allocation) is page-locked memory
/// (cudaMallocHost, cudaHostAlloc: CudaBackend::alloc_host): cudaPointerGetAttributes says
/// cudaMemoryTypeHost. Under unified addressing such memory is also readable by kernels at the
/// same address (CUDA Programming Guide, "Unified Virtual Address Space").
bool is_pinned(const void* p);

/// Blocks of `threads` threads covering n elements, capped at `max_blocks` (grid-stride loops).
inline unsigned grid_for(int64_t n, int threads = 256, int64_t max_blocks = 65535LL * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace rn50::cuda
