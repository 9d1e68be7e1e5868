#include "core/step_state.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/check.h"

namespace rn50 {

void check_host_step_state(const char* op, const Tensor& state) {
  RN50_CHECK(state.defined() && state.is_cpu() && state.dtype() == DType::f32 &&
                 state.numel() == StepState::size,
             "{}: the step state must be a host F32 tensor of {} elements, got {}", op,
             static_cast<int>(StepState::size), state.defined() ? state.str() : "undefined");
}

bool host_any_nonfinite(const Tensor& x) {
  RN50_CHECK(x.defined() && x.is_cpu(), "check_finite: {} must be a host tensor", x.str());
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::f32: {
      const float* p = x.data_as<const float>();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(p[i])) return true;
      return false;
    }
    case DType::f64: {
      const double* p = x.data_as<const double>();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(p[i])) return true;
      return false;
    }
    case DType::f16: {  // exponent all ones = inf or NaN
      const uint16_t* p = x.data_as<const uint16_t>();
      for (int64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7c00u) == 0x7c00u) return true;
      return false;
    }
    case DType::bf16: {
      const uint16_t* p = x.data_as<const uint16_t>();
      for (int64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7f80u) == 0x7f80u) return true;
      return false;
    }
    default:
      RN50_FAIL("check_finite: {} is not a floating-point tensor", x.str());
  }
}

void host_update_loss_scale(const LossScaleParams& p, Tensor& state) {
  check_host_step_state("update_loss_scale", state);
  float* s = state.data_as<float>();
  if (s[StepState::found_inf] != 0.f) {
    s[StepState::skipped_steps] += 1.f;
    s[StepState::growth_tracker] = 0.f;
    if (p.dynamic) s[StepState::loss_scale] *= p.backoff_factor;
  } else {
    s[StepState::growth_tracker] += 1.f;
    if (p.dynamic && s[StepState::growth_tracker] >= static_cast<float>(p.growth_interval)) {
      // torch's _amp_update_scale_ keeps the old scale when the grown one would overflow.
      const float grown = s[StepState::loss_scale] * p.growth_factor;
      if (std::isfinite(grown)) s[StepState::loss_scale] = grown;
      s[StepState::growth_tracker] = 0.f;
    }
  }
  s[StepState::inv_loss_scale] = 1.f / s[StepState::loss_scale];
  s[StepState::found_inf] = 0.f;
}

SgdStep resolve_sgd_step(const char* op, const SgdParams& p) {
  if (!p.state.defined()) return {p.lr, p.grad_scale, false};
  check_host_step_state(op, p.state);
  const float* s = p.state.data_as<const float>();
  return {s[StepState::lr], s[StepState::inv_loss_scale], s[StepState::found_inf] != 0.f};
}

float resolve_loss_scale(const char* op, float scale, const Tensor& state) {
  if (!state.defined()) return scale;
  check_host_step_state(op, state);
  return scale * state.data_as<const float>()[StepState::loss_scale];
}

float host_mixup_lambda(const char* op, const Tensor& state) {
  check_host_step_state(op, state);
  const float lam = state.data_as<const float>()[StepState::mixup_lambda];
  RN50_CHECK(lam >= 0.f && lam <= 1.f, "{}: the mixup weight {} is outside [0, 1]", op, lam);
  return lam;
}

void check_step_input_ring(const char* op, const Tensor& ring) {
  RN50_CHECK(ring.defined() && ring.is_cpu() && ring.dtype() == DType::f32 && ring.ndim() == 2 &&
                 ring.dim(0) >= 1 && ring.dim(1) == 2,
             "{}: the step-input ring must be host F32 (R, 2) with R >= 1 (alloc_host), got {}",
             op, ring.defined() ? ring.str() : "undefined");
}

void host_load_step_inputs(const Tensor& ring, Tensor& state) {
  check_step_input_ring("load_step_inputs", ring);
  check_host_step_state("load_step_inputs", state);
  float* s = state.data_as<float>();
  const int64_t rows = ring.dim(0);
  const float pos = s[StepState::ring_pos];
  RN50_CHECK(pos >= 0.f && pos < static_cast<float>(rows) && pos == static_cast<float>(
                 static_cast<int64_t>(pos)),
             "load_step_inputs: the step state's ring position {} is not a row of the {}-row "
             "ring",
             pos, rows);
  const auto r = static_cast<int64_t>(pos);
  const float* row = ring.data_as<const float>() + 2 * r;
  s[StepState::lr] = row[0];
  s[StepState::mixup_lambda] = row[1];
  s[StepState::ring_pos] = static_cast<float>((r + 1) % rows);
}

void check_sgd_extras(const char* op, const SgdParams& p, int64_t n) {
  if (p.mask.defined())
    RN50_CHECK(p.mask.dtype() == DType::u8 && p.mask.ndim() == 1 && p.mask.numel() == n,
               "{}: mask is {}, expected a U8 1-D slab of {} elements", op, p.mask.str(), n);
  if (p.compute_copy.defined())
    RN50_CHECK((p.compute_copy.dtype() == DType::f16 || p.compute_copy.dtype() == DType::bf16) &&
                   p.compute_copy.ndim() == 1 && p.compute_copy.numel() == n,
               "{}: compute_copy is {}, expected an F16 or BF16 1-D slab of {} elements", op,
               p.compute_copy.str(), n);
}

void host_apply_mask(const Tensor& mask, Tensor& params, Tensor& buf) {
  const uint8_t* m = mask.data_as<const uint8_t>();
  const int64_t n = params.numel();
  auto apply = [&](auto* w, auto* b) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      if (m[i] == 0) w[i] = 0, b[i] = 0;
  };
  if (params.dtype() == DType::f64)
    apply(params.data_as<double>(), buf.data_as<double>());
  else if (params.dtype() == DType::f16 || params.dtype() == DType::bf16)
    apply(params.data_as<uint16_t>(), buf.data_as<uint16_t>());  // +0 is all-zero bits
  else
    apply(params.data_as<float>(), buf.data_as<float>());
}

}  // namespace rn50
