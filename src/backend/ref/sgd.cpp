// rn50 reference backend: SGD with momentum over a parameter slab, torch.optim.SGD
// (dampening 0, nesterov false) with weight decay only on the prefix [0, decay_count):
//   g   = grad * grad_scale            (skipped when grad_scale == 1)
//   g   = g + weight_decay * p         (i < decay_count)
//   buf = momentum * buf + g           (buf starts at zero == torch's first-step clone of g)
//   p   = p - lr * buf
// Each step is rounded to the slab dtype in torch's order (torch does the same in float32).
// Then the optional mask (p = buf = 0 where mask == 0) and compute copy (p converted to
// f16/bf16 by RefBackend::copy). F16 slabs (pure fp16): the same update in f32 per element, p
// and buf rounded to f16 when stored (Slab<uint16_t>).
#include <cstdint>

#include "core/step_state.h"
#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {
/// Element access of a slab type: f32/f64 are computed in themselves; f16 bits (pure fp16) are
/// widened to f32 (exact) and rounded to nearest even when stored.
template <class S>
struct Slab {
  using C = S;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
template <>
struct Slab<uint16_t> {
  using C = float;
  static float load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(float v) { return float_to_half(v); }
};

/// The update in the compute type C of slab type S, in torch's order; p takes the unrounded buf
/// (for f16 slabs: Paddle's momentum kernel with MT = float).
template <class S>
void sgd_impl(const SgdParams& p, const SgdStep& st, Tensor& params, const Tensor& grads,
              Tensor& buf) {
  using L = Slab<S>;
  using C = typename L::C;
  S* w = params.data_as<S>();
  const S* g = grads.data_as<const S>();
  S* b = buf.data_as<S>();
  const int64_t n = params.numel();
  const C scale = static_cast<C>(st.grad_scale), wd = static_cast<C>(p.weight_decay);
  const C mom = static_cast<C>(p.momentum), lr = static_cast<C>(st.lr);
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) {
    C d = L::load(g[i]);
    const C wi = L::load(w[i]);
    if (st.grad_scale != 1.f) d = d * scale;
    if (i < p.decay_count) d = d + wd * wi;
    const C bi = mom * L::load(b[i]) + d;
    b[i] = L::store(bi);
    w[i] = L::store(wi - lr * bi);
  }
}
}  // namespace

void RefBackend::sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                            Tensor& momentum_buf) {
  const char* op = "sgd_update";
  check_float(op, "params", params);
  check_float(op, "grads", grads);
  check_float(op, "momentum_buf", momentum_buf);
  RN50_CHECK(params.ndim() == 1 && params.same_shape(grads) && params.same_shape(momentum_buf),
             "ref {}: params {}, grads {} and momentum_buf {} must be 1-D of equal length", op,
             params.str(), grads.str(), momentum_buf.str());
  RN50_CHECK(params.dtype() == grads.dtype() && params.dtype() == momentum_buf.dtype(),
             "ref {}: params {}, grads {} and momentum_buf {} must share one dtype", op,
             params.str(), grads.str(), momentum_buf.str());
  RN50_CHECK(p.decay_count >= 0 && p.decay_count <= params.numel(),
             "ref {}: decay_count {} outside [0, {}]", op, p.decay_count, params.numel());
  const bool half = params.dtype() == DType::f16;
  RN50_CHECK(params.dtype() == DType::f32 || params.dtype() == DType::f64 || half,
             "ref {}: slabs must be F32, F64 or F16 (pure fp16), got {}", op, params.str());
  check_sgd_extras("ref sgd_update", p, params.numel());
  RN50_CHECK(!half || !p.compute_copy.defined(),
             "ref {}: F16 slabs are the weights themselves (pure fp16): no compute_copy", op);
  for (const Tensor* t : {&p.mask, &p.compute_copy})
    RN50_CHECK(!t->defined() || t->is_cpu(), "ref {}: {} must be a host tensor", op, t->str());
  const SgdStep st = resolve_sgd_step("ref sgd_update", p);
  if (st.skip) return;  // an AMP step whose gradients overflowed
  if (half)
    sgd_impl<uint16_t>(p, st, params, grads, momentum_buf);
  else if (params.dtype() == DType::f32)
    sgd_impl<float>(p, st, params, grads, momentum_buf);
  else
    sgd_impl<double>(p, st, params, grads, momentum_buf);
  if (p.mask.defined()) host_apply_mask(p.mask, params, momentum_buf);
  if (p.compute_copy.defined()) {
    Tensor dst = p.compute_copy;
    copy(params, dst);  // round to nearest even (RefBackend::copy)
  }
}

void RefBackend::check_finite(const Tensor& x, Tensor& state) {
  check_host_step_state("ref check_finite", state);
  if (host_any_nonfinite(x)) state.data_as<float>()[StepState::found_inf] = 1.f;
}

void RefBackend::update_loss_scale(const LossScaleParams& p, Tensor& state) {
  host_update_loss_scale(p, state);
}

}  // namespace rn50::ref
