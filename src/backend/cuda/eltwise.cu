// rn50 CUDA backend: elementwise ops (see Backend in rn50/backend.h; semantics of the reference
// src/backend/ref/eltwise.cpp):
//   relu_fwd      y  = x > 0 ? x : 0          (NaN -> 0, as the reference)
//   relu_bwd      dx = y > 0 ? dy : 0         (torch threshold_backward on the forward output)
//   add           y  = a + b
//   add_relu_fwd  y  = max(a + b, 0)          (its backward is relu_bwd on y)
//   add_relu_bwd  dx = y > 0 ? g1 + g2 : 0    (relu_bwd of a join whose gradient came in two
//                                              parts: add + relu_bwd in one pass)
//   bias_act      y  = act(y + bias[k] + z)   (the epilogue of conv2d_bias_act_fwd when cuDNN's
//                                              fused call cannot take the configuration)
// Operands: one logical shape (any rank) and one dtype (f32, f16 or bf16; computed in float,
// rounded once on store). 4-D operands may each be NCHW or NHWC.
// Kernels:
//  * flat: when every operand has the same memory order (same layout, or C == 1, or H*W == 1,
//    or not 4-D): a grid-stride loop over 16-byte packs (4 floats / 8 halves) when every pointer
//    is 16-byte aligned, scalar otherwise, plus a scalar tail.
//  * general: mixed layouts; one thread per element in y's memory order (coalesced stores),
//    logical coordinates mapped to each input's offset.
// Outputs may alias inputs of the same layout (each element is read and written by one thread).
#include "backend/cuda/kernels_common.cuh"

namespace rn50::cuda {

namespace {

using namespace kern;

struct ReluOp {
  __device__ __forceinline__ float operator()(float x, float) const { return x > 0.f ? x : 0.f; }
};
struct ReluBwdOp {
  __device__ __forceinline__ float operator()(float y, float dy) const {
    return y > 0.f ? dy : 0.f;
  }
};
struct AddOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct AddReluOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    const float s = a + b;
    return s > 0.f ? s : 0.f;
  }
};

/// y[i] = op(a[i], b[i]) over n elements in memory order (b unused when !BINARY); V-element
/// packs (pointers 16-byte aligned when V > 1) then a scalar tail.
template <class T, int V, bool BINARY, class Op>
__global__ void eltwise_flat_kernel(const T* a, const T* b, T* y, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t npack = n / V;
  for (int64_t p = tid; p < npack; p += stride) {
    float av[V], bv[V], yv[V];
    load_pack<T, V>(a + p * V, av);
    if constexpr (BINARY) load_pack<T, V>(b + p * V, bv);
#pragma unroll
    for (int j = 0; j < V; ++j) yv[j] = op(av[j], BINARY ? bv[j] : 0.f);
    store_pack<T, V>(y + p * V, yv);
  }
  for (int64_t i = npack * V + tid; i < n; i += stride) {
    const float bi = BINARY ? to_float(b[i]) : 0.f;
    y[i] = from_float<T>(op(to_float(a[i]), bi));
  }
}

/// Mixed layouts: y (memory order of gy) = op(a, b) with a, b read through their own geometry.
template <class T, bool BINARY, class Op>
__global__ void eltwise_general_kernel(const T* a, Geom4 ga, const T* b, Geom4 gb, T* y,
                                       Geom4 gy, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t nn, c, h, w;
    gy.coords(static_cast<uint32_t>(i), nn, c, h, w);
    const float av = to_float(a[ga.offset(nn, c, h, w)]);
    const float bv = BINARY ? to_float(b[gb.offset(nn, c, h, w)]) : 0.f;
    y[i] = from_float<T>(op(av, bv));
  }
}

/// Whether 4-D tensors t and u store their elements in the same order.
bool same_order(const Tensor& t, const Tensor& u) {
  if (t.ndim() != 4) return true;
  return t.layout() == u.layout() || t.c() == 1 || t.h() * t.w() == 1;
}

/// Checks and launches one elementwise op: y = op(a, b) (b == nullptr: unary).
template <class Op>
void launch_eltwise(const CudaBackend& be, const char* op_name, Op op, const char* an,
                    const Tensor& a, const char* bn, const Tensor* b, const char* yn, Tensor& y) {
  check_float_tensor(be, op_name, an, a);
  check_float_tensor(be, op_name, yn, y);
  check_same(op_name, an, a, yn, y);
  if (b) {
    check_float_tensor(be, op_name, bn, *b);
    check_same(op_name, an, a, bn, *b);
  }
  const int64_t n = y.numel();
  if (n == 0) return;
  const bool flat = same_order(a, y) && (!b || same_order(*b, y));
  if (!flat) {
    // Mixed 4-D layouts: 32-bit coordinate arithmetic.
    check_float4(be, op_name, yn, y);
  }
  dispatch_float(y.dtype(), op_name, y, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ap = a.data_as<const T>();
    const T* bp = b ? b->data_as<const T>() : nullptr;
    T* yp = y.data_as<T>();
    if (flat) {
      constexpr int V = kVec16<T>;
      const bool vec = aligned16(ap) && aligned16(yp) && (!bp || aligned16(bp)) && n >= V;
      if (vec) {
        const unsigned grid = grid_for(n / V, kThreads);
        if (b)
          eltwise_flat_kernel<T, V, true><<<grid, kThreads, 0, be.stream()>>>(ap, bp, yp, n, op);
        else
          eltwise_flat_kernel<T, V, false><<<grid, kThreads, 0, be.stream()>>>(ap, bp, yp, n, op);
      } else {
        const unsigned grid = grid_for(n, kThreads);
        if (b)
          eltwise_flat_kernel<T, 1, true><<<grid, kThreads, 0, be.stream()>>>(ap, bp, yp, n, op);
        else
          eltwise_flat_kernel<T, 1, false><<<grid, kThreads, 0, be.stream()>>>(ap, bp, yp, n, op);
      }
    } else {
      const Geom4 ga = geom4(a), gy = geom4(y), gb = b ? geom4(*b) : Geom4{};
      const unsigned grid = grid_for(n, kThreads);
      if (b)
        eltwise_general_kernel<T, true>
            <<<grid, kThreads, 0, be.stream()>>>(ap, ga, bp, gb, yp, gy, n, op);
      else
        eltwise_general_kernel<T, false>
            <<<grid, kThreads, 0, be.stream()>>>(ap, ga, bp, gb, yp, gy, n, op);
    }
    RN50_CUDA_LAUNCH_CHECK();
  });
}

/// dx[i] = y[i] > 0 ? g1[i] + g2[i] : 0 over n elements in one memory order (sum in float,
/// rounded once).
template <class T>
__global__ void __launch_bounds__(kThreads)
    add_relu_bwd_kernel(const T* __restrict__ y, const T* g1, const T* g2, T* dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float s = to_float(g1[i]) + to_float(g2[i]);
    dx[i] = from_float<T>(to_float(y[i]) > 0.f ? s : 0.f);
  }
}

/// y[i] = act(y[i] + bias[k] + z[i]) in y's memory order; k = i % K (NHWC) or
/// (i / HW) % K (NCHW); z may be null.
template <class T>
__global__ void __launch_bounds__(kThreads)
    bias_act_kernel(T* y, const T* __restrict__ bias, const T* z, int64_t n, int64_t K,
                    int64_t hw, bool nhwc, bool relu) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t k = nhwc ? i % K : (i / hw) % K;
    float v = to_float(y[i]) + to_float(bias[k]);
    if (z) v += to_float(z[i]);
    y[i] = from_float<T>(relu && v < 0.f ? 0.f : v);
  }
}

}  // namespace

void CudaBackend::bias_act(const Tensor& bias, const Tensor& z, bool relu, Tensor& y) {
  const char* op = "conv2d_bias_act_fwd epilogue";
  check_float_tensor(*this, op, "y", y);
  check_float4(*this, op, "y", y);
  check_device(op, "bias", bias);
  RN50_CHECK(bias.numel() == y.c() && bias.dtype() == y.dtype(),
             "cuda {}: bias {} does not match y {}", op, bias.str(), y.str());
  if (z.defined()) {
    check_same(op, "z", z, "y", y);
    RN50_CHECK(same_order(z, y), "cuda {}: z {} and y {} differ in layout", op, z.str(), y.str());
  }
  const int64_t n = y.numel();
  if (n == 0) return;
  // NHWC memory order unless the layouts coincide (C == 1 or H*W == 1: either formula works).
  const bool nhwc = y.layout() == Layout::NHWC;
  dispatch_float(y.dtype(), op, y, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_act_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        y.data_as<T>(), bias.data_as<const T>(), z.defined() ? z.data_as<const T>() : nullptr, n,
        y.c(), y.h() * y.w(), nhwc, relu);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) {
  const char* op = "add_relu_bwd";
  check_float_tensor(*this, op, "y", y);
  check_float_tensor(*this, op, "g1", g1);
  check_float_tensor(*this, op, "g2", g2);
  check_float_tensor(*this, op, "dx", dx);
  check_same(op, "y", y, "g1", g1);
  check_same(op, "y", y, "g2", g2);
  check_same(op, "y", y, "dx", dx);
  if (!(same_order(y, dx) && same_order(g1, dx) && same_order(g2, dx))) {
    // Mixed layouts (not in the model's schedule): the two ops, in place on dx.
    add(g1, g2, dx);
    relu_bwd(y, dx, dx);
    return;
  }
  const int64_t n = dx.numel();
  if (n == 0) return;
  dispatch_float(dx.dtype(), op, dx, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_relu_bwd_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        y.data_as<const T>(), g1.data_as<const T>(), g2.data_as<const T>(), dx.data_as<T>(), n);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::relu_fwd(const Tensor& x, Tensor& y) {
  launch_eltwise(*this, "relu_fwd", ReluOp{}, "x", x, nullptr, nullptr, "y", y);
}

void CudaBackend::relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) {
  launch_eltwise(*this, "relu_bwd", ReluBwdOp{}, "y", y, "dy", &dy, "dx", dx);
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  launch_eltwise(*this, "add", AddOp{}, "a", a, "b", &b, "y", y);
}

void CudaBackend::add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) {
  launch_eltwise(*this, "add_relu_fwd", AddReluOp{}, "a", a, "b", &b, "y", y);
}

}  // namespace rn50::cuda
