// rn50: training batch normalisation of NHWC activations in bf16 or f32, our own loops
// (batchnorm_nhwc.cpp).
#pragma once

#include <cstdint>

namespace rn50::onednn {

/// Which loops take the forward's statistics pass: `fastest` uses AVX-512 tiles (32 bf16 or 16
/// f32 channels a vector) when the build targets AVX-512 and C is a multiple of the vector's
/// channels, the portable row loops otherwise; `portable` forces the row loops (the tests
/// compare the two: they give the same bits).
enum class BnLoops { fastest, portable };

// The element type T of the activations is uint16_t for bf16 (the bits; CPU AMP) or float for
// f32: both are instantiated. bf16 values widen exactly to f32, results narrow once to bf16 with
// round-to-nearest-even; f32 results are stored as computed.

/// Training forward of BatchNorm2d (+ ReLU when `relu`) over activations in NHWC, seen as
/// M = N*H*W rows of C channels (T [M, C], row-major): per channel the batch mean and the
/// BIASED batch variance over the M rows (into save_mean / save_var, f32 [C]; torch's and
/// oneDNN's training statistics), then y = (x - mean) / sqrt(var + eps) * gamma + beta, ReLU'd
/// when `relu`, rounded once to T. With a `residual` (T [M, C], may be null) the residual join
/// of a ResNet block is fused in: y = act(BN(x) + residual), rounded once, where the separate
/// bf16 ops round BN(x) to bf16 first. Sums in f32 over chunks of 64 rows, the chunks in f64,
/// every value shifted by the channel's first one (so that E[x^2] - E[x]^2 does not cancel
/// when the mean is large against the spread). Needs M >= 1; x (or residual) and y may alias.
/// Two passes over x (and one over the residual) and one over y.
template <class T>
void bn_nhwc_fwd_train(const T* x, const T* residual, T* y, int64_t M, int64_t C,
                       const float* gamma, const float* beta, float eps, bool relu,
                       float* save_mean, float* save_var, BnLoops loops = BnLoops::fastest);

/// Backward of the same layer: with g = dy where y > 0, else 0 (when `relu`; y is the forward's
/// output, T [M, C]; unused and may be null otherwise) or g = dy, xhat = (x - mean) * rstd,
/// rstd = 1 / sqrt(var + eps):
///   dbeta = sum_rows g,  dgamma = sum_rows g * xhat,
///   dx = gamma * rstd * (g - dbeta / M - xhat * dgamma / M)
/// (the batch-statistics backward of Ioffe & Szegedy, "Batch Normalization", ICML 2015, sec. 3;
/// what torch.nn.BatchNorm2d's autograd computes). x, dy, dx T [M, C] (dx may alias dy);
/// gamma, save_mean, save_var (biased, from the forward), dgamma, dbeta f32 [C]. Sums as in the
/// forward. Two passes over x, dy (and y).
template <class T>
void bn_nhwc_bwd(const T* x, const T* y, const T* dy, T* dx, int64_t M, int64_t C,
                 const float* gamma, const float* save_mean, const float* save_var, float eps,
                 bool relu, float* dgamma, float* dbeta);

/// The same backward fused with the ReLU backward of the residual join after the layer
/// (Backend::batchnorm_add_relu_bwd): dres = y > 0 ? g1 + g2 : 0 (g2 null: y > 0 ? g1 : 0),
/// the sum rounded once to T, is written (the residual's gradient) and is the dy of the
/// backward above (without ReLU). y is the join's output; x, y, g1, g2, dres, dx T [M, C];
/// dres may alias g1, dx aliases none. Reads g1, g2, y once and dres once (the separate ops:
/// dres twice). Same bits as add_relu_bwd then bn_nhwc_bwd.
template <class T>
void bn_nhwc_add_relu_bwd(const T* x, const T* y, const T* g1, const T* g2, T* dres, T* dx,
                          int64_t M, int64_t C, const float* gamma, const float* save_mean,
                          const float* save_var, float eps, float* dgamma, float* dbeta);

}  // namespace rn50::onednn
