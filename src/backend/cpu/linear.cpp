// rn50: fully connected layer (torch.nn.Linear: y = x w^T + b) through oneDNN inner product
// primitives with plain row-major operands: x (N,C) "nc", w (K,C) "oi", b (K), y (N,K).
// x, w, y, dy, dx, dw: f32, or bf16 under CPU AMP; b and db f32 or bf16.
// Backward: inner_product_backward_data (dx = dy w) and inner_product_backward_weights
// (dw = dy^T x, db = sum_n dy), both with the forward primitive descriptor as hint.
#include "backend/cpu/onednn_backend.h"
#include "core/check.h"

namespace rn50::onednn {

using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

namespace {

struct IpEntry : CacheEntry {
  Exec ex;
};

struct Mds {
  memory::desc x, w, b, y;
};

/// dt: dtype of x, w, y (f32 or bf16); bt: dtype of the bias and its gradient.
Mds ip_mds(int64_t N, int64_t C, int64_t K, DType dt, DType bt) {
  return {md_of({N, C}, dt, tag::nc), md_of({K, C}, dt, tag::oi), md_of({K}, bt, tag::x),
          md_of({N, K}, dt, tag::nc)};
}

dnnl::inner_product_forward::primitive_desc ip_fwd_pd(dnnl::engine& eng, const Mds& m) {
  dnnl::inner_product_forward::desc d(prop_kind::forward_training, m.x, m.w, m.b, m.y);
  return dnnl::inner_product_forward::primitive_desc(d, OnednnBackend::attr(), eng);
}

}  // namespace

void OnednnBackend::linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_fwd";
  const DType dt = compute_dtype_of(op, "x", x);
  check_tensor(op, "w", w, dt);
  const DType bt = compute_dtype_of(op, "b", b);
  check_tensor(op, "y", y, dt);
  RN50_CHECK(x.ndim() == 2 && w.ndim() == 2 && w.dim(1) == x.dim(1),
             "onednn {}: x {} does not match w {}", op, x.str(), w.str());
  const int64_t N = x.dim(0), C = x.dim(1), K = w.dim(0);
  check_shape(op, "b", b, {K});
  check_shape(op, "y", y, {N, K});
  Key k = key(Tag::linear_fwd).add(N).add(C).add(K).add(static_cast<int64_t>(dt)).add(
      static_cast<int64_t>(bt));
  auto& e = cached<IpEntry>(k, [&] {
    auto r = std::make_unique<IpEntry>();
    Mds m = ip_mds(N, C, K, dt, bt);
    auto pd = ip_fwd_pd(engine(), m);
    r->ex = make_exec(pd, dnnl::inner_product_forward(pd),
                      {{DNNL_ARG_SRC, m.x}, {DNNL_ARG_WEIGHTS, m.w}, {DNNL_ARG_BIAS, m.b},
                       {DNNL_ARG_DST, m.y}});
    return r;
  });
  e.ex.set(DNNL_ARG_SRC, x.data());
  e.ex.set(DNNL_ARG_WEIGHTS, w.data());
  e.ex.set(DNNL_ARG_BIAS, b.data());
  e.ex.set(DNNL_ARG_DST, y.data());
  run(e.ex);
}

void OnednnBackend::linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                               Tensor& dw, Tensor& db) {
  const char* op = "linear_bwd";
  const DType dt = compute_dtype_of(op, "x", x);
  check_tensor(op, "w", w, dt);
  check_tensor(op, "dy", dy, dt);
  check_tensor(op, "dw", dw, dt);
  const DType bt = compute_dtype_of(op, "db", db);
  RN50_CHECK(x.ndim() == 2 && w.ndim() == 2 && w.dim(1) == x.dim(1),
             "onednn {}: x {} does not match w {}", op, x.str(), w.str());
  const int64_t N = x.dim(0), C = x.dim(1), K = w.dim(0);
  check_shape(op, "dy", dy, {N, K});
  check_shape(op, "dw", dw, {K, C});
  check_shape(op, "db", db, {K});
  if (dx.defined()) {
    check_tensor(op, "dx", dx, dt);
    check_shape(op, "dx", dx, {N, C});
    Key k = key(Tag::linear_bwd_data).add(N).add(C).add(K).add(static_cast<int64_t>(dt));
    auto& e = cached<IpEntry>(k, [&] {
      auto r = std::make_unique<IpEntry>();
      Mds m = ip_mds(N, C, K, dt, bt);
      auto hint = ip_fwd_pd(engine(), m);
      dnnl::inner_product_backward_data::desc d(m.x, m.w, m.y);
      dnnl::inner_product_backward_data::primitive_desc pd(d, attr(), engine(), hint);
      r->ex = make_exec(pd, dnnl::inner_product_backward_data(pd),
                        {{DNNL_ARG_DIFF_DST, m.y}, {DNNL_ARG_WEIGHTS, m.w},
                         {DNNL_ARG_DIFF_SRC, m.x}});
      return r;
    });
    e.ex.set(DNNL_ARG_DIFF_DST, dy.data());
    e.ex.set(DNNL_ARG_WEIGHTS, w.data());
    e.ex.set(DNNL_ARG_DIFF_SRC, dx.data());
    run(e.ex);
  }
  Key k = key(Tag::linear_bwd_weights).add(N).add(C).add(K).add(static_cast<int64_t>(dt)).add(
      static_cast<int64_t>(bt));
  auto& e = cached<IpEntry>(k, [&] {
    auto r = std::make_unique<IpEntry>();
    Mds m = ip_mds(N, C, K, dt, bt);
    auto hint = ip_fwd_pd(engine(), m);
    dnnl::inner_product_backward_weights::desc d(m.x, m.w, m.b, m.y);
    dnnl::inner_product_backward_weights::primitive_desc pd(d, attr(), engine(), hint);
    r->ex = make_exec(pd, dnnl::inner_product_backward_weights(pd),
                      {{DNNL_ARG_SRC, m.x}, {DNNL_ARG_DIFF_DST, m.y}, {DNNL_ARG_DIFF_WEIGHTS, m.w},
                       {DNNL_ARG_DIFF_BIAS, m.b}});
    return r;
  });
  e.ex.set(DNNL_ARG_SRC, x.data());
  e.ex.set(DNNL_ARG_DIFF_DST, dy.data());
  e.ex.set(DNNL_ARG_DIFF_WEIGHTS, dw.data());
  e.ex.set(DNNL_ARG_DIFF_BIAS, db.data());
  run(e.ex);
}

}  // namespace rn50::onednn
