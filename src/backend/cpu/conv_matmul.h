// rn50: 1x1 convolutions on NHWC activations as oneDNN matmuls (see conv_matmul.cpp).
#pragma once

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"

namespace rn50::onednn {

/// Whether direction `dir` of the conv with params `p` between activation `act` (x or dx,
/// N,C,H,W), weights `w` (K,C,R,S) and output-side activation `out` (y or dy) runs as a
/// matmul: R = S = 1, pad 0, both activations 4-D NHWC, and conv1x1_matmul_allowed (conv_algo.h).
bool conv1x1_as_matmul(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                       const Tensor& out);

/// y (N,K,OH,OW) = conv1x1(x (N,C,H,W), w (K,C,1,1)) with stride p.stride, as one matmul
/// Y[N*OH*OW, K] = Xs[N*OH*OW, C] . W^T (Xs = x at every stride-th row and column, gathered into
/// a scratch buffer when the stride is above 1). x, y NHWC; w OIHW or OHWI (the same memory for
/// 1x1); f32 or bf16 throughout (oneDNN accumulates in f32). Shapes checked by the caller.
void conv1x1_fwd_matmul(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                        const Tensor& w, Tensor& y);
/// dx (N,C,H,W) of the same conv from dy (N,K,OH,OW): dXs = dY . W, scattered back to every
/// stride-th row and column of dx (the rest of dx set to zero) when the stride is above 1.
void conv1x1_bwd_data_matmul(OnednnBackend& be, const Conv2dParams& p, const Tensor& dy,
                             const Tensor& w, Tensor& dx);
/// dw (K,C,1,1) of the same conv: dW = dY^T . Xs (a sum over all N*OH*OW output positions).
void conv1x1_bwd_weights_matmul(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                                const Tensor& dy, Tensor& dw);

}  // namespace rn50::onednn
