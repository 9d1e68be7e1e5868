// rn50 reference backend: SGD with momentum over a parameter slab, torch.optim.SGD
// (dampening 0, nesterov false) with weight decay only on the prefix [0, decay_count):
//   g   = grad * grad_scale            (skipped when grad_scale == 1)
//   g   = g + weight_decay * p         (i < decay_count)
//   buf = momentum * buf + g           (buf starts at zero == torch's first-step clone of g)
//   p   = p - lr * buf
// Each step is rounded to the slab dtype in torch's order (torch does the same in float32).
// Then the optional mask (p = buf = 0 where mask == 0) and compute copy (p converted to
// f16/bf16 by RefBackend::copy). F16 slabs (pure fp16): the same update in f32 per element, p
// and buf rounded to f16 when stored (sgd_half).
#include <cstdint>

#include "core/step_state.h"
#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {
template <class T>
void sgd_impl(const SgdParams& p, const SgdStep& st, Tensor& params, const Tensor& grads,
              Tensor& buf) {
  T* w = params.data_as<T>();
  const T* g = grads.data_as<const T>();
  T* b = buf.data_as<T>();
  const int64_t n = params.numel();
  const T scale = static_cast<T>(st.grad_scale), wd = static_cast<T>(p.weight_decay);
  const T mom = static_cast<T>(p.momentum), lr = static_cast<T>(st.lr);
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (st.grad_scale != 1.f) d = d * scale;
    if (i < p.decay_count) d = d + wd * w[i];
    b[i] = mom * b[i] + d;
    w[i] = w[i] - lr * b[i];
  }
}
/// Pure fp16 slabs (f16 bits): widen, update in f32 in torch's order, round p and buf once
/// each when stored; p takes the unrounded buf (Paddle's momentum kernel with MT = float).
void sgd_half(const SgdParams& p, const SgdStep& st, Tensor& params, const Tensor& grads,
              Tensor& buf) {
  uint16_t* w = params.data_as<uint16_t>();
  const uint16_t* g = grads.data_as<const uint16_t>();
  uint16_t* b = buf.data_as<uint16_t>();
  const int64_t n = params.numel();
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) {
    float d = half_to_float(g[i]);
    const float wi = half_to_float(w[i]);
    if (st.grad_scale != 1.f) d = d * st.grad_scale;
    if (i < p.decay_count) d = d + p.weight_decay * wi;
    const float bi = p.momentum * half_to_float(b[i]) + d;
    b[i] = float_to_half(bi);
    w[i] = float_to_half(wi - st.lr * bi);
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
    sgd_half(p, st, params, grads, momentum_buf);
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
