// rn50 CUDA backend: dtype and layout conversion between two device tensors of one logical
// shape (CudaBackend::convert_on_device, used by copy(), the conv operand staging and the fc
// layer). Conversions between F32, F16 and BF16 go through float and round to nearest even
// (__float2half_rn, __float2bfloat16_rn), so F16 <-> BF16 rounds once, exactly like the ref
// backend's host conversion. Same-dtype copies of any dtype move the raw bits (NaN payloads
// kept). A 4-D layout change (NCHW <-> NHWC) maps each destination element's logical index
// (n, c, h, w) to its source offset; everything runs as grid-stride kernels on the main stream.
#include "backend/cuda/kernels_common.cuh"  // first: see its header comment

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/plans.h"
#include "core/check.h"

namespace rn50::cuda {
namespace {

constexpr int kThreads = 256;

/// One element S -> D: identity for equal types (raw bits), else through float.
template <class S, class D>
__device__ __forceinline__ D cvt(S v) {
  if constexpr (std::is_same_v<S, D>)
    return v;
  else
    return kern::from_float<D>(kern::to_float(v));
}

/// dst[i] = cvt(src[i]) for i < n (same memory order).
template <class S, class D>
__global__ void convert_flat_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step)
    dst[i] = cvt<S, D>(src[i]);
}

/// Logical sizes of a 4-D tensor and the memory order of source and destination.
struct Dims4 {
  int64_t N, C, H, W;
  bool src_nhwc, dst_nhwc;
};

/// dst = src with a layout change: for each destination offset i (coalesced writes), decode the
/// logical index (n, c, h, w) in the destination's order and read the source at its offset.
template <class S, class D>
__global__ void convert_4d_kernel(const S* __restrict__ src, D* __restrict__ dst, Dims4 d) {
  const int64_t total = d.N * d.C * d.H * d.W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    int64_t r = i, n, c, h, w;
    if (d.dst_nhwc) {
      c = r % d.C; r /= d.C;
      w = r % d.W; r /= d.W;
      h = r % d.H; n = r / d.H;
    } else {
      w = r % d.W; r /= d.W;
      h = r % d.H; r /= d.H;
      c = r % d.C; n = r / d.C;
    }
    const int64_t j = d.src_nhwc ? ((n * d.H + h) * d.W + w) * d.C + c
                                 : ((n * d.C + c) * d.H + h) * d.W + w;
    dst[i] = cvt<S, D>(src[j]);
  }
}

/// Launches the flat or the 4-D kernel for element types S -> D.
template <class S, class D>
void launch(const Tensor& src, Tensor& dst, bool reorder, cudaStream_t stream) {
  const int64_t n = src.numel();
  const auto* s = static_cast<const S*>(src.data());
  auto* o = static_cast<D*>(dst.data());
  if (!reorder) {
    convert_flat_kernel<S, D><<<grid_for(n, kThreads), kThreads, 0, stream>>>(s, o, n);
  } else {
    const Dims4 d{src.dim(0), src.dim(1), src.dim(2), src.dim(3),
                  src.layout() == Layout::NHWC, dst.layout() == Layout::NHWC};
    convert_4d_kernel<S, D><<<grid_for(n, kThreads), kThreads, 0, stream>>>(s, o, d);
  }
  RN50_CUDA_LAUNCH_CHECK();
}

/// Dispatch on the destination float dtype.
template <class S>
void launch_to(const Tensor& src, Tensor& dst, bool reorder, cudaStream_t stream) {
  switch (dst.dtype()) {
    case DType::f32: return launch<S, float>(src, dst, reorder, stream);
    case DType::f16: return launch<S, __half>(src, dst, reorder, stream);
    case DType::bf16: return launch<S, __nv_bfloat16>(src, dst, reorder, stream);
    default: break;
  }
  RN50_FAIL("cuda convert: unsupported destination dtype in {} (F32, F16, BF16)", dst.str());
}

bool is_float_compute(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

}  // namespace

void CudaBackend::convert_on_device(const Tensor& src, Tensor& dst) {
  check_device("convert", "src", src);
  check_device("convert", "dst", dst);
  RN50_CHECK(src.same_shape(dst), "cuda convert: shape mismatch, src {} dst {}", src.str(),
             dst.str());
  if (src.numel() == 0) return;
  const bool reorder = !same_order(src, dst.layout());
  if (src.dtype() == dst.dtype()) {
    if (!reorder) {
      if (src.data() != dst.data())
        RN50_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(),
                                        cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    RN50_CHECK(src.data() != dst.data(), "cuda convert: in-place layout change of {}",
               src.str());
    // Raw element bits of the dtype's size.
    switch (dtype_size(src.dtype())) {
      case 1: return launch<uint8_t, uint8_t>(src, dst, true, stream_);
      case 2: return launch<uint16_t, uint16_t>(src, dst, true, stream_);
      case 4: return launch<uint32_t, uint32_t>(src, dst, true, stream_);
      case 8: return launch<uint64_t, uint64_t>(src, dst, true, stream_);
      default: break;
    }
    RN50_FAIL("cuda convert: unsupported element size of {}", src.str());
  }
  RN50_CHECK(is_float_compute(src.dtype()) && is_float_compute(dst.dtype()),
             "cuda convert: unsupported dtype conversion {} -> {} (only between F32, F16 and "
             "BF16)",
             src.str(), dst.str());
  RN50_CHECK(src.data() != dst.data(), "cuda convert: in-place dtype conversion {} -> {}",
             src.str(), dst.str());
  switch (src.dtype()) {
    case DType::f32: return launch_to<float>(src, dst, reorder, stream_);
    case DType::f16: return launch_to<__half>(src, dst, reorder, stream_);
    case DType::bf16: return launch_to<__nv_bfloat16>(src, dst, reorder, stream_);
    default: break;
  }
  RN50_FAIL("cuda convert: unsupported source dtype in {}", src.str());
}

}  // namespace rn50::cuda
