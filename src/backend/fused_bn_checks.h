// rn50: the buffer rules of the fused BatchNorm + residual join ops, checked the same way by
// Backend's default (registry.cpp) and by a backend's own kernel (the oneDNN backend's).
#pragma once

#include "core/check.h"
#include "rn50/backend.h"

namespace rn50 {

/// Backend::batchnorm_add_relu_fwd_train: y must be defined and a buffer of its own (the fused
/// kernel reads x and the residual while it writes y). Throws rn50::Error naming `backend`.
inline void check_bn_add_relu_fwd_buffers(const std::string& backend, const Tensor& x,
                                          const Tensor& residual, const Tensor& y) {
  RN50_CHECK(y.defined() && residual.defined() && y.data() != x.data() &&
                 y.data() != residual.data(),
             "{} batchnorm_add_relu_fwd_train: y must be a tensor of its own (not x or residual)",
             backend);
}

/// Backend::batchnorm_add_relu_bwd: dres and dx defined, dx a buffer of its own (not x, y, g1,
/// g2 or dres) and dres not g2's (it may be g1's: written in place of the first gradient part).
/// g2 may be undefined. Throws rn50::Error naming `backend`.
inline void check_bn_add_relu_bwd_buffers(const std::string& backend, const Tensor& x,
                                          const Tensor& y, const Tensor& g1, const Tensor& g2,
                                          const Tensor& dres, const Tensor& dx) {
  RN50_CHECK(dres.defined() && dx.defined() && dx.data() != dres.data() &&
                 dx.data() != x.data() && dx.data() != y.data() && dx.data() != g1.data() &&
                 (!g2.defined() || (dx.data() != g2.data() && dres.data() != g2.data())),
             "{} batchnorm_add_relu_bwd: dx must be a tensor of its own and dres may alias only "
             "g1",
             backend);
}

}  // namespace rn50
