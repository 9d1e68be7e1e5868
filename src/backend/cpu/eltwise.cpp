// rn50: oneDNN elementwise ops: relu forward/backward (eltwise primitives) and add / add_relu
// (binary primitive, ReLU as an eltwise post-op); add_relu_bwd (dx = y > 0 ? g1 + g2 : 0) as one
// OpenMP loop.
// Operands: f32, or bf16 under CPU AMP (all of one dtype).
// When every operand has the same memory order (same layout, or not 4-D) the tensors are treated
// as flat 1-D arrays of numel elements, so one primitive serves every shape of that size.
// Mixed 4-D layouts: binary takes each operand's own plain descriptor; relu reorders into the
// output first and then runs in place there.
// Formulas: torch.relu; relu backward is torch's threshold_backward(dy, y, 0): dx = dy * (y > 0)
// (oneDNN eltwise_relu_use_dst_for_bwd: diff_src = dst > 0 ? diff_dst : 0).
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"

namespace rn50::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

namespace {

struct EltEntry : CacheEntry {
  Exec ex;
};

memory::desc flat(const Tensor& t) { return md_of({t.numel()}, t.dtype(), tag::a); }

}  // namespace

void OnednnBackend::relu_fwd(const Tensor& x, Tensor& y) {
  const DType dt = compute_dtype_of("relu_fwd", "x", x);
  check_tensor("relu_fwd", "y", y, dt);
  check_same_shape("relu_fwd", x, "x", y, "y");
  const Tensor* src = &x;
  if (eff_layout(x) != eff_layout(y)) {
    reorder(x, y);
    src = &y;
  }
  Key k = key(Tag::relu_fwd).add(y.numel()).add(static_cast<int64_t>(dt));
  auto& e = cached<EltEntry>(k, [&] {
    auto r = std::make_unique<EltEntry>();
    memory::desc md = flat(y);
    dnnl::eltwise_forward::desc d(prop_kind::forward_training, algorithm::eltwise_relu, md, 0.f,
                                  0.f);
    dnnl::eltwise_forward::primitive_desc pd(d, attr(), engine());
    r->ex = make_exec(pd, dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
    return r;
  });
  e.ex.set(DNNL_ARG_SRC, src->data());
  e.ex.set(DNNL_ARG_DST, y.data());
  run(e.ex);
}

void OnednnBackend::relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const DType dt = compute_dtype_of("relu_bwd", "y", y);
  check_tensor("relu_bwd", "dy", dy, dt);
  check_tensor("relu_bwd", "dx", dx, dt);
  check_same_shape("relu_bwd", y, "y", dy, "dy");
  check_same_shape("relu_bwd", y, "y", dx, "dx");
  const Tensor* ddst = &dy;
  if (eff_layout(dy) != eff_layout(dx)) {
    reorder(dy, dx);
    ddst = &dx;
  }
  const bool mixed = eff_layout(y) != eff_layout(dx);
  Key k = key(Tag::relu_bwd);
  if (mixed)
    k.add(y).add(dx);
  else
    k.add(y.numel()).add(static_cast<int64_t>(dt));
  auto& e = cached<EltEntry>(k, [&] {
    auto r = std::make_unique<EltEntry>();
    memory::desc ymd = mixed ? plain_md(y) : flat(y), dmd = mixed ? plain_md(dx) : flat(dx);
    const algorithm alg = algorithm::eltwise_relu_use_dst_for_bwd;
    dnnl::eltwise_forward::desc fd(prop_kind::forward_training, alg, ymd, 0.f, 0.f);
    dnnl::eltwise_forward::primitive_desc hint(fd, attr(), engine());
    dnnl::eltwise_backward::desc d(alg, dmd, ymd, 0.f, 0.f);
    dnnl::eltwise_backward::primitive_desc pd(d, attr(), engine(), hint);
    r->ex = make_exec(pd, dnnl::eltwise_backward(pd),
                      {{DNNL_ARG_DST, ymd}, {DNNL_ARG_DIFF_DST, dmd}, {DNNL_ARG_DIFF_SRC, dmd}});
    return r;
  });
  e.ex.set(DNNL_ARG_DST, y.data());
  e.ex.set(DNNL_ARG_DIFF_DST, ddst->data());
  e.ex.set(DNNL_ARG_DIFF_SRC, dx.data());
  run(e.ex);
}

namespace {

/// y = a + b, optionally followed by ReLU, through a cached binary primitive.
void binary_add(OnednnBackend& be, const char* op, const Tensor& a, const Tensor& b, Tensor& y,
                bool relu) {
  const DType dt = compute_dtype_of(op, "a", a);
  check_tensor(op, "b", b, dt);
  check_tensor(op, "y", y, dt);
  check_same_shape(op, a, "a", b, "b");
  check_same_shape(op, a, "a", y, "y");
  const bool mixed = eff_layout(a) != eff_layout(y) || eff_layout(b) != eff_layout(y);
  Key k = key(Tag::binary).add(relu);
  if (mixed)
    k.add(a).add(b).add(y);
  else
    k.add(y.numel()).add(static_cast<int64_t>(dt));
  auto& e = be.cached<EltEntry>(k, [&] {
    auto r = std::make_unique<EltEntry>();
    memory::desc am = mixed ? plain_md(a) : flat(a), bm = mixed ? plain_md(b) : flat(b),
                 ym = mixed ? plain_md(y) : flat(y);
    dnnl::primitive_attr at = OnednnBackend::attr();
    if (relu) {
      dnnl::post_ops po;
      po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      at.set_post_ops(po);
    }
    dnnl::binary::desc d(algorithm::binary_add, am, bm, ym);
    dnnl::binary::primitive_desc pd(d, at, be.engine());
    r->ex = be.make_exec(pd, dnnl::binary(pd),
                         {{DNNL_ARG_SRC_0, am}, {DNNL_ARG_SRC_1, bm}, {DNNL_ARG_DST, ym}});
    return r;
  });
  e.ex.set(DNNL_ARG_SRC_0, a.data());
  e.ex.set(DNNL_ARG_SRC_1, b.data());
  e.ex.set(DNNL_ARG_DST, y.data());
  be.run(e.ex);
}

}  // namespace

namespace {

template <class T>
void add_relu_bwd_loop(const T* y, const T* g1, const T* g2, T* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = widen(g1[i]) + widen(g2[i]);
    narrow(dx[i], widen(y[i]) > 0.f ? s : 0.f);
  }
}

}  // namespace

void OnednnBackend::add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2,
                                 Tensor& dx) {
  const char* op = "add_relu_bwd";
  const DType dt = compute_dtype_of(op, "y", y);
  check_tensor(op, "g1", g1, dt);
  check_tensor(op, "g2", g2, dt);
  check_tensor(op, "dx", dx, dt);
  check_same_shape(op, y, "y", g1, "g1");
  check_same_shape(op, y, "y", g2, "g2");
  check_same_shape(op, y, "y", dx, "dx");
  const Layout l = eff_layout(dx);
  if (eff_layout(y) != l || eff_layout(g1) != l || eff_layout(g2) != l) {
    // Mixed layouts (not in the model's schedule): the two primitives, in place on dx.
    add(g1, g2, dx);
    relu_bwd(y, dx, dx);
    return;
  }
  // One pass instead of two (the sum never goes to memory): plain vectorisable loop.
  if (dt == DType::f32)
    add_relu_bwd_loop(y.data_as<const float>(), g1.data_as<const float>(),
                      g2.data_as<const float>(), dx.data_as<float>(), dx.numel());
  else
    add_relu_bwd_loop(y.data_as<const uint16_t>(), g1.data_as<const uint16_t>(),
                      g2.data_as<const uint16_t>(), dx.data_as<uint16_t>(), dx.numel());
}

void OnednnBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  binary_add(*this, "add", a, b, y, false);
}

void OnednnBackend::add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) {
  binary_add(*this, "add_relu_fwd", a, b, y, true);
}

}  // namespace rn50::onednn
