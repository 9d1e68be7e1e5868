// rn50: the weight gradient of KxK convolutions on NHWC activations as im2col + oneDNN matmuls
// (see conv_im2col.cpp).
#pragma once

#include <cstddef>
#include <optional>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"

namespace rn50::onednn {

/// Whether the weight gradient of the conv with params `p` between x (N,C,H,W), dw (K,C,R,S)
/// and dy (N,K,OH,OW) runs as im2col + matmuls: R x S above 1 x 1, x and dy 4-D NHWC of one
/// dtype, and conv_im2col_allowed (conv_algo.h) for that dtype and shape.
bool conv_bwd_weights_as_im2col(const Conv2dParams& p, const Tensor& x, const Tensor& dw,
                                const Tensor& dy);

/// dw (K,C,R,S; OIHW or OHWI, x's dtype) = the weight gradient of y = conv(x, w) with stride
/// p.stride and zero padding p.pad on every side, from x (N,C,H,W) and dy (N,K,OH,OW), both
/// NHWC, f32 or bf16:
///   dW[K, (r,s,c)] = sum over the P = N*OH*OW output positions of dY[P,K]^T . Col[P,(r,s,c)]
/// where Col's row of position (n,oh,ow) holds x at (n, oh*stride - pad + r, ow*stride - pad +
/// s, c), zero outside x (im2col, Chellapilla et al. 2006). The positions are taken in chunks
/// whose Col stays in the caches (kIm2colChunkBytes); each chunk's product is added into an f32
/// accumulator, which is reordered into dw's dtype and layout once at the end. Shapes checked
/// by the caller.
void conv_bwd_weights_im2col(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                             const Tensor& dy, Tensor& dw);

/// Overrides the chunk size (bytes of Col per chunk) for this process: the tests use it to run
/// many chunks and a shorter last one on small shapes; std::nullopt restores the default.
void set_im2col_chunk_bytes(std::optional<size_t> bytes);

}  // namespace rn50::onednn
