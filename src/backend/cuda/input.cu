// rn50 CUDA backend: input normalisation of decoded u8 images, torchvision's ToTensor() followed
// by Normalize(mean, std) (see rn50/backend.h and the reference src/backend/ref/input.cpp):
//   dst[n,c,h,w] = (src[n,c,h,w] / 255 - mean[c]) / std[c]
// computed in float32 in exactly that order with correctly rounded IEEE operations (__fdiv_rn,
// __fsub_rn: immune to fast-math flags), so an f32 result is bit-identical to torchvision's;
// f16/bf16 destinations round that float once. A 4-channel dst gets a zero fourth channel.
// src: u8 (N,3,H,W) in Layout::NHWC on the device (decoded RGB pixels); dst: (N,3,H,W) f32,
// f16 or bf16 in dst's layout. One thread per dst element in dst's memory order; a 4-channel
// NHWC dst (the tensor-core stem's input, --image-shape 4,H,W) is written one pixel per thread
// instead, its four values in one 8-byte (f16/bf16) or 16-byte (f32) store: the same values.
#include "backend/cuda/kernels_common.cuh"

namespace rn50::cuda {

namespace {

using namespace kern;

struct Norm3 {
  float mean[3], std[3];
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    normalize_u8_kernel(const uint8_t* __restrict__ src, Geom4 gs, T* __restrict__ dst,
                        Geom4 gd, int64_t n, Norm3 p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t nn, c, h, w;
    gd.coords(static_cast<uint32_t>(i), nn, c, h, w);
    if (c == 3) {  // the zero fourth channel of a 4-channel input (--image-shape 4,H,W)
      dst[i] = from_float<T>(0.f);
      continue;
    }
    const float m = c == 0 ? p.mean[0] : c == 1 ? p.mean[1] : p.mean[2];
    const float s = c == 0 ? p.std[0] : c == 1 ? p.std[1] : p.std[2];
    const float v = __fdiv_rn(static_cast<float>(src[gs.offset(nn, c, h, w)]), 255.f);
    dst[i] = from_float<T>(__fdiv_rn(__fsub_rn(v, m), s));
  }
}

/// Four values of T stored at once (8 bytes for f16/bf16, 16 for f32).
template <class T>
struct alignas(4 * sizeof(T)) Pixel4 {
  T v[4];
};

/// A 4-channel NHWC dst, one pixel per thread: src's 3 bytes, dst's 4 values (the fourth zero).
/// src and dst have the same N, H, W and both are NHWC, so pixel i is at 3i and 4i.
template <class T>
__global__ void __launch_bounds__(kThreads)
    normalize_u8_pixel4_kernel(const uint8_t* __restrict__ src, Pixel4<T>* __restrict__ dst,
                               int64_t pixels, Norm3 p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels;
       i += stride) {
    Pixel4<T> o;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float v = __fdiv_rn(static_cast<float>(src[3 * i + c]), 255.f);
      o.v[c] = from_float<T>(__fdiv_rn(__fsub_rn(v, p.mean[c]), p.std[c]));
    }
    o.v[3] = from_float<T>(0.f);
    dst[i] = o;
  }
}

}  // namespace

void CudaBackend::normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                               const std::array<float, 3>& std, Tensor& dst) {
  const char* op = "normalize_u8";
  check_device(op, "src", src);
  RN50_CHECK(src.dtype() == DType::u8 && src.ndim() == 4 && src.c() == 3 &&
                 src.layout() == Layout::NHWC,
             "cuda {}: src is {}, expected a U8 (N,3,H,W) NHWC tensor", op, src.str());
  check_float4(*this, op, "dst", dst);
  RN50_CHECK(dst.n() == src.n() && (dst.c() == 3 || dst.c() == 4) && dst.h() == src.h() &&
                 dst.w() == src.w(),
             "cuda {}: dst {} must be src {} with 3 or 4 channels", op, dst.str(), src.str());
  for (int c = 0; c < 3; ++c) RN50_CHECK(std[c] != 0.f, "cuda {}: std[{}] is zero", op, c);
  const int64_t n = dst.numel();
  if (n == 0) return;
  const Norm3 p{{mean[0], mean[1], mean[2]}, {std[0], std[1], std[2]}};
  // The per-pixel kernel wants dst NHWC (tensors are dense: pixel i at 3i and 4i) and aligned
  // for its vector store.
  const bool pixel4 =
      dst.c() == 4 && dst.layout() == Layout::NHWC &&
      reinterpret_cast<uintptr_t>(dst.data()) % (4 * dtype_size(dst.dtype())) == 0;
  dispatch_float(dst.dtype(), op, dst, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (pixel4) {
      const int64_t pixels = n / 4;
      normalize_u8_pixel4_kernel<T><<<grid_for(pixels, kThreads), kThreads, 0, stream()>>>(
          src.data_as<const uint8_t>(), static_cast<Pixel4<T>*>(dst.data()), pixels, p);
      RN50_CUDA_LAUNCH_CHECK();
      return;
    }
    normalize_u8_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        src.data_as<const uint8_t>(), geom4(src), dst.data_as<T>(), geom4(dst), n, p);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace rn50::cuda
