// Link-seam stubs of cuDNN's batch norm (cuda_stubs_bn.cpp): what the tests of
// test_cuda_bn_cudnn.cpp read back. The stubs record every cudnnBatchNormalization*Ex call with
// its arguments (also as a StubCall, named after the function, for count() and the capture
// checks, with the reserve space as ptr/bytes) and never compute anything. Made-up sizes:
//   forward workspace   512 + 8 * C + 64 * bnOps bytes
//   backward workspace  1024 + 8 * C + 64 * bnOps bytes
//   reserve space       0 for CUDNN_BATCHNORM_OPS_BN, else N*C*H*W / 8 + 4096 * bnOps bytes
// each recorded as a BnSizeQuery. cudnnDeriveBNTensorDescriptor makes an f32 NCHW (1,C,1,1)
// descriptor. Thread-safe, like the other stubs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rn50::cuda_stub {

/// One cudnnBatchNormalizationForwardTrainingEx / cudnnBatchNormalizationBackwardEx call.
struct BnCall {
  std::string fn;           ///< "cudnnBatchNormalizationForwardTrainingEx" or "...BackwardEx"
  bool in_capture = false;  ///< a stream capture was active
  int mode = -1, ops = -1;  ///< cudnnBatchNormMode_t, cudnnBatchNormOps_t
  double eps = 0, factor = 0;  ///< epsilon; exponentialAverageFactor (forward only)
  int act_mode = -1;        ///< the activation descriptor's mode; -1: none given
  /// x descriptor: cudnnTensorFormat_t, cudnnDataType_t, dims; the statistics descriptor's
  /// data type and C.
  int format = -1, dtype = -1, n = 0, c = 0, h = 0, w = 0, bn_dtype = -1, bn_c = 0;
  bool z_desc = false, y_desc = false, dz_desc = false;  ///< those descriptors given
  // Data pointers (null where not given). Forward: x, z, y, scale, bias, running_mean,
  // running_var, save_mean, save_inv_std. Backward: x, y, dy, dz, dx, scale, bias, dscale,
  // dbias, save_mean, save_inv_std.
  const void *x = nullptr, *z = nullptr, *y = nullptr, *dy = nullptr, *dz = nullptr,
             *dx = nullptr, *scale = nullptr, *bias = nullptr, *dscale = nullptr,
             *dbias = nullptr, *running_mean = nullptr, *running_var = nullptr,
             *save_mean = nullptr, *save_inv_std = nullptr;
  const void* workspace = nullptr;
  size_t ws_bytes = 0;
  const void* reserve = nullptr;
  size_t reserve_bytes = 0;
  float alpha = 0, beta = 0;  ///< the data blend factors (*alpha, *beta / *alphaDataDiff, ...)
};

/// The BN calls so far (all, or from index `begin`), and how many.
std::vector<BnCall> bn_calls(size_t begin = 0);
size_t num_bn_calls();

/// One answer of a BN size getter.
struct BnSizeQuery {
  std::string fn;  ///< the getter
  int ops = -1;
  int c = 0;
  size_t bytes = 0;
};
std::vector<BnSizeQuery> bn_size_queries();

}  // namespace rn50::cuda_stub
