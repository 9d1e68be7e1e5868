// rn50 CUDA backend: pooling (see rn50/backend.h and the reference src/backend/ref/pool.cpp).
//  * maxpool2d: torch.nn.MaxPool2d (padding is never selected; pad <= kernel / 2):
//      y[n,c,oh,ow] = max over r, s < kernel (inside the input) of x[n,c,oh*st-pad+r, ow*st-pad+s]
//    The window's FIRST maximum in row-major (r, s) order is its argmax; a NaN wins over any
//    number (the last NaN of the window, as the reference: NaN propagates).
//    Forward: one thread per output element, in y's memory order.
//    Backward: a gather, one thread per input element (h, w) in dx's memory order: it visits the
//    windows (oh, ow) that cover (h, w) in row-major order, recomputes each window's argmax from
//    x and adds dy[n,c,oh,ow] when the argmax is (h, w). No atomics: deterministic, and the
//    contributions are summed in the reference's order, in double (rounded once). y is not
//    needed (only checked).
//    With RN50_CUDA_MAXPOOL_BWD=indices (CudaBackend::maxpool_indices), the forward also writes
//    each output's argmax as a u8 window index r * k + s (in y's memory order, into a buffer
//    the backend keeps per (x, y, geometry)), and the backward reads those instead of
//    recomputing every window from x: a byte per covering window instead of k * k values. Same
//    windows, same order, same double sums: the same bits. Without a matching forward (another
//    x or y buffer, another geometry) it recomputes.
//  * global_avgpool: y (N,C) (or (N,C,1,1)) = mean of x (N,C,H,W) over H, W (float
//    accumulation); backward dx = dy / (H*W) broadcast. NHWC: one thread per (n, c), coalesced
//    along C; NCHW: one warp per (n, c) over its contiguous H*W values.
// Dtypes: x, y, dy, dx share one dtype (f32, f16 or bf16); 4-D operands may differ in layout.
#include "backend/cuda/kernels_common.cuh"

#include <algorithm>
#include <cstdint>
#include <string>

namespace rn50::cuda {

namespace {

using namespace kern;

/// The most y buffers maxpool2d_fwd keeps argmax indices for (RN50_CUDA_MAXPOOL_BWD=indices).
constexpr size_t kMaxPoolIndexBuffers = 8;

struct PoolArgs {
  int k, st, pad;
};

/// Row-major index ih * W + iw of the first maximum of window (oh, ow) of plane (n, c).
template <class T>
__device__ __forceinline__ int window_argmax(const T* __restrict__ x, const Geom4& gx, uint32_t n,
                                             uint32_t c, int oh, int ow, PoolArgs p) {
  const int H = static_cast<int>(gx.H), W = static_cast<int>(gx.W);
  int best = -1;
  float bv = 0.f;
  for (int r = 0; r < p.k; ++r) {
    const int ih = oh * p.st - p.pad + r;
    if (ih < 0 || ih >= H) continue;
    for (int s = 0; s < p.k; ++s) {
      const int iw = ow * p.st - p.pad + s;
      if (iw < 0 || iw >= W) continue;
      const float v = to_float(x[gx.offset(n, c, ih, iw)]);
      if (best < 0 || v > bv || isnan(v)) {
        best = ih * W + iw;
        bv = v;
      }
    }
  }
  return best;  // >= 0: pad <= kernel / 2 keeps every window partly inside the input
}

/// ind (may be null): each output's argmax as r * k + s in its window, at y's offset.
template <class T>
__global__ void __launch_bounds__(kThreads)
    maxpool_fwd_kernel(const T* __restrict__ x, Geom4 gx, T* __restrict__ y, Geom4 gy,
                       uint8_t* __restrict__ ind, int64_t n, PoolArgs p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t nn, c, oh, ow;
    gy.coords(static_cast<uint32_t>(i), nn, c, oh, ow);
    const int a = window_argmax(x, gx, nn, c, static_cast<int>(oh), static_cast<int>(ow), p);
    const int ih = a / static_cast<int>(gx.W), iw = a % static_cast<int>(gx.W);
    y[i] = x[gx.offset(nn, c, ih, iw)];
    if (ind) {
      const int r = ih - (static_cast<int>(oh) * p.st - p.pad);
      const int s = iw - (static_cast<int>(ow) * p.st - p.pad);
      ind[i] = static_cast<uint8_t>(r * p.k + s);
    }
  }
}

/// INDICES: the argmax of window (oh, ow) is read from ind (r * k + s, in gind's memory order,
/// y's) instead of recomputed from x.
template <class T, bool INDICES>
__global__ void __launch_bounds__(kThreads)
    maxpool_bwd_kernel(const T* __restrict__ x, Geom4 gx, const T* __restrict__ dy, Geom4 gdy,
                       const uint8_t* __restrict__ ind, Geom4 gind, T* __restrict__ dx,
                       Geom4 gdx, int64_t n, PoolArgs p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int OH = static_cast<int>(gdy.H), OW = static_cast<int>(gdy.W);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t nn, c, uh, uw;
    gdx.coords(static_cast<uint32_t>(i), nn, c, uh, uw);
    const int h = static_cast<int>(uh), w = static_cast<int>(uw);
    const int me = h * static_cast<int>(gx.W) + w;
    // Windows covering h: oh * st - pad <= h <= oh * st - pad + k - 1.
    const int lo_h = h + p.pad - p.k + 1, lo_w = w + p.pad - p.k + 1;
    const int oh0 = lo_h <= 0 ? 0 : (lo_h + p.st - 1) / p.st;
    const int ow0 = lo_w <= 0 ? 0 : (lo_w + p.st - 1) / p.st;
    const int oh1 = min(OH - 1, (h + p.pad) / p.st), ow1 = min(OW - 1, (w + p.pad) / p.st);
    // Double accumulation, rounded once: up to ceil(k / st)^2 contributions (9 for k 3 stride 1)
    // summed in float can cancel and miss the harness's f32 tolerance (atol 1e-7, rtol 1e-6);
    // the reference sums in double. At most a few adds per element: free next to the loads.
    double acc = 0.0;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        bool hit;
        if constexpr (INDICES) {
          const int a = ind[gind.offset(nn, c, oh, ow)];
          hit = oh * p.st - p.pad + a / p.k == h && ow * p.st - p.pad + a % p.k == w;
        } else {
          hit = window_argmax(x, gx, nn, c, oh, ow, p) == me;
        }
        if (hit) acc += static_cast<double>(to_float(dy[gdy.offset(nn, c, oh, ow)]));
      }
    dx[i] = from_float<T>(static_cast<float>(acc));
  }
}

/// NHWC x: one thread per (n, c); y[n * C + c] = sum_hw x / HW.
template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_fwd_nhwc(const T* __restrict__ x, T* __restrict__ y, uint32_t N, uint32_t C,
                     uint32_t HW) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t total = static_cast<int64_t>(N) * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const uint32_t n = static_cast<uint32_t>(i / C), c = static_cast<uint32_t>(i % C);
    const T* xp = x + static_cast<uint64_t>(n) * HW * C + c;
    float s = 0.f;
    for (uint32_t j = 0; j < HW; ++j) s += to_float(xp[static_cast<uint64_t>(j) * C]);
    y[i] = from_float<T>(s / static_cast<float>(HW));
  }
}

/// NCHW x: one warp per (n, c) (a contiguous run of HW values); y[n * C + c].
template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_fwd_nchw(const T* __restrict__ x, T* __restrict__ y, int64_t NC, uint32_t HW) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < NC;
       i += warps) {
    const T* xp = x + static_cast<uint64_t>(i) * HW;
    float s = 0.f;
    for (uint32_t j = lane; j < HW; j += 32) s += to_float(xp[j]);
    s = warp_sum(s);
    if (lane == 0) y[i] = from_float<T>(s / static_cast<float>(HW));
  }
}

/// dx[n,c,h,w] = dy[n * C + c] / HW, one thread per dx element in dx's memory order.
template <class T>
__global__ void __launch_bounds__(kThreads)
    avgpool_bwd_kernel(const T* __restrict__ dy, T* __restrict__ dx, Geom4 gdx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float count = static_cast<float>(gdx.H * gdx.W);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t nn, c, h, w;
    gdx.coords(static_cast<uint32_t>(i), nn, c, h, w);
    dx[i] = from_float<T>(to_float(dy[nn * gdx.C + c]) / count);
  }
}

/// Output geometry of a max pooling; checks the parameters and x.
Geom4 pool_out_geom(const char* op, const Pool2dParams& p, const Tensor& x) {
  RN50_CHECK(p.kernel >= 1 && p.stride >= 1 && p.pad >= 0 && p.pad <= p.kernel / 2,
             "cuda {}: invalid pooling kernel {} stride {} pad {} (pad must be <= kernel / 2)", op,
             p.kernel, p.stride, p.pad);
  RN50_CHECK(x.h() + 2 * p.pad >= p.kernel && x.w() + 2 * p.pad >= p.kernel,
             "cuda {}: window {} larger than the padded input {} (pad {})", op, p.kernel, x.str(),
             p.pad);
  Geom4 g = geom4(x);
  g.H = static_cast<uint32_t>((x.h() + 2 * p.pad - p.kernel) / p.stride + 1);
  g.W = static_cast<uint32_t>((x.w() + 2 * p.pad - p.kernel) / p.stride + 1);
  return g;
}

/// Throws unless t (N,C,OH,OW) matches the output geometry g.
void check_pool_out(const char* op, const char* name, const Tensor& t, const Tensor& x,
                    const Pool2dParams& p, const Geom4& g) {
  RN50_CHECK(t.n() == g.N && t.c() == g.C && t.h() == g.H && t.w() == g.W &&
                 t.dtype() == x.dtype(),
             "cuda {}: {} is {} but x {} with kernel {}, stride {}, pad {} gives ({},{},{},{}) "
             "of the same dtype",
             op, name, t.str(), x.str(), p.kernel, p.stride, p.pad, g.N, g.C, g.H, g.W);
}

/// What a forward's saved indices are valid for: x's buffer and logical shape, y's layout,
/// dtype and the pooling parameters (fmt string; compared whole).
std::string pool_key(const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  return fmt::format("{} {} {} {} {} {} {}", x.data(), x.str(), y.str(), p.kernel, p.stride,
                     p.pad, static_cast<int>(y.layout()));
}

/// Throws unless t is (N, C) or (N, C, 1, 1) of x's dtype.
void check_pooled(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  const bool shape_ok =
      (t.ndim() == 2 && t.dim(0) == x.n() && t.dim(1) == x.c()) ||
      (t.ndim() == 4 && t.n() == x.n() && t.c() == x.c() && t.h() == 1 && t.w() == 1);
  RN50_CHECK(shape_ok && t.dtype() == x.dtype(),
             "cuda {}: {} is {}, expected (N,C) = ({},{}) of dtype {} for {}", op, name, t.str(),
             x.n(), x.c(), dtype_name(x.dtype()), x.str());
}

}  // namespace

void CudaBackend::maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) {
  const char* op = "maxpool2d_fwd";
  check_float4(*this, op, "x", x);
  check_float4(*this, op, "y", y);
  Geom4 gy = pool_out_geom(op, p, x);
  check_pool_out(op, "y", y, x, p, gy);
  gy.nhwc = y.layout() == Layout::NHWC;
  const int64_t n = y.numel();
  if (n == 0) return;
  const PoolArgs pa{p.kernel, p.stride, p.pad};
  uint8_t* ind = nullptr;
  // At most kMaxPoolIndexBuffers outputs keep indices (a network has one max pooling; more are
  // eval-only or other batch sizes): no entry is ever freed, so none is freed under a capture.
  if (maxpool_indices_ && p.kernel * p.kernel <= 256 &&
      (pool_indices_.count(y.data()) || pool_indices_.size() < kMaxPoolIndexBuffers)) {
    PoolIndices& e = pool_indices_[y.data()];
    e.key = pool_key(p, x, y);
    ind = static_cast<uint8_t*>(e.buf.ensure(static_cast<size_t>(n)));
  }
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    maxpool_fwd_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        x.data_as<const T>(), geom4(x), y.data_as<T>(), gy, ind, n, pa);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                                const Tensor& dy, Tensor& dx) {
  const char* op = "maxpool2d_bwd";
  check_float4(*this, op, "x", x);
  check_float4(*this, op, "dy", dy);
  check_float4(*this, op, "dx", dx);
  Geom4 gdy = pool_out_geom(op, p, x);
  check_pool_out(op, "dy", dy, x, p, gdy);
  gdy.nhwc = dy.layout() == Layout::NHWC;
  if (y.defined()) {  // not needed: the argmax is recomputed from x
    check_float4(*this, op, "y", y);
    check_pool_out(op, "y", y, x, p, gdy);
  }
  check_same(op, "x", x, "dx", dx);
  const int64_t n = dx.numel();
  if (n == 0) return;
  const PoolArgs pa{p.kernel, p.stride, p.pad};
  // The forward's indices, where this y is the output of a forward on this x (maxpool_fwd).
  const uint8_t* ind = nullptr;
  Geom4 gind = gdy;
  if (maxpool_indices_ && y.defined()) {
    auto it = pool_indices_.find(y.data());
    if (it != pool_indices_.end() && it->second.key == pool_key(p, x, y)) {
      ind = static_cast<const uint8_t*>(it->second.buf.ptr);
      gind.nhwc = y.layout() == Layout::NHWC;
    }
  }
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const unsigned grid = grid_for(n, kThreads);
    if (ind)
      maxpool_bwd_kernel<T, true><<<grid, kThreads, 0, stream()>>>(
          x.data_as<const T>(), geom4(x), dy.data_as<const T>(), gdy, ind, gind, dx.data_as<T>(),
          geom4(dx), n, pa);
    else
      maxpool_bwd_kernel<T, false><<<grid, kThreads, 0, stream()>>>(
          x.data_as<const T>(), geom4(x), dy.data_as<const T>(), gdy, nullptr, gind,
          dx.data_as<T>(), geom4(dx), n, pa);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::global_avgpool_fwd(const Tensor& x, Tensor& y) {
  const char* op = "global_avgpool_fwd";
  check_float4(*this, op, "x", x);
  check_float_tensor(*this, op, "y", y);
  check_pooled(op, "y", y, x);
  const uint32_t N = static_cast<uint32_t>(x.n()), C = static_cast<uint32_t>(x.c());
  const uint32_t HW = static_cast<uint32_t>(x.h() * x.w());
  RN50_CHECK(HW > 0, "cuda {}: empty spatial extent in x {}", op, x.str());
  const int64_t NC = static_cast<int64_t>(N) * C;
  if (NC == 0) return;
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (x.layout() == Layout::NHWC)
      avgpool_fwd_nhwc<T><<<grid_for(NC, kThreads), kThreads, 0, stream()>>>(
          x.data_as<const T>(), y.data_as<T>(), N, C, HW);
    else
      avgpool_fwd_nchw<T><<<grid_for(NC * 32, kThreads), kThreads, 0, stream()>>>(
          x.data_as<const T>(), y.data_as<T>(), NC, HW);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::global_avgpool_bwd(const Tensor& dy, Tensor& dx) {
  const char* op = "global_avgpool_bwd";
  check_float4(*this, op, "dx", dx);
  check_float_tensor(*this, op, "dy", dy);
  check_pooled(op, "dy", dy, dx);
  const int64_t n = dx.numel();
  if (n == 0) return;
  dispatch_float(dx.dtype(), op, dx, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avgpool_bwd_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        dy.data_as<const T>(), dx.data_as<T>(), geom4(dx), n);
    RN50_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace rn50::cuda
