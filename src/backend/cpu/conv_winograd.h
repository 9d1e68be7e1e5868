// rn50: 3x3 stride-1 convolutions of the training backend on NHWC activations as our own
// Winograd: f32 as F(4x4, 3x3) (winograd_f43.h) forward, backward data and the weight gradient,
// bf16 as F(2x2, 3x3) (winograd_f23_bf16.h), the same three (see conv_winograd.cpp).
#pragma once

#include <cstddef>
#include <optional>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"

namespace rn50::onednn {

/// Whether direction `dir` (fwd or bwd_data) of the conv with params `p` between activation
/// `act` (x or dx, N,C,H,W), weights `w` (K,C,3,3) and output-side activation `out` (y or dy)
/// runs as our Winograd: 3x3, stride 1, pad 1, both activations 4-D NHWC; in f32 as F(4x4,
/// 3x3) when C and K are multiples of 8, conv_own_winograd_allowed (conv_algo.h) and
/// WinogradF43Conv::worthwhile for the shape the direction computes; in bf16 as F(2x2, 3x3)
/// (winograd_f23_bf16.h) when conv_own_winograd_bf16_allowed and WinogradF23Bf16::worthwhile
/// (C and K multiples of 16, enough tiles per thread; under policy `matmul` only ::fits). Never
/// for bwd_weights (conv_bwd_weights_as_own_winograd).
bool conv_as_own_winograd(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                          const Tensor& out);

/// y (N,K,H,W) = conv3x3(x (N,C,H,W), w (K,C,3,3)), stride 1, zero padding 1; x, y NHWC, w
/// OIHW or OHWI, all f32 or all bf16. The weights are transformed on every call (training
/// changes them). Shapes checked by the caller.
void conv_fwd_own_winograd(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                           const Tensor& w, Tensor& y);
/// dx (N,C,H,W) of the same conv from dy (N,K,H,W): the stride-1 pad-1 3x3 conv of dy with the
/// weights transposed and rotated by 180 degrees, dX = conv(dY, W'), W'[c][k][r][q] =
/// W[k][c][2-r][2-q].
void conv_bwd_data_own_winograd(OnednnBackend& be, const Conv2dParams& p, const Tensor& dy,
                                const Tensor& w, Tensor& dx);

/// Whether the weight gradient of the conv with params `p` between x (N,C,H,W), dw (K,C,3,3)
/// and dy (N,K,H,W) runs as our Winograd: the forward conv's conditions above and, in f32,
/// WinogradF43Conv::weight_grad_worthwhile.
bool conv_bwd_weights_as_own_winograd(const Conv2dParams& p, const Tensor& x, const Tensor& dw,
                                      const Tensor& dy);
/// dw (K,C,3,3; OIHW or OHWI) = the weight gradient of y = conv3x3(x, w), stride 1, zero
/// padding 1, from x (N,C,H,W) and dy (N,K,H,W), both NHWC, all f32 or all bf16, as Winograd
/// F(4x4, 3x3)'s transpose in f32: per chunk of 4x4 tiles, V = B^T d B of x's 6x6 tiles and Z =
/// A g A^T of dy's 4x4 tiles (all threads), then M (36, C, K) += V^T Z (one oneDNN batched
/// matmul, sum post-op); at the end dW[k][c] = G^T M[., c, k] G (winograd_f43.h). In bf16 the
/// same with F(2x2, 3x3)'s 2x2 tiles (16 positions; winograd_f23_bf16.h), V and Z in bf16, M in
/// f32, dW rounded once. Shapes checked by the caller.
void conv_bwd_weights_own_winograd(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                                   const Tensor& dy, Tensor& dw);

/// Overrides the weight gradient's chunk size (bytes of V and Z per chunk of tiles) for this
/// process: the tests use it to run several chunks and a shorter last one on small shapes;
/// std::nullopt restores the default.
void set_winograd_wgrad_chunk_bytes(std::optional<size_t> bytes);

}  // namespace rn50::onednn
