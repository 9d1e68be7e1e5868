// rn50 CUDA backend: training batch norm on cuDNN's fused NHWC kernels (RN50_CUDA_BN=cudnn), the
// second implementation of batchnorm_fwd_train / batchnorm_bwd (with and without the fused ReLU)
// and batchnorm_add_relu_fwd_train / batchnorm_add_relu_bwd beside our own (batchnorm.cu).
//
// cuDNN calls (cudnn_ops.h; cuDNN 9 API reference, "cudnn_ops library":
// https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html):
//   cudnnBatchNormalizationForwardTrainingEx / cudnnBatchNormalizationBackwardEx with mode
//   CUDNN_BATCHNORM_SPATIAL_PERSISTENT (statistics per channel over N, H, W) and bnOps
//     CUDNN_BATCHNORM_OPS_BN                 batchnorm_fwd_train / _bwd, p.relu false
//     CUDNN_BATCHNORM_OPS_BN_ACTIVATION      the same with p.relu (a ReLU activation descriptor)
//     CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION  batchnorm_add_relu_*: y = relu(BN(x) + z), z the
//                                            residual; the backward writes dz, our dres
//   with the workspace and reserve-space sizes of cudnnGetBatchNormalizationForwardTrainingEx-
//   WorkspaceSize, cudnnGetBatchNormalizationBackwardExWorkspaceSize and
//   cudnnGetBatchNormalizationTrainingExReserveSpaceSize, and the statistics descriptor of
//   cudnnDeriveBNTensorDescriptor (f32 (1,C,1,1) for f16/bf16 data).
// Where it runs (bn_cudnn_refusal, the one place that decides): the reference's fast NHWC
// ("semi-persistent") kernels of the Ex calls need fully packed NHWC tensors of a 16-bit float
// type, the PERSISTENT mode, non-null workspace and reserve space of at least the sizes the
// getters report, and C % 4 == 0 with an activation; we ask C % 4 == 0 for every op. Everything
// else (NCHW, f32, other C, inference: batchnorm_fwd_infer never comes here) runs our kernels.
//
// Conventions, against the Backend contract (rn50/backend.h, BatchNormParams; the reference
// backend's batchnorm) and cudnn_ops.h's comments on cudnnBatchNormalizationForwardTraining:
//  * running statistics: cuDNN's runningMean = newMean * factor + runningMean * (1 - factor),
//    the same for the variance, so exponentialAverageFactor = p.momentum (torch's momentum);
//    cuDNN averages the UNBIASED batch variance (M / (M - 1) times the biased one) into the
//    running variance, as BatchNormParams does (torch passes its running_var straight to it;
//    measured by others: apache/mxnet issue 21111, pytorch/pytorch issue 19902).
//  * epsilon: p.eps, the same in forward and backward (cuDNN asks for that); at least
//    CUDNN_BN_MIN_EPSILON, else our kernels run.
//  * save_mean: cuDNN's resultSaveMean is the batch mean: written straight into save_mean.
//  * save_var: the contract's biased batch variance; cuDNN saves the inverse standard deviation
//    1 / sqrt(var + eps) instead (resultSaveInvVariance: named a variance, holds the inverse
//    std; microsoft/onnxruntime pull request 8172 measured it). We keep cuDNN's own copy per layer
//    (BnCudnnState::inv_std, what its backward reads: the backward sees exactly what its
//    forward computed) and fill save_var from it with a tiny kernel, var = 1 / inv_std^2 - eps
//    in double (bn_var_from_inv_std). That value is the variance to within a few f32 ulps of
//    var + eps (inv_std is rounded to f32 by cuDNN), not bit for bit our kernels' variance.
//  * the backward reads save_mean (the forward wrote it) and the layer's inv_std, not save_var.
//  * backward alpha/beta: dx, dgamma, dbeta overwritten (alpha 1, beta 0), as the contract says.
//  * the join's backward: cuDNN reads one dy, so g1 + g2 is summed first (our add kernel, one
//    rounding, as the contract's dres) into bn_dy_scratch_; without g2, g1 is read directly
//    unless dres aliases it (the schedule's in-place call), then it is copied there first:
//    cuDNN writes dz (our dres) while reading dy, and its reference does not say that the two
//    may alias. dres = y > 0 ? dy : 0 is cuDNN's dz.
//  * the ReLU: CUDNN_ACTIVATION_RELU with CUDNN_PROPAGATE_NAN (our kernels and the reference
//    let NaN through).
//
// State per layer (BnCudnnState, plans.h), keyed by the layer's save_mean buffer (the one buffer
// both directions receive: batchnorm_bwd without a ReLU gets no y): the descriptors, the
// workspace sizes, the reserve space, cuDNN's inverse std and the forward's beta. A layer's first
// training forward makes and sizes it (cudaMalloc: eager, never under a capture); a later forward
// with other shapes grows it (again eagerly: an input shape is always run eagerly first). The
// backward runs cuDNN only when the state was written by a cuDNN forward of the same op on the
// same x (and, with an activation, y) buffer, shape, dtype and eps; otherwise our kernels run on
// save_mean and save_var, which the contract makes sufficient. The workspace is the backend's
// shared one (ops run in stream order).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/plans.h"
#include "core/check.h"

namespace rn50::cuda {

namespace {

/// cuDNN's BN mode of every call here: per-channel statistics, the fast NHWC kernels.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
/// Layers with cuDNN state at most (a network has tens; more are other models on the backend):
/// a new layer beyond it runs our kernels, so state is never freed and never made in a capture
/// by an unbounded number of buffers.
constexpr size_t kMaxBnCudnnStates = 1024;
/// Smallest size of the workspace and reserve space handed to cuDNN: its fast kernels want
/// non-null pointers even where the getters report 0 bytes.
constexpr size_t kMinBuffer = 256;

cudnnBatchNormOps_t bn_ops(bool relu, bool join) {
  if (join) return CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  return relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

/// What a layer's reserve space and inverse std are valid for (compared whole).
std::string state_key(cudnnBatchNormOps_t ops, const Tensor& x, const void* y, double eps) {
  return fmt::format("ops {} x {} {} y {} eps {}", static_cast<int>(ops), x.data(), x.str(), y,
                     eps);
}

}  // namespace

BnCudnnState::~BnCudnnState() {
  // Never throws; the buffers free themselves after this body.
  if (x) (void)cudnnDestroyTensorDescriptor(x);
  if (bn) (void)cudnnDestroyTensorDescriptor(bn);
  if (act) (void)cudnnDestroyActivationDescriptor(act);
}

const char* CudaBackend::bn_cudnn_refusal(const BatchNormParams& p, DType dt, Layout l,
                                          int64_t C) const {
  if (!bn_cudnn_) return "RN50_CUDA_BN is own (the default)";
  if (l != Layout::NHWC)
    return "NCHW: cuDNN's fused BN kernels (SPATIAL_PERSISTENT, the Ex calls) are NHWC only";
  if (dt != DType::f16 && dt != DType::bf16)
    return "not f16/bf16: cuDNN's fused NHWC BN kernels take 16-bit float data";
  if (C >= 0 && C % 4 != 0) return "C % 4 != 0: cuDNN's fused NHWC BN kernels ask C % 4 == 0";
  if (!(p.eps >= CUDNN_BN_MIN_EPSILON)) return "eps below CUDNN_BN_MIN_EPSILON";
  return nullptr;
}

bool CudaBackend::cudnn_bn_forward_train(const BatchNormParams& p, bool relu, const Tensor& x,
                                         const Tensor& residual, const Tensor& gamma,
                                         const Tensor& beta, Tensor& running_mean,
                                         Tensor& running_var, Tensor& y, Tensor& save_mean,
                                         Tensor& save_var) {
  const bool join = residual.defined();
  const cudnnBatchNormOps_t ops = bn_ops(relu, join);
  const bool act = ops != CUDNN_BATCHNORM_OPS_BN;
  auto it = bn_cudnn_states_.find(save_mean.data());
  if (it == bn_cudnn_states_.end()) {
    if (bn_cudnn_states_.size() >= kMaxBnCudnnStates) return false;
    it = bn_cudnn_states_.emplace(save_mean.data(), std::make_unique<BnCudnnState>()).first;
  }
  BnCudnnState& s = *it->second;
  const std::string key = state_key(ops, x, act ? y.data() : nullptr, p.eps);
  const int64_t C = x.c();
  if (s.key != key) {
    s.key.clear();  // valid again only once every query below has succeeded
    if (!s.x) RN50_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.x));
    if (!s.bn) RN50_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.bn));
    if (!s.act) {
      RN50_CUDNN_CHECK(cudnnCreateActivationDescriptor(&s.act));
      RN50_CUDNN_CHECK(
          cudnnSetActivationDescriptor(s.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    }
    RN50_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.x, CUDNN_TENSOR_NHWC, cudnn_dtype(x.dtype()),
                                                static_cast<int>(x.n()), static_cast<int>(C),
                                                static_cast<int>(x.h()),
                                                static_cast<int>(x.w())));
    RN50_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(s.bn, s.x, kMode));
    cudnnActivationDescriptor_t ad = act ? s.act : nullptr;
    cudnnTensorDescriptor_t zd = join ? s.x : nullptr;
    RN50_CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        cudnn_, kMode, ops, s.x, zd, s.x, s.bn, ad, &s.fwd_ws));
    RN50_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        cudnn_, kMode, ops, s.x, act ? s.x : nullptr, s.x, zd, s.x, s.bn, ad, &s.bwd_ws));
    RN50_CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnn_, kMode, ops, ad,
                                                                         s.x, &s.reserve_bytes));
    s.key = key;
  }
  // Sized on the layer's first call with this shape (eager); the same sizes later allocate
  // nothing, so a captured step records no allocation.
  void* reserve = s.reserve.ensure(std::max(s.reserve_bytes, kMinBuffer));
  auto* inv_std = static_cast<float*>(s.inv_std.ensure(static_cast<size_t>(C) * sizeof(float)));
  void* ws = workspace.ensure(std::max(s.fwd_ws, kMinBuffer));
  s.beta = beta.data();
  const float one = 1.f, zero = 0.f;
  RN50_CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
      cudnn_, kMode, ops, &one, &zero, s.x, x.data(), join ? s.x : nullptr,
      join ? residual.data() : nullptr, s.x, y.data(), s.bn, gamma.data(), beta.data(),
      p.momentum, running_mean.data(), running_var.data(), p.eps, save_mean.data(), inv_std,
      act ? s.act : nullptr, ws, s.fwd_ws, reserve, s.reserve_bytes));
  bn_var_from_inv_std(inv_std, p.eps, static_cast<uint32_t>(C), save_var.data_as<float>());
  return true;
}

bool CudaBackend::cudnn_bn_backward(const BatchNormParams& p, bool relu, const Tensor& x,
                                    const Tensor& y, const Tensor& dy, const Tensor& g2,
                                    Tensor& dres, const Tensor& gamma, const Tensor& save_mean,
                                    Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const bool join = dres.defined();
  const cudnnBatchNormOps_t ops = bn_ops(relu, join);
  const bool act = ops != CUDNN_BATCHNORM_OPS_BN;
  auto it = bn_cudnn_states_.find(save_mean.data());
  if (it == bn_cudnn_states_.end() || (act && !y.defined())) return false;
  BnCudnnState& s = *it->second;
  if (s.key != state_key(ops, x, act ? y.data() : nullptr, p.eps)) return false;
  // The one dy cuDNN reads: g1 + g2 summed (rounded once), or g1 copied away from dres.
  const void* g = dy.data();
  if (join && (g2.defined() || dres.data() == dy.data())) {
    void* tmp = bn_dy_scratch_.ensure(x.nbytes());
    if (g2.defined()) {
      Tensor sum = Tensor::view(tmp, x.shape(), x.dtype(), x.layout(), device());
      add(dy, g2, sum);
    } else {
      RN50_CUDA_CHECK(
          cudaMemcpyAsync(tmp, dy.data(), x.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    }
    g = tmp;
  }
  void* ws = workspace.ensure(std::max(s.bwd_ws, kMinBuffer));
  const float one = 1.f, zero = 0.f;
  RN50_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
      cudnn_, kMode, ops, &one, &zero, &one, &zero, s.x, x.data(), act ? s.x : nullptr,
      act ? y.data() : nullptr, s.x, g, join ? s.x : nullptr, join ? dres.data() : nullptr, s.x,
      dx.data(), s.bn, gamma.data(), s.beta, dgamma.data(), dbeta.data(), p.eps,
      save_mean.data(), s.inv_std.ptr, act ? s.act : nullptr, ws, s.bwd_ws, s.reserve.ptr,
      s.reserve_bytes));
  return true;
}

}  // namespace rn50::cuda
