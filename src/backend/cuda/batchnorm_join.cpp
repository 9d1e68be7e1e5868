// rn50 CUDA backend: a bottleneck's last BatchNorm fused with its residual join
// (Backend::batchnorm_add_relu_fwd_train / batchnorm_add_relu_bwd), chosen by
// RN50_CUDA_BN_JOIN=fused (CudaBackend::bn_join_fused). The kernels are batchnorm.cu's: the
// forward apply adds the residual before the ReLU; the backward statistics pass writes the
// join's gradient dres = y > 0 ? g1 + g2 : 0 (rounded) and sums it, and the apply pass reads
// dres. Two passes over the activations fewer per join and direction than the separate
// add_relu + batchnorm kernels; without the switch these run Backend's default (the separate
// kernels). With RN50_CUDA_BN=cudnn, where cuDNN takes the configuration (bn_cudnn_refusal),
// the same entry points run cuDNN's BN_ADD_ACTIVATION instead (batchnorm_cudnn.cpp; a channel
// count cuDNN refuses runs our fused kernels, so the op is fused wherever supports() claims it).
// The buffer rules are fused_bn_checks.h's, as for the oneDNN backend.
#include "backend/cuda/cuda_backend.h"
#include "backend/fused_bn_checks.h"
#include "core/check.h"

namespace rn50::cuda {

void CudaBackend::batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                               const Tensor& residual, const Tensor& gamma,
                                               const Tensor& beta, Tensor& running_mean,
                                               Tensor& running_var, Tensor& y,
                                               Tensor& save_mean, Tensor& save_var) {
  if (!supports(Op::batchnorm_add_relu, x.dtype(), x.layout())) {
    Backend::batchnorm_add_relu_fwd_train(p, x, residual, gamma, beta, running_mean, running_var,
                                          y, save_mean, save_var);
    return;
  }
  const char* op = "batchnorm_add_relu_fwd_train";
  check_bn_add_relu_fwd_buffers("cuda", x, residual, y);
  check_bn_acts(op, {{"x", &x}, {"residual", &residual}, {"y", &y}});
  bn_forward_train(op, p, true, x, residual, gamma, beta, running_mean, running_var, y,
                   save_mean, save_var);
}

void CudaBackend::batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x,
                                         const Tensor& y, const Tensor& g1, const Tensor& g2,
                                         const Tensor& gamma, const Tensor& save_mean,
                                         const Tensor& save_var, Tensor& dres, Tensor& dx,
                                         Tensor& dgamma, Tensor& dbeta) {
  if (!supports(Op::batchnorm_add_relu, x.dtype(), x.layout())) {
    Backend::batchnorm_add_relu_bwd(p, x, y, g1, g2, gamma, save_mean, save_var, dres, dx, dgamma,
                                    dbeta);
    return;
  }
  const char* op = "batchnorm_add_relu_bwd";
  check_bn_add_relu_bwd_buffers("cuda", x, y, g1, g2, dres, dx);
  RN50_CHECK(dres.data() != x.data() && dres.data() != y.data(),
             "cuda {}: dres may alias only g1, not x or y", op);
  check_bn_acts(op, {{"x", &x}, {"y", &y}, {"g1", &g1}, {"dres", &dres}, {"dx", &dx}});
  if (g2.defined()) check_bn_acts(op, {{"x", &x}, {"g2", &g2}});
  bn_backward(op, p, true, x, y, g1, g2, dres, gamma, save_mean, save_var, dx, dgamma, dbeta);
}

}  // namespace rn50::cuda
