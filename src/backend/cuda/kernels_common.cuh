// rn50 CUDA backend: device helpers shared by the kernel files (batchnorm.cu, eltwise.cu,
// pool.cu, loss.cu, input.cu, sgd.cu).
//  * Element access: every kernel loads f32 / f16 / bf16 elements as float, computes in float
//    (or double where noted) and rounds once when storing (round-to-nearest-even).
//  * Packs: 16-byte vectors of 4 floats or 8 halves for coalesced, vectorised loads and stores.
//  * Geom4: logical (N,C,H,W) coordinates <-> element offsets for NCHW and NHWC, in 32-bit
//    arithmetic (host code checks that a tensor has fewer than 2^32 elements).
//  * Host helpers: dtype dispatch to a template over the element type, argument checks with
//    messages naming the op, the argument and the shapes.
//
// This header must be the FIRST include of every .cu file that uses it: it works around fmt 9
// under nvcc (fmt's consteval format-string check and its constexpr detection both misfire when
// the host code goes through nvcc, so RN50_CHECK would not compile). The workaround only turns
// off fmt's compile-time format-string checking in these translation units.
#pragma once

#if defined(__CUDACC__) && !defined(FMT_CONSTEVAL)
#define FMT_CONSTEVAL
#endif
#if defined(__CUDACC__) && !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"
#include "core/check.h"
#include "rn50/tensor.h"

namespace rn50::cuda::kern {

/// Threads per block of the 1-D kernels.
constexpr int kThreads = 256;

// ------------------------------------------------------------------ element conversions

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

/// float -> element type, round-to-nearest-even.
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/// V consecutive elements, aligned to their total size (16 bytes for the vector packs), so that
/// one load / store instruction moves the whole pack.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// Elements per 16-byte pack of T (4 floats, 8 halves).
template <class T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

template <class T, int V>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[V]) {
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_float(pk.v[j]);
}

template <class T, int V>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int j = 0; j < V; ++j) pk.v[j] = from_float<T>(in[j]);
  *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

// ------------------------------------------------------------------ reductions

/// Sum over the 32 lanes of a warp (every lane gets the total). All lanes must participate.
template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Max over the 32 lanes of a warp (every lane gets the result).
template <class A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/// Chan et al.'s merge of two (count, mean, M2) summaries (M2 = sum of squared deviations):
/// n = na + nb, mean = ma + d * nb / n, M2 = M2a + M2b + d^2 * na * nb / n, d = mb - ma.
/// An empty side (count 0) leaves the other unchanged.
template <class A>
__device__ __forceinline__ void chan_merge(A& n, A& mean, A& m2, A nb, A meanb, A m2b) {
  if (nb == A(0)) return;
  if (n == A(0)) {
    n = nb;
    mean = meanb;
    m2 = m2b;
    return;
  }
  const A tot = n + nb;
  const A d = meanb - mean;
  const A fb = nb / tot;
  mean += d * fb;
  m2 += m2b + d * d * n * fb;
  n = tot;
}

// ------------------------------------------------------------------ 4-D geometry

/// Logical (N,C,H,W) sizes and the memory order of a 4-D tensor; 32-bit index arithmetic.
struct Geom4 {
  uint32_t N = 0, C = 0, H = 0, W = 0;
  bool nhwc = false;

  /// Element offset of logical (n,c,h,w).
  __device__ __forceinline__ uint32_t offset(uint32_t n, uint32_t c, uint32_t h,
                                             uint32_t w) const {
    return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
  }
  /// Logical coordinates of the element at memory offset i.
  __device__ __forceinline__ void coords(uint32_t i, uint32_t& n, uint32_t& c, uint32_t& h,
                                         uint32_t& w) const {
    if (nhwc) {
      c = i % C;
      i /= C;
      w = i % W;
      i /= W;
      h = i % H;
      n = i / H;
    } else {
      w = i % W;
      i /= W;
      h = i % H;
      i /= H;
      c = i % C;
      n = i / C;
    }
  }
  /// Channel of the element at memory offset i.
  __device__ __forceinline__ uint32_t channel(uint32_t i) const {
    return nhwc ? i % C : (i / (H * W)) % C;
  }
};

// ------------------------------------------------------------------ host helpers

template <class T>
struct Tag {
  using type = T;
};

/// Whether t is one of the floating-point compute dtypes of the kernels (f32, f16, bf16).
inline bool is_float_dtype(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

/// Calls f(Tag<float>{}), f(Tag<__half>{}) or f(Tag<__nv_bfloat16>{}) for t's dtype; throws
/// rn50::Error naming op and t otherwise.
template <class F>
void dispatch_float(DType dt, const char* op, const Tensor& t, F&& f) {
  switch (dt) {
    case DType::f32:
      f(Tag<float>{});
      break;
    case DType::f16:
      f(Tag<__half>{});
      break;
    case DType::bf16:
      f(Tag<__nv_bfloat16>{});
      break;
    default:
      RN50_FAIL("cuda {}: {} has dtype {}; the kernel supports F32, F16 and BF16", op, t.str(),
                dtype_name(dt));
  }
}

/// Whether a device pointer is 16-byte aligned (vector packs).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// check_device plus: dtype f32/f16/bf16.
inline void check_float_tensor(const CudaBackend& be, const char* op, const char* name,
                               const Tensor& t) {
  be.check_device(op, name, t);
  RN50_CHECK(is_float_dtype(t.dtype()), "cuda {}: {} is {}, expected F32, F16 or BF16", op, name,
             t.str());
}

/// check_float_tensor plus: 4-D with fewer than 2^32 elements.
inline void check_float4(const CudaBackend& be, const char* op, const char* name,
                         const Tensor& t) {
  check_float_tensor(be, op, name, t);
  RN50_CHECK(t.ndim() == 4, "cuda {}: {} is {}, expected a 4-D (N,C,H,W) tensor", op, name,
             t.str());
  RN50_CHECK(t.numel() <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()),
             "cuda {}: {} is {}: the kernels index tensors of at most 2^32 - 1 elements", op,
             name, t.str());
}

/// Checks a step state (rn50::StepState): an f32 tensor of StepState::size elements on the
/// device. Throws rn50::Error naming `op` otherwise.
inline void check_state(const CudaBackend& be, const char* op, const Tensor& state) {
  be.check_device(op, "state", state);
  RN50_CHECK(state.dtype() == DType::f32 && state.numel() == StepState::size,
             "cuda {}: state is {}, expected an F32 step state of {} elements", op, state.str(),
             static_cast<int>(StepState::size));
}

/// check_device plus: f32, 1-D of length C (per-channel parameters and statistics).
inline void check_channel_vec(const CudaBackend& be, const char* op, const char* name,
                              const Tensor& t, int64_t C) {
  be.check_device(op, name, t);
  RN50_CHECK(t.dtype() == DType::f32 && t.ndim() == 1 && t.dim(0) == C,
             "cuda {}: {} is {}, expected F32 ({}) per channel", op, name, t.str(), C);
}

/// Throws unless a and b have the same logical shape and dtype.
inline void check_same(const char* op, const char* an, const Tensor& a, const char* bn,
                       const Tensor& b) {
  RN50_CHECK(a.same_shape(b) && a.dtype() == b.dtype(),
             "cuda {}: {} {} and {} {} must have the same shape and dtype", op, an, a.str(), bn,
             b.str());
}

/// Geometry of a checked 4-D tensor.
inline Geom4 geom4(const Tensor& t) {
  Geom4 g;
  g.N = static_cast<uint32_t>(t.n());
  g.C = static_cast<uint32_t>(t.c());
  g.H = static_cast<uint32_t>(t.h());
  g.W = static_cast<uint32_t>(t.w());
  g.nhwc = t.layout() == Layout::NHWC;
  return g;
}

}  // namespace rn50::cuda::kern
