// rn50: the default implementations of the Backend interface's optional ops (rn50/backend.h):
// the fused inference convolution refused, the fused BatchNorm + residual join as the separate
// ops, the step-input ring read on the host. In rn50_core, beneath every backend: each backend
// derives from Backend and needs these (and Backend's type information, emitted with them)
// whatever else it links.
#include "backend/fused_bn_checks.h"
#include "core/check.h"
#include "core/step_state.h"
#include "rn50/backend.h"

namespace rn50 {

void Backend::conv2d_bias_act_fwd(const Conv2dParams&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, bool, Tensor&) {
  RN50_FAIL("the {} backend has no fused inference convolution (conv2d_bias_act_fwd); its "
            "inference engine is another one (the CPU engine on oneDNN)",
            name());
}

void Backend::batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                           const Tensor& residual, const Tensor& gamma,
                                           const Tensor& beta, Tensor& running_mean,
                                           Tensor& running_var, Tensor& y, Tensor& save_mean,
                                           Tensor& save_var) {
  check_bn_add_relu_fwd_buffers(name(), x, residual, y);
  BatchNormParams bn = p;
  bn.relu = false;
  batchnorm_fwd_train(bn, x, gamma, beta, running_mean, running_var, y, save_mean, save_var);
  add_relu_fwd(y, residual, y);
}

void Backend::batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                     const Tensor& g1, const Tensor& g2, const Tensor& gamma,
                                     const Tensor& save_mean, const Tensor& save_var, Tensor& dres,
                                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  check_bn_add_relu_bwd_buffers(name(), x, y, g1, g2, dres, dx);
  if (g2.defined())
    add_relu_bwd(y, g1, g2, dres);
  else
    relu_bwd(y, g1, dres);
  BatchNormParams bn = p;
  bn.relu = false;
  batchnorm_bwd(bn, x, Tensor(), dres, gamma, save_mean, save_var, dx, dgamma, dbeta);
}

void Backend::load_step_inputs(const Tensor& ring, Tensor& state) {
  host_load_step_inputs(ring, state);
}

}  // namespace rn50
