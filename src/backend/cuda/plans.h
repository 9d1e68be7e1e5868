// rn50 CUDA backend: the cached per-shape plans of the convolutions (cuDNN) and the fc layer
// (cuBLASLt), and the per-layer state of cuDNN's batch norm. Their definitions live here, not in
// conv.cpp / linear.cpp / batchnorm_cudnn.cpp, because CudaBackend owns them through
// std::unique_ptr and its constructor and destructor (cuda_backend.cpp) need the complete types;
// the destructors themselves are defined next to the code that fills them.
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"

namespace rn50::cuda {

/// True when `t`, stored in its own layout, has the same memory order as it would in layout
/// `l`: always for tensors that are not 4-D, and for 4-D tensors whose layouts agree or whose
/// H*W == 1 or C == 1 (then NCHW and NHWC offsets coincide). Such tensors convert with a plain
/// memcpy.
inline bool same_order(const Tensor& t, Layout l) {
  if (t.ndim() != 4 || t.layout() == l) return true;
  return t.dim(2) * t.dim(3) == 1 || t.dim(1) == 1;
}

/// Largest power of two (<= 256) dividing the address `p`: the alignment a library kernel may
/// assume for that operand (part of the plan keys, since algorithms are chosen per alignment).
inline uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

/// One cuDNN convolution (forward, backward data or backward filter) for one key of shapes,
/// layouts, dtype, stride and pad. cuDNN sees every operand in one "compute layout" (the
/// layout of the main activation operand); operands stored in the other layout are converted
/// through the plan's own scratch buffers (only when their memory order really differs).
struct ConvPlan {
  Layout layout = Layout::NCHW;           ///< compute layout of every cuDNN descriptor
  cudnnTensorDescriptor_t x = nullptr;    ///< x (fwd, bwd filter) or dx (bwd data)
  cudnnTensorDescriptor_t y = nullptr;    ///< y (fwd) or dy (bwd data, bwd filter)
  cudnnFilterDescriptor_t w = nullptr;    ///< w (fwd, bwd data) or dw (bwd filter)
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool found = false;                     ///< algorithm chosen (first call)
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
  size_t ws_bytes = 0;                    ///< workspace the chosen algorithm needs
  /// conv2d_bias_act_fwd's plans: the bias (1,K,1,1) and activation descriptors, and whether
  /// cudnnConvolutionBiasActivationForward took the configuration on the first call (false:
  /// convolution then the bias_act kernel).
  cudnnTensorDescriptor_t bias = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  bool fused = false;
  /// The x-, w- and y-role operands in the compute layout when the caller's tensors are stored
  /// in the other one (allocated on the first call only).
  DeviceBuffer x_tmp, w_tmp, y_tmp;
  ~ConvPlan();
};

/// One cuBLASLt matmul D = alpha op(A) op(B) + beta C (C == D) of the fc layer, for one key of
/// shapes, dtypes, operand alignments and direction.
struct LinearPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  ///< C shares D's layout
  cublasLtMatmulAlgo_t algo{};
  size_t ws_bytes = 0;
  ~LinearPlan();
};

/// One BatchNorm layer's cuDNN state (RN50_CUDA_BN=cudnn, batchnorm_cudnn.cpp): what
/// cudnnBatchNormalizationForwardTrainingEx leaves for cudnnBatchNormalizationBackwardEx and our
/// Backend API does not carry. Written by the layer's training forward; its backward uses it
/// only when its key matches (same op, x, y, dtype, shape, eps), else runs our kernels.
struct BnCudnnState {
  std::string key;                        ///< what the reserve space was written for
  cudnnTensorDescriptor_t x = nullptr;    ///< x, y, z, dy, dz, dx: NHWC, the activations' dtype
  /// gamma, beta and the statistics: f32 (1,C,1,1) from cudnnDeriveBNTensorDescriptor
  cudnnTensorDescriptor_t bn = nullptr;
  cudnnActivationDescriptor_t act = nullptr;  ///< ReLU (the ops with an activation)
  size_t fwd_ws = 0, bwd_ws = 0;          ///< workspace sizes of ForwardTrainingEx / BackwardEx
  size_t reserve_bytes = 0;               ///< cudnnGetBatchNormalizationTrainingExReserveSpaceSize
  DeviceBuffer reserve;                   ///< the forward's reserve space, read by the backward
  DeviceBuffer inv_std;                   ///< C floats: cuDNN's resultSaveInvVariance
  /// The forward's beta (bnBias): BackwardEx reads it with an activation, and Backend's
  /// batchnorm_bwd has no beta argument. A parameter: same buffer and values until SGD, which
  /// runs after the backward.
  const void* beta = nullptr;
  ~BnCudnnState();
};

}  // namespace rn50::cuda
