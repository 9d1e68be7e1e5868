// rn50: SGD with momentum over whole parameter slabs, exactly torch.optim.SGD (dampening 0,
// nesterov false; see SgdParams):
//   g = grad_scale * grad (+ weight_decay * p for the first decay_count elements)
//   buf = momentum * buf + g;  p = p - lr * buf.
// Plain OpenMP loops, vectorisable (the decayed and undecayed ranges are separate loops); then
// the optional mask and the optional bf16 compute copy (CPU AMP: the weights the next step's
// bf16 convolutions read, written after the mask so masked weights are exact zeros there too).
// The gradients may be bf16 (sgd_takes_bf16_grads): CPU AMP's conv/fc gradients as backward
// wrote them, each widened exactly to f32 in the loop, so no f32 copy of them is made first.
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"
#include "core/step_state.h"

namespace rn50::onednn {
namespace {

/// The two update loops (decayed prefix [0, nd), then the rest) over n elements, gradients of
/// element type G (float, or uint16_t = bf16 bits, widened exactly).
template <class G>
void sgd_loops(float* __restrict w, const G* __restrict g, float* __restrict b, int64_t n,
               int64_t nd, float lr, float mom, float wd, float gs) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < nd; ++i) {
    const float gi = gs * widen(g[i]) + wd * w[i];
    const float bi = mom * b[i] + gi;
    b[i] = bi;
    w[i] -= lr * bi;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = nd; i < n; ++i) {
    const float bi = mom * b[i] + gs * widen(g[i]);
    b[i] = bi;
    w[i] -= lr * bi;
  }
}

}  // namespace

bool OnednnBackend::sgd_takes_bf16_grads() const { return true; }

void OnednnBackend::sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                               Tensor& momentum_buf) {
  const char* op = "sgd_update";
  check_tensor(op, "params", params);
  const bool bf16_grads = grads.defined() && grads.dtype() == DType::bf16;
  check_tensor(op, "grads", grads, bf16_grads ? DType::bf16 : DType::f32);
  check_tensor(op, "momentum_buf", momentum_buf);
  const int64_t n = params.numel();
  RN50_CHECK(params.ndim() == 1 && grads.numel() == n && momentum_buf.numel() == n,
             "onednn {}: slabs must be 1-D of equal length: params {} grads {} momentum {}", op,
             params.str(), grads.str(), momentum_buf.str());
  RN50_CHECK(p.decay_count >= 0 && p.decay_count <= n,
             "onednn {}: decay_count {} outside [0, {}]", op, p.decay_count, n);
  float* __restrict w = params.data_as<float>();
  float* __restrict b = momentum_buf.data_as<float>();
  check_sgd_extras("onednn sgd_update", p, n);
  if (p.mask.defined()) check_tensor(op, "mask", p.mask, DType::u8);
  uint16_t* cc = nullptr;
  if (p.compute_copy.defined()) {
    check_tensor(op, "compute_copy", p.compute_copy, DType::bf16);
    cc = p.compute_copy.data_as<uint16_t>();
  }
  const SgdStep st = resolve_sgd_step("onednn sgd_update", p);
  if (st.skip) return;  // an AMP step whose gradients overflowed
  const float lr = st.lr, mom = p.momentum, wd = p.weight_decay, gs = st.grad_scale;
  const int64_t nd = p.decay_count;
  if (bf16_grads)
    sgd_loops(w, grads.data_as<const uint16_t>(), b, n, nd, lr, mom, wd, gs);
  else
    sgd_loops(w, grads.data_as<const float>(), b, n, nd, lr, mom, wd, gs);
  if (p.mask.defined()) host_apply_mask(p.mask, params, momentum_buf);
  if (cc) {  // the bf16 weights of the next CPU AMP step, rounded to nearest even
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) cc[i] = float_to_bf16(w[i]);
  }
}

void OnednnBackend::check_finite(const Tensor& x, Tensor& state) {
  check_host_step_state("onednn check_finite", state);
  if (host_any_nonfinite(x)) state.data_as<float>()[StepState::found_inf] = 1.f;
}

void OnednnBackend::update_loss_scale(const LossScaleParams& p, Tensor& state) {
  host_update_loss_scale(p, state);
}

}  // namespace rn50::onednn
