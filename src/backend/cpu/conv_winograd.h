// rn50: f32 3x3 stride-1 convolutions of the training backend on NHWC activations as our own
// Winograd F(4x4, 3x3) (winograd_f43.h), forward and backward data (see conv_winograd.cpp).
#pragma once

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"

namespace rn50::onednn {

/// Whether direction `dir` (fwd or bwd_data) of the conv with params `p` between activation
/// `act` (x or dx, N,C,H,W), weights `w` (K,C,3,3) and output-side activation `out` (y or dy)
/// runs as our Winograd: f32, 3x3, stride 1, pad 1, both activations 4-D NHWC, C and K
/// multiples of 8, conv_own_winograd_allowed (conv_algo.h) and WinogradF43Conv::worthwhile for
/// the shape the direction computes. Never for bwd_weights.
bool conv_as_own_winograd(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                          const Tensor& out);

/// y (N,K,H,W) = conv3x3(x (N,C,H,W), w (K,C,3,3)), stride 1, zero padding 1; x, y NHWC f32,
/// w OIHW or OHWI. The weights are transformed on every call (training changes them).
/// Shapes checked by the caller.
void conv_fwd_own_winograd(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                           const Tensor& w, Tensor& y);
/// dx (N,C,H,W) of the same conv from dy (N,K,H,W): the stride-1 pad-1 3x3 conv of dy with the
/// weights transposed and rotated by 180 degrees, dX = conv(dY, W'), W'[c][k][r][q] =
/// W[k][c][2-r][2-q].
void conv_bwd_data_own_winograd(OnednnBackend& be, const Conv2dParams& p, const Tensor& dy,
                                const Tensor& w, Tensor& dx);

}  // namespace rn50::onednn
