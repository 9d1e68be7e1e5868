// rn50: host implementations of the step-state ops (StepState, check_finite,
// update_loss_scale in include/rn50/backend.h), shared by the CPU backends ("ref", "onednn").
#pragma once

#include "rn50/backend.h"
#include "rn50/tensor.h"

namespace rn50 {

/// Throws rn50::Error naming `op` unless `state` is a host f32 tensor of StepState::size
/// elements.
void check_host_step_state(const char* op, const Tensor& state);
/// True when any element of the host tensor x (f32, f64, f16 or bf16; any shape) is inf or NaN.
/// Throws rn50::Error for other dtypes.
bool host_any_nonfinite(const Tensor& x);
/// torch.cuda.amp.GradScaler.update() on a host step state (see Backend::update_loss_scale).
void host_update_loss_scale(const LossScaleParams& p, Tensor& state);
/// Resolves the effective (lr, grad_scale, skip) of an SGD step: from p, or from p.state when
/// it is defined (host step state).
struct SgdStep {
  float lr, grad_scale;
  bool skip;
};
SgdStep resolve_sgd_step(const char* op, const SgdParams& p);
/// Checks SgdParams::mask (u8) and SgdParams::compute_copy (f16/bf16) when defined: 1-D slabs
/// of n elements. Throws rn50::Error naming `op` and the tensor otherwise. (Device placement is
/// each backend's check.)
void check_sgd_extras(const char* op, const SgdParams& p, int64_t n);
/// Host part of sgd_update after the update (CPU backends): zeroes p and buf where mask is 0.
/// params, buf: f32, f64 or f16/bf16 host slabs.
void host_apply_mask(const Tensor& mask, Tensor& params, Tensor& buf);
/// The loss-scale multiplier of softmax_xent_bwd: scale * state[loss_scale] (state defined) or
/// scale.
float resolve_loss_scale(const char* op, float scale, const Tensor& state);
/// state[StepState::mixup_lambda] of a host step state, checked to lie in [0, 1] (throws
/// rn50::Error naming `op` otherwise, or when state is not a host step state).
float host_mixup_lambda(const char* op, const Tensor& state);
/// Throws rn50::Error naming `op` unless `ring` is the step-input ring of
/// Backend::load_step_inputs: host f32 (R, 2), R >= 1.
void check_step_input_ring(const char* op, const Tensor& ring);
/// Backend::load_step_inputs on a host step state.
void host_load_step_inputs(const Tensor& ring, Tensor& state);

}  // namespace rn50
