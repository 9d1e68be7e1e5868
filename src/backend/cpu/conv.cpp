// rn50: oneDNN convolution: forward, backward data and backward weights (direct algorithm).
// The Backend's three conv calls check their shapes here and run through the convolution
// registry (conv_registry.h), whose last entry is this file's oneDNN convolution
// (conv2d_*_onednn); the other paths named below are the registry's other entries.
// Activations stay in their plain layout (nchw/nhwc); the weight layout is chosen by oneDNN
// (format_tag::any) and our OIHW weights / weight gradients are reordered into / out of it by
// cached reorders through the backend's weight scratch buffer.
// f32, or bf16 throughout (x, w, y and the gradients; oneDNN accumulates in f32) under CPU AMP.
// Padding: padding_l = padding_r = pad; oneDNN's output size (H + 2*pad - R) / stride + 1 uses
// the same floor division as torch, so the right padding never contributes an extra output.
// Winograd: an f32 3x3 conv with stride 1 and padding 1 (13 of ResNet-50's 53) runs oneDNN's
// Winograd F(4x4, 3x3) algorithm (jit_wino_4x3) in all three directions, unless
// RN50_CONV_ALGO=direct. Its activations live in a blocked layout (nChw16c), so they are
// reordered in and out through backend scratch buffers ("reorder activations (winograd)" in a
// profile). Measured faster than the direct conv in every direction with oneDNN 2.6 on AVX-512:
// bench/results/cpu/2026-11-25-zen4-epyc/onednn_winograd_f32.md. The result differs from the direct
// convolution by rounding only (relative error about 1e-6 to 1e-5 in f32; Lavin & Gray, "Fast
// Algorithms for Convolutional Neural Networks", CVPR 2016). FLOP counts and GFLOP/s stay those of
// the direct convolution.
// The registry's other entries, each where the rule table (conv_rules.cpp; which shapes on which
// CPUs, and why: docs/perf/cpu-kernels.md) takes it: 1x1 convolutions on NHWC activations as
// oneDNN matmuls (conv_algo.h, conv_matmul.cpp); f32 3x3 stride-1 NHWC convs in all three
// directions as our own Winograd (conv_winograd.cpp), for CPUs where oneDNN has no Winograd;
// KxK weight gradients as im2col + matmuls (conv_im2col.cpp); the bf16 or f32 weight gradient
// of NHWC convs as our own GEMM (conv_wgrad_gemm.cpp; conv_own_wgrad_allowed), which writes the
// gradient in the weights' own order, OIHW or OHWI (no reorder); and bf16 3x3 stride-1 NHWC
// convs in all three directions as our own Winograd F(2x2, 3x3) (winograd_f23_bf16.h;
// conv_own_winograd_bf16_allowed), whose rounding differs from the direct conv's (about twice
// its error).
#include <algorithm>

#include "backend/cpu/conv_registry.h"
#include "backend/cpu/onednn_backend.h"
#include "core/check.h"
#include "rn50/profile.h"

namespace rn50::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

namespace {

/// Shapes of one convolution, validated against x (N,C,H,W), w (K,C,R,S), y (N,K,OH,OW).
struct Geo {
  int64_t N, C, H, W, K, R, S, OH, OW;
  DType dt;  ///< compute dtype of x, w and y (f32 or bf16)
};

Geo conv_geo(const char* op, const Conv2dParams& p, const Tensor& x, const Tensor& w,
             const Tensor& y) {
  const DType dt = compute_dtype_of(op, "x", x);
  check_tensor(op, "w", w, dt);
  check_tensor(op, "y", y, dt);
  RN50_CHECK(x.ndim() == 4 && w.ndim() == 4 && y.ndim() == 4,
             "onednn {}: expected 4-D tensors, got x {} w {} y {}", op, x.str(), w.str(),
             y.str());
  RN50_CHECK(p.stride >= 1 && p.pad >= 0, "onednn {}: bad stride {} / pad {}", op, p.stride,
             p.pad);
  Geo g{x.n(), x.c(), x.h(), x.w(), w.n(), w.h(), w.w(), 0, 0, dt};
  g.OH = (g.H + 2 * p.pad - g.R) / p.stride + 1;
  g.OW = (g.W + 2 * p.pad - g.S) / p.stride + 1;
  RN50_CHECK(w.c() == g.C && g.OH > 0 && g.OW > 0,
             "onednn {}: x {} does not match w {} (stride {}, pad {})", op, x.str(), w.str(),
             p.stride, p.pad);
  check_shape(op, "y", y, {g.N, g.K, g.OH, g.OW});
  return g;
}

memory::dims wdims(const Geo& g) { return {g.K, g.C, g.R, g.S}; }
memory::desc any_w(const Geo& g) { return md_of(wdims(g), g.dt, tag::any); }
/// Our weight tensor's own layout: OIHW (Layout::NCHW) or KRSC = OHWI (Layout::NHWC).
memory::desc user_w(const Geo& g, const Tensor& w) {
  return md_of(wdims(g), g.dt, w.layout() == Layout::NHWC ? tag::ohwi : tag::oihw);
}

/// The algorithm policy as a cache-key entry: a conv cached under one policy is not reused
/// under another (set_conv_algo in tests).
int64_t algo_key() { return static_cast<int64_t>(conv_algo()); }

/// Whether this conv may run as Winograd (see the file comment): f32, 3x3, stride 1, pad 1,
/// and Winograd allowed (conv_winograd_allowed). oneDNN may still decline a shape (then: direct).
bool winograd_candidate(const Conv2dParams& p, const Geo& g) {
  return conv_winograd_allowed() && g.dt == DType::f32 && g.R == 3 && g.S == 3 &&
         p.stride == 1 && p.pad == 1;
}

/// Activations of a Winograd conv: `any` layout (the primitive picks its blocked one).
memory::desc any_act(const Tensor& t) { return md_of(t.shape(), t.dtype(), tag::any); }

/// Forward primitive descriptor (also the hint of the backward ones), with `alg`.
dnnl::convolution_forward::primitive_desc fwd_pd(dnnl::engine& eng, const Conv2dParams& p,
                                                 const Geo& g, const memory::desc& xmd,
                                                 const memory::desc& ymd,
                                                 algorithm alg = algorithm::convolution_direct) {
  memory::dims st{p.stride, p.stride}, pad{p.pad, p.pad};
  dnnl::convolution_forward::desc d(prop_kind::forward_training, alg, xmd, any_w(g), ymd, st, pad,
                                    pad);
  return dnnl::convolution_forward::primitive_desc(d, OnednnBackend::attr(), eng);
}

/// An activation reorder between our plain layout and the one a Winograd conv chose, through
/// backend scratch slot `slot` (undefined when the layouts agree).
struct ActReorder {
  Exec ex;
  size_t bytes = 0;  ///< bytes of the conv-layout activation
  ScratchSlot slot = kScratchAct0;
};

/// A convolution plus, when its weight layout is not OIHW, the reorder to/from OIHW, and for
/// Winograd the activation reorders (inputs in[0..1] in argument order, output out).
struct ConvEntry : CacheEntry {
  Exec conv;
  Exec wre;              ///< weights reorder (undefined when the conv uses OIHW directly)
  size_t w_bytes = 0;    ///< bytes of the conv-layout weights
  ActReorder in[2], out;
  bool winograd = false;  ///< oneDNN took the Winograd algorithm (else direct)
};

/// The registry name of what a ConvEntry runs (conv_registry.h).
const char* entry_name(const ConvEntry& e) {
  return e.winograd ? "onednn_winograd" : "onednn_direct";
}

/// Builds `r` converting `from` into `to` through `slot` if they differ.
void make_act(OnednnBackend& be, ActReorder& r, const memory::desc& from, const memory::desc& to,
              ScratchSlot slot) {
  r.slot = slot;
  if (from == to) return;
  dnnl::reorder::primitive_desc pd(be.engine(), from, be.engine(), to, OnednnBackend::attr());
  r.ex = be.make_exec(pd, dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  r.bytes = std::max(from.get_size(), to.get_size());
}

constexpr ProfileOp kActReorder{"reorder activations (winograd)", "reorder", "-"};

/// The input `t` in the conv's layout: t itself, or its reorder into r's scratch slot.
const void* act_in(OnednnBackend& be, ActReorder& r, const Tensor& t) {
  if (!r.ex.defined()) return t.data();
  OpProfiler::Scope timed(kActReorder, 0, 2.0 * static_cast<double>(t.nbytes()), nullptr);
  void* buf = be.scratch(r.slot, r.bytes);
  r.ex.set(DNNL_ARG_FROM, t.data());
  r.ex.set(DNNL_ARG_TO, buf);
  be.run(r.ex);
  return buf;
}
/// Where the conv writes output `t`: t itself, or r's scratch slot (then act_out copies back).
void* act_dst(OnednnBackend& be, ActReorder& r, Tensor& t) {
  return r.ex.defined() ? be.scratch(r.slot, r.bytes) : t.data();
}
void act_out(OnednnBackend& be, ActReorder& r, Tensor& t) {
  if (!r.ex.defined()) return;
  OpProfiler::Scope timed(kActReorder, 0, 2.0 * static_cast<double>(t.nbytes()), nullptr);
  r.ex.set(DNNL_ARG_FROM, be.scratch(r.slot, r.bytes));
  r.ex.set(DNNL_ARG_TO, t.data());
  be.run(r.ex);
}

/// Runs `make(alg)` with Winograd when `try_wino`, falling back to direct when oneDNN declines.
template <class Make>
auto with_algorithm(bool try_wino, Make&& make) {
  if (try_wino) {
    try {
      return make(algorithm::convolution_winograd);
    } catch (const dnnl::error&) {
      // not implemented for this shape / CPU: the direct conv below
    }
  }
  return make(algorithm::convolution_direct);
}

/// Builds the weight reorder between `from` and `to` if they differ.
void make_wre(OnednnBackend& be, ConvEntry& e, const memory::desc& from,
              const memory::desc& to) {
  if (from == to) return;
  dnnl::reorder::primitive_desc pd(be.engine(), from, be.engine(), to, OnednnBackend::attr());
  e.wre = be.make_exec(pd, dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

// The weight reorders, ops of their own in a profile (rn50/profile.h): the time a step spends
// converting weights between our plain layout and oneDNN's blocked one, every call.
constexpr ProfileOp kWreFwd{"reorder conv weights (fwd)", "reorder", "fwd"};
constexpr ProfileOp kWreBwdData{"reorder conv weights (bwd_data)", "reorder", "bwd_data"};
constexpr ProfileOp kWreBwdWeights{"reorder conv dweights (bwd_weights)", "reorder",
                                   "bwd_weights"};

/// The weights in the layout the conv primitive chose: `w` itself (OIHW), or its reorder into the
/// backend's weight scratch buffer (timed as `op` in an active profile).
const void* conv_weights(OnednnBackend& be, ConvEntry& e, const Tensor& w, const ProfileOp& op) {
  if (!e.wre.defined()) return w.data();
  OpProfiler::Scope timed(op, 0, 2.0 * static_cast<double>(w.nbytes()), nullptr);
  void* buf = be.scratch(kScratchWeights, e.w_bytes);
  e.wre.set(DNNL_ARG_FROM, w.data());
  e.wre.set(DNNL_ARG_TO, buf);
  be.run(e.wre);
  return buf;
}

}  // namespace

void OnednnBackend::conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                               Tensor& y) {
  conv_geo("conv2d_fwd", p, x, w, y);
  run_conv(*this, ConvCall{ConvDir::fwd, p, x, w, y, y});
}

void OnednnBackend::conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                                    Tensor& dx) {
  conv_geo("conv2d_bwd_data", p, dx, w, dy);
  run_conv(*this, ConvCall{ConvDir::bwd_data, p, dx, w, dy, dx});
}

void OnednnBackend::conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                                       Tensor& dw) {
  conv_geo("conv2d_bwd_weights", p, x, dw, dy);
  run_conv(*this, ConvCall{ConvDir::bwd_weights, p, x, dw, dy, dw});
}

const char* OnednnBackend::conv2d_fwd_onednn(const Conv2dParams& p, const Tensor& x,
                                             const Tensor& w, Tensor& y) {
  const Geo g = conv_geo("conv2d_fwd", p, x, w, y);
  Key k = key(Tag::conv_fwd).add(x).add(w).add(y).add(p.stride).add(p.pad).add(algo_key());
  auto& e = cached<ConvEntry>(k, [&] {
    return with_algorithm(winograd_candidate(p, g), [&](algorithm alg) {
      auto r = std::make_unique<ConvEntry>();
      const bool wino = alg == algorithm::convolution_winograd;
      r->winograd = wino;
      memory::desc xmd = plain_md(x), ymd = plain_md(y);
      auto pd = wino ? fwd_pd(engine(), p, g, any_act(x), any_act(y), alg)
                     : fwd_pd(engine(), p, g, xmd, ymd);
      memory::desc cw = pd.weights_desc();
      r->conv = make_exec(pd, dnnl::convolution_forward(pd),
                          {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_WEIGHTS, cw},
                           {DNNL_ARG_DST, pd.dst_desc()}});
      r->w_bytes = cw.get_size();
      make_wre(*this, *r, user_w(g, w), cw);
      make_act(*this, r->in[0], xmd, pd.src_desc(), kScratchAct0);
      make_act(*this, r->out, pd.dst_desc(), ymd, kScratchAct1);
      return r;
    });
  });
  const void* wp = conv_weights(*this, e, w, kWreFwd);
  e.conv.set(DNNL_ARG_SRC, act_in(*this, e.in[0], x));
  e.conv.set(DNNL_ARG_WEIGHTS, wp);
  e.conv.set(DNNL_ARG_DST, act_dst(*this, e.out, y));
  run(e.conv);
  act_out(*this, e.out, y);
  return entry_name(e);
}

const char* OnednnBackend::conv2d_bwd_data_onednn(const Conv2dParams& p, const Tensor& dy,
                                                  const Tensor& w, Tensor& dx) {
  const Geo g = conv_geo("conv2d_bwd_data", p, dx, w, dy);
  Key k =
      key(Tag::conv_bwd_data).add(dy).add(w).add(dx).add(p.stride).add(p.pad).add(algo_key());
  auto& e = cached<ConvEntry>(k, [&] {
    return with_algorithm(winograd_candidate(p, g), [&](algorithm alg) {
      auto r = std::make_unique<ConvEntry>();
      const bool wino = alg == algorithm::convolution_winograd;
      r->winograd = wino;
      memory::desc dxmd = plain_md(dx), dymd = plain_md(dy);
      memory::desc cdx = wino ? any_act(dx) : dxmd, cdy = wino ? any_act(dy) : dymd;
      auto hint = fwd_pd(engine(), p, g, cdx, cdy, alg);
      memory::dims st{p.stride, p.stride}, pad{p.pad, p.pad};
      dnnl::convolution_backward_data::desc d(alg, cdx, any_w(g), cdy, st, pad, pad);
      dnnl::convolution_backward_data::primitive_desc pd(d, attr(), engine(), hint);
      memory::desc cw = pd.weights_desc();
      r->conv = make_exec(pd, dnnl::convolution_backward_data(pd),
                          {{DNNL_ARG_DIFF_DST, pd.diff_dst_desc()}, {DNNL_ARG_WEIGHTS, cw},
                           {DNNL_ARG_DIFF_SRC, pd.diff_src_desc()}});
      r->w_bytes = cw.get_size();
      make_wre(*this, *r, user_w(g, w), cw);
      make_act(*this, r->in[0], dymd, pd.diff_dst_desc(), kScratchAct0);
      make_act(*this, r->out, pd.diff_src_desc(), dxmd, kScratchAct1);
      return r;
    });
  });
  const void* wp = conv_weights(*this, e, w, kWreBwdData);
  e.conv.set(DNNL_ARG_DIFF_DST, act_in(*this, e.in[0], dy));
  e.conv.set(DNNL_ARG_WEIGHTS, wp);
  e.conv.set(DNNL_ARG_DIFF_SRC, act_dst(*this, e.out, dx));
  run(e.conv);
  act_out(*this, e.out, dx);
  return entry_name(e);
}

const char* OnednnBackend::conv2d_bwd_weights_onednn(const Conv2dParams& p, const Tensor& x,
                                                     const Tensor& dy, Tensor& dw) {
  const Geo g = conv_geo("conv2d_bwd_weights", p, x, dw, dy);
  Key k = key(Tag::conv_bwd_weights).add(x).add(dy).add(dw).add(p.stride).add(p.pad).add(
      algo_key());
  auto& e = cached<ConvEntry>(k, [&] {
    return with_algorithm(winograd_candidate(p, g), [&](algorithm alg) {
      auto r = std::make_unique<ConvEntry>();
      const bool wino = alg == algorithm::convolution_winograd;
      r->winograd = wino;
      memory::desc xmd = plain_md(x), dymd = plain_md(dy);
      memory::desc cx = wino ? any_act(x) : xmd, cdy = wino ? any_act(dy) : dymd;
      auto hint = fwd_pd(engine(), p, g, cx, cdy, alg);
      memory::dims st{p.stride, p.stride}, pad{p.pad, p.pad};
      dnnl::convolution_backward_weights::desc d(alg, cx, any_w(g), cdy, st, pad, pad);
      dnnl::convolution_backward_weights::primitive_desc pd(d, attr(), engine(), hint);
      memory::desc cw = pd.diff_weights_desc();
      r->conv = make_exec(pd, dnnl::convolution_backward_weights(pd),
                          {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
                           {DNNL_ARG_DIFF_WEIGHTS, cw}});
      r->w_bytes = cw.get_size();
      make_wre(*this, *r, cw, user_w(g, dw));
      make_act(*this, r->in[0], xmd, pd.src_desc(), kScratchAct0);
      make_act(*this, r->in[1], dymd, pd.diff_dst_desc(), kScratchAct1);
      return r;
    });
  });
  void* dwp = e.wre.defined() ? scratch(kScratchWeights, e.w_bytes) : dw.data();
  e.conv.set(DNNL_ARG_SRC, act_in(*this, e.in[0], x));
  e.conv.set(DNNL_ARG_DIFF_DST, act_in(*this, e.in[1], dy));
  e.conv.set(DNNL_ARG_DIFF_WEIGHTS, dwp);
  run(e.conv);
  if (e.wre.defined()) {
    OpProfiler::Scope timed(kWreBwdWeights, 0, 2.0 * static_cast<double>(dw.nbytes()), nullptr);
    e.wre.set(DNNL_ARG_FROM, dwp);
    e.wre.set(DNNL_ARG_TO, dw.data());
    run(e.wre);
  }
  return entry_name(e);
}

}  // namespace rn50::onednn
