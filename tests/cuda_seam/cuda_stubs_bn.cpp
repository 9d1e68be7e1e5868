// Link-seam stubs of cuDNN's batch norm functions the CUDA backend calls with RN50_CUDA_BN=cudnn
// (batchnorm_cudnn.cpp); see cuda_stubs_bn.h. The others are in cuda_stubs.cpp and
// cuda_stubs_dnn.cpp.
#include "cuda_stubs_bn.h"

#include "cuda_stub_state.h"

namespace stub = rn50::cuda_stub;

namespace rn50::cuda_stub {
namespace {

/// The BN calls and size answers (guarded by st().mu, like the rest of the stubs' state).
std::vector<BnCall>& bn_log() {
  static auto* v = new std::vector<BnCall>;  // never destroyed, like st()
  return *v;
}
std::vector<BnSizeQuery>& size_log() {
  static auto* v = new std::vector<BnSizeQuery>;
  return *v;
}

/// Records a size answer (caller holds the lock).
size_t answer_locked(const char* fn, int ops, int c, size_t bytes) {
  record_locked(fn).bytes = bytes;
  size_log().push_back({fn, ops, c, bytes});
  return bytes;
}

/// Fills the descriptor fields of a BN call and records it as a StubCall too (caller holds the
/// lock).
BnCall& bn_record_locked(const char* fn, cudnnHandle_t h, cudnnBatchNormMode_t mode,
                         cudnnBatchNormOps_t ops, cudnnTensorDescriptor_t x,
                         cudnnTensorDescriptor_t bn, cudnnActivationDescriptor_t act,
                         const void* reserve, size_t reserve_bytes) {
  StubCall& c = record_locked(fn);
  c.ptr = reserve;
  c.bytes = reserve_bytes;
  c.detail = "ops " + std::to_string(static_cast<int>(ops));
  node_locked(h ? h->stream : nullptr);
  BnCall b;
  b.fn = fn;
  b.in_capture = c.in_capture;
  b.mode = static_cast<int>(mode);
  b.ops = static_cast<int>(ops);
  b.act_mode = act ? static_cast<int>(act->mode) : -1;
  if (x) {
    b.format = static_cast<int>(x->format);
    b.dtype = static_cast<int>(x->dtype);
    b.n = x->n;
    b.c = x->c;
    b.h = x->h;
    b.w = x->w;
  }
  if (bn) {
    b.bn_dtype = static_cast<int>(bn->dtype);
    b.bn_c = bn->c;
  }
  b.reserve = reserve;
  b.reserve_bytes = reserve_bytes;
  bn_log().push_back(b);
  return bn_log().back();
}

}  // namespace

std::vector<BnCall> bn_calls(size_t begin) {
  std::lock_guard<std::mutex> lock(st().mu);
  const auto& v = bn_log();
  if (begin >= v.size()) return {};
  return std::vector<BnCall>(v.begin() + static_cast<std::ptrdiff_t>(begin), v.end());
}
size_t num_bn_calls() {
  std::lock_guard<std::mutex> lock(st().mu);
  return bn_log().size();
}
std::vector<BnSizeQuery> bn_size_queries() {
  std::lock_guard<std::mutex> lock(st().mu);
  return size_log();
}

}  // namespace rn50::cuda_stub

extern "C" {

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
                                            const cudnnTensorDescriptor_t xDesc,
                                            cudnnBatchNormMode_t mode) {
  if (!derivedBnDesc || !xDesc) return CUDNN_STATUS_BAD_PARAM;
  *derivedBnDesc = {CUDNN_TENSOR_NCHW, xDesc->dtype == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE
                                                                         : CUDNN_DATA_FLOAT,
                    1, xDesc->c, 1, 1};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t zDesc,
    const cudnnTensorDescriptor_t yDesc, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
    const cudnnActivationDescriptor_t activationDesc, size_t* sizeInBytes) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  const int ops = static_cast<int>(bnOps);
  *sizeInBytes = stub::answer_locked("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
                                     ops, xDesc->c, 512 + 8 * size_t(xDesc->c) + 64 * size_t(ops));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t yDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnTensorDescriptor_t dzDesc,
    const cudnnTensorDescriptor_t dxDesc, const cudnnTensorDescriptor_t dBnScaleBiasDesc,
    const cudnnActivationDescriptor_t activationDesc, size_t* sizeInBytes) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  const int ops = static_cast<int>(bnOps);
  *sizeInBytes = stub::answer_locked("cudnnGetBatchNormalizationBackwardExWorkspaceSize", ops,
                                     xDesc->c, 1024 + 8 * size_t(xDesc->c) + 64 * size_t(ops));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t xDesc,
    size_t* sizeInBytes) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  const int ops = static_cast<int>(bnOps);
  const size_t elems = size_t(xDesc->n) * size_t(xDesc->c) * size_t(xDesc->h) * size_t(xDesc->w);
  *sizeInBytes = stub::answer_locked("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", ops,
                                     xDesc->c, ops == 0 ? 0 : elems / 8 + 4096 * size_t(ops));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const void* alpha, const void* beta, const cudnnTensorDescriptor_t xDesc, const void* xData,
    const cudnnTensorDescriptor_t zDesc, const void* zData, const cudnnTensorDescriptor_t yDesc,
    void* yData, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, double exponentialAverageFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance, cudnnActivationDescriptor_t activationDesc, void* workspace,
    size_t workSpaceSizeInBytes, void* reserveSpace, size_t reserveSpaceSizeInBytes) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::BnCall& b = stub::bn_record_locked("cudnnBatchNormalizationForwardTrainingEx", handle,
                                           mode, bnOps, xDesc, bnScaleBiasMeanVarDesc,
                                           activationDesc, reserveSpace, reserveSpaceSizeInBytes);
  b.eps = epsilon;
  b.factor = exponentialAverageFactor;
  b.z_desc = zDesc != nullptr;
  b.y_desc = yDesc != nullptr;
  b.x = xData;
  b.z = zData;
  b.y = yData;
  b.scale = bnScale;
  b.bias = bnBias;
  b.running_mean = resultRunningMean;
  b.running_var = resultRunningVariance;
  b.save_mean = resultSaveMean;
  b.save_inv_std = resultSaveInvVariance;
  b.workspace = workspace;
  b.ws_bytes = workSpaceSizeInBytes;
  b.alpha = *static_cast<const float*>(alpha);
  b.beta = *static_cast<const float*>(beta);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const void* alphaDataDiff, const void* betaDataDiff, const void* alphaParamDiff,
    const void* betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void* xData,
    const cudnnTensorDescriptor_t yDesc, const void* yData, const cudnnTensorDescriptor_t dyDesc,
    const void* dyData, const cudnnTensorDescriptor_t dzDesc, void* dzData,
    const cudnnTensorDescriptor_t dxDesc, void* dxData,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScaleData,
    const void* bnBiasData, void* dBnScaleData, void* dBnBiasData, double epsilon,
    const void* savedMean, const void* savedInvVariance,
    cudnnActivationDescriptor_t activationDesc, void* workSpace, size_t workSpaceSizeInBytes,
    void* reserveSpace, size_t reserveSpaceSizeInBytes) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::BnCall& b = stub::bn_record_locked("cudnnBatchNormalizationBackwardEx", handle, mode,
                                           bnOps, xDesc, dBnScaleBiasDesc, activationDesc,
                                           reserveSpace, reserveSpaceSizeInBytes);
  b.eps = epsilon;
  b.y_desc = yDesc != nullptr;
  b.dz_desc = dzDesc != nullptr;
  b.x = xData;
  b.y = yData;
  b.dy = dyData;
  b.dz = dzData;
  b.dx = dxData;
  b.scale = bnScaleData;
  b.bias = bnBiasData;
  b.dscale = dBnScaleData;
  b.dbias = dBnBiasData;
  b.save_mean = savedMean;
  b.save_inv_std = savedInvVariance;
  b.workspace = workSpace;
  b.ws_bytes = workSpaceSizeInBytes;
  // Parameter gradients overwritten too: alpha/beta of both pairs are checked to agree.
  const float ad = *static_cast<const float*>(alphaDataDiff);
  const float bd = *static_cast<const float*>(betaDataDiff);
  const bool params_agree = *static_cast<const float*>(alphaParamDiff) == ad &&
                            *static_cast<const float*>(betaParamDiff) == bd;
  b.alpha = ad;
  b.beta = params_agree ? bd : -1.f;
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
