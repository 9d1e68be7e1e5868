// rn50: pooling. Max pooling forward and global average pooling forward/backward are oneDNN
// pooling primitives; max pooling backward is a plain OpenMP loop that recomputes each window's
// argmax from x exactly as torch's CPU max_pool2d does (first maximum in row-major window order,
// strict '>' with NaN taking over; padding never selected) and routes dy there, summing where
// windows overlap. This avoids keeping oneDNN's forward workspace between calls.
// f32, or bf16 under CPU AMP (the backward loop then sums in float and rounds once).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"

namespace rn50::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

namespace {

struct PoolEntry : CacheEntry {
  Exec ex;
};

/// Validates x (N,C,H,W) and y (N,C,OH,OW) for max pooling with `p`.
void check_maxpool(const char* op, const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  const DType dt = compute_dtype_of(op, "x", x);
  check_tensor(op, "y", y, dt);
  RN50_CHECK(x.ndim() == 4, "onednn {}: x must be 4-D, got {}", op, x.str());
  RN50_CHECK(p.kernel >= 1 && p.stride >= 1 && p.pad >= 0 && 2 * p.pad <= p.kernel,
             "onednn {}: bad kernel {} / stride {} / pad {}", op, p.kernel, p.stride, p.pad);
  const int64_t OH = (x.h() + 2 * p.pad - p.kernel) / p.stride + 1;
  const int64_t OW = (x.w() + 2 * p.pad - p.kernel) / p.stride + 1;
  RN50_CHECK(OH > 0 && OW > 0, "onednn {}: window {} larger than input {}", op, p.kernel,
             x.str());
  check_shape(op, "y", y, {x.n(), x.c(), OH, OW});
}

/// Element strides (n, c, h, w) of a 4-D tensor.
struct Strides {
  int64_t n, c, h, w;
};
Strides strides_of(const Tensor& t) {
  const int64_t C = t.c(), H = t.h(), W = t.w();
  if (t.layout() == Layout::NHWC) return {H * W * C, 1, W * C, C};
  return {C * H * W, H * W, W, 1};
}

/// (N,C,1,1) descriptor of the pooled output of `x`, in x's 4-D tag.
memory::desc pooled_md(const Tensor& x) {
  return md_of({x.n(), x.c(), 1, 1}, x.dtype(), x.layout() == Layout::NHWC ? tag::nhwc : tag::nchw);
}

/// The maxpool backward loop (see the file comment) on element type T (float or bf16 bits).
/// Writes every element of dx exactly once. Each task owns one image and channel block and walks
/// the output rows in order; the gradients of the input rows the current windows reach are
/// summed in float in a ring of `kernel` rows (windows of later output rows never reach rows
/// above the current window), and each input row is stored into dx (rounded once for bf16;
/// zeros for rows no window selected from) as soon as it is final. Summation order is that of
/// the output pixels, as in torch. The argmax is kept as the pixel's offset in the ring, found
/// once per window tap. The previous loop (a flat ih * W + iw argmax split by two integer
/// divisions per element, and a whole-tensor float accumulator in bf16) was measured slower in
/// a ResNet-50 step, bf16 and fp32: bench/results/cpu/2026-11-26-sapphire-rapids/maxpool_bwd.md.
template <class T>
void maxpool_bwd_loop(const Pool2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dx) {
  const int64_t N = x.n(), C = x.c(), H = x.h(), W = x.w(), OH = dy.h(), OW = dy.w();
  const int K = p.kernel, S = p.stride, P = p.pad;
  const Strides xs = strides_of(x), gs = strides_of(dy), ds = strides_of(dx);
  const T* xp = x.data_as<const T>();
  const T* gp = dy.data_as<const T>();
  T* dp = dx.data_as<T>();
  constexpr int64_t CB = 64;  // channel block (channels-last inner loop)
  const int64_t NCB = (C + CB - 1) / CB;
  const bool chan_inner = x.layout() == Layout::NHWC;
  // Parallel over (n, channel block): each task owns its dx slice, so no races.
  const int64_t tasks = chan_inner ? N * NCB : N * C;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t n = chan_inner ? t / NCB : t / C;
    const int64_t c0 = chan_inner ? (t % NCB) * CB : t % C;
    const int64_t cn = chan_inner ? std::min(CB, C - c0) : 1;
    // ring[(ih % K) * W * cn + iw * cn + c]: the float sums of input row ih.
    std::vector<float> ring(static_cast<size_t>(K * W * cn));
    int64_t flushed = 0;  // input rows [0, flushed) are stored in dx
    int64_t opened = 0;   // input rows [flushed, opened) are live in the ring
    // Stores input rows [flushed, end) into dx: live rows from the ring, others as zeros.
    auto flush = [&](int64_t end) {
      for (; flushed < end; ++flushed) {
        const float* r = ring.data() + (flushed % K) * W * cn;
        const bool live = flushed < opened;
        for (int64_t iw = 0; iw < W; ++iw) {
          T* d = dp + n * ds.n + flushed * ds.h + iw * ds.w + c0 * ds.c;
          for (int64_t c = 0; c < cn; ++c) narrow(d[c * ds.c], live ? r[iw * cn + c] : 0.f);
        }
      }
      opened = std::max(opened, flushed);
    };
    // Window argmax per channel as the offset of its input pixel in the ring (computed once
    // per tap: no division per element; int32: K * W * cn < 2^31 is checked by the caller),
    // updated without branches so that the channel loop vectorises.
    const auto at = [&](int64_t ih, int64_t iw) {
      return static_cast<int32_t>(((ih % K) * W + iw) * cn);
    };
    float best[CB];
    int32_t arg[CB];
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * S - P, 0);
      const int64_t h1 = std::min<int64_t>(oh * S - P + K, H);
      flush(std::min(h0, H));  // no window from here on reaches rows above h0
      for (; opened < h1; ++opened)
        std::fill_n(ring.data() + (opened % K) * W * cn, W * cn, 0.f);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * S - P, 0);
        const int64_t w1 = std::min<int64_t>(ow * S - P + K, W);
        for (int64_t c = 0; c < cn; ++c) {
          best[c] = -std::numeric_limits<float>::infinity();
          arg[c] = at(h0, w0);
        }
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) {
            const int64_t base = n * xs.n + ih * xs.h + iw * xs.w + c0 * xs.c;
            const int32_t idx = at(ih, iw);
            for (int64_t c = 0; c < cn; ++c) {
              const float v = widen(xp[base + c * xs.c]);
              const bool take = v > best[c] || v != v;  // strict '>', NaN takes over
              best[c] = take ? v : best[c];
              arg[c] = take ? idx : arg[c];
            }
          }
        }
        const int64_t gbase = n * gs.n + oh * gs.h + ow * gs.w + c0 * gs.c;
        for (int64_t c = 0; c < cn; ++c) ring[arg[c] + c] += widen(gp[gbase + c * gs.c]);
      }
    }
    flush(H);
  }
}

}  // namespace

void OnednnBackend::maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) {
  check_maxpool("maxpool2d_fwd", p, x, y);
  Key k = key(Tag::maxpool_fwd).add(x).add(y).add(p.kernel).add(p.stride).add(p.pad);
  auto& e = cached<PoolEntry>(k, [&] {
    auto r = std::make_unique<PoolEntry>();
    memory::desc xmd = plain_md(x), ymd = plain_md(y);
    dnnl::pooling_forward::desc d(prop_kind::forward_inference, algorithm::pooling_max, xmd, ymd,
                                  {p.stride, p.stride}, {p.kernel, p.kernel}, {p.pad, p.pad},
                                  {p.pad, p.pad});
    dnnl::pooling_forward::primitive_desc pd(d, attr(), engine());
    r->ex = make_exec(pd, dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_DST, ymd}});
    return r;
  });
  e.ex.set(DNNL_ARG_SRC, x.data());
  e.ex.set(DNNL_ARG_DST, y.data());
  run(e.ex);
}

void OnednnBackend::maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor& dx) {
  const char* op = "maxpool2d_bwd";
  check_maxpool(op, p, x, dy);
  check_tensor(op, "dx", dx, x.dtype());
  check_same_shape(op, x, "x", dx, "dx");
  check_tensor(op, "dy", dy, x.dtype());
  RN50_CHECK(int64_t{p.kernel} * x.w() * 64 <= std::numeric_limits<int32_t>::max(),
             "onednn {}: rows of {} pixels are too wide for the window index", op, x.w());
  if (x.dtype() == DType::f32)
    maxpool_bwd_loop<float>(p, x, dy, dx);
  else
    maxpool_bwd_loop<uint16_t>(p, x, dy, dx);
}

void OnednnBackend::global_avgpool_fwd(const Tensor& x, Tensor& y) {
  const char* op = "global_avgpool_fwd";
  const DType dt = compute_dtype_of(op, "x", x);
  check_tensor(op, "y", y, dt);
  RN50_CHECK(x.ndim() == 4, "onednn {}: x must be 4-D, got {}", op, x.str());
  check_shape(op, "y", y, {x.n(), x.c()});
  Key k = key(Tag::avgpool_fwd).add(x);
  auto& e = cached<PoolEntry>(k, [&] {
    auto r = std::make_unique<PoolEntry>();
    // y (N,C) row-major has the same bytes as (N,C,1,1) in either 4-D tag; use x's so that
    // oneDNN picks its channels-last / channels-first jit kernel rather than the reference one.
    memory::desc xmd = plain_md(x), ymd = pooled_md(x);
    dnnl::pooling_forward::desc d(prop_kind::forward_training,
                                  algorithm::pooling_avg_exclude_padding, xmd, ymd, {1, 1},
                                  {x.h(), x.w()}, {0, 0}, {0, 0});
    dnnl::pooling_forward::primitive_desc pd(d, attr(), engine());
    r->ex = make_exec(pd, dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_DST, ymd}});
    return r;
  });
  e.ex.set(DNNL_ARG_SRC, x.data());
  e.ex.set(DNNL_ARG_DST, y.data());
  run(e.ex);
}

void OnednnBackend::global_avgpool_bwd(const Tensor& dy, Tensor& dx) {
  const char* op = "global_avgpool_bwd";
  const DType dt = compute_dtype_of(op, "dy", dy);
  check_tensor(op, "dx", dx, dt);
  RN50_CHECK(dx.ndim() == 4, "onednn {}: dx must be 4-D, got {}", op, dx.str());
  check_shape(op, "dy", dy, {dx.n(), dx.c()});
  Key k = key(Tag::avgpool_bwd).add(dx);
  auto& e = cached<PoolEntry>(k, [&] {
    auto r = std::make_unique<PoolEntry>();
    memory::desc xmd = plain_md(dx), ymd = pooled_md(dx);
    const memory::dims st{1, 1}, ker{dx.h(), dx.w()}, pad{0, 0};
    const algorithm alg = algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_forward::desc fd(prop_kind::forward_training, alg, xmd, ymd, st, ker, pad, pad);
    dnnl::pooling_forward::primitive_desc hint(fd, attr(), engine());
    dnnl::pooling_backward::desc d(alg, xmd, ymd, st, ker, pad, pad);
    dnnl::pooling_backward::primitive_desc pd(d, attr(), engine(), hint);
    r->ex = make_exec(pd, dnnl::pooling_backward(pd),
                      {{DNNL_ARG_DIFF_DST, ymd}, {DNNL_ARG_DIFF_SRC, xmd}});
    return r;
  });
  e.ex.set(DNNL_ARG_DIFF_DST, dy.data());
  e.ex.set(DNNL_ARG_DIFF_SRC, dx.data());
  run(e.ex);
}

}  // namespace rn50::onednn
