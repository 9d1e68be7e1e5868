// rn50: an f32 3x3 stride-1 pad-1 convolution as Winograd F(4x4, 3x3) with its products in our
// own panel GEMM (gemm_f32_panels.h), for CPUs where oneDNN has no Winograd kernel (see
// winograd_f43.cpp), and the transforms of its weight gradient (the driver: conv_winograd.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/aligned.h"

namespace rn50::onednn {

/// Y = ReLU?(conv3x3(X, W) + b (+ Y)) with stride 1 and zero padding 1, computed as Winograd
/// F(4x4, 3x3) (Lavin and Gray 2016, "Fast Algorithms for Convolutional Neural Networks", the
/// B^T, G and A^T of their section 4.2): every 4x4 output tile of every image (P tiles in all)
/// reads a 6x6 input tile d; V = B^T d B and U = G g G^T (once, here) turn the conv into 36
/// independent products M[xi] (P x K) = V[xi] (P x C) . U[xi] (C x K), one per position xi of
/// the 6x6 transformed tile, and each tile's output is A^T m A. The tiles are taken in chunks
/// (at most kMaxChunkTiles, spread over the OpenMP threads): each thread transforms its chunk's
/// inputs into its V, runs the 36 products on its core (gemm_f32_panels, U read in place), and
/// transforms the products straight into Y with the bias, the residual sum and the ReLU; V
/// and M are the thread's scratch, shared by every such conv, so they stay in its caches.
///   X: (N, C, H, W) f32 nChw8c;  Y: (N, K, H, W) f32 nChw8c;  C and K multiples of 8
///   (or both NHWC: Shape::nhwc).
///   W: (K, C, 3, 3) f32 OIHW;    b: (K) f32.
/// 2.25 multiply-adds of the direct conv's 9 per output remain in the products (4x fewer), at
/// the price of the transforms' memory traffic and of U (36 x C x K floats, 4x W's size), which
/// every chunk reads: worthwhile with enough tiles per weight (worthwhile(), worthwhile_cached()).
/// Rounding differs from the direct sum (relative error ~1e-6..1e-5 of the outputs at
/// ResNet-50's shapes).
/// Not batch invariant: a chunk mixes images, and the chunks follow the batch size.
class WinogradF43Conv {
 public:
  /// The layer: N images of C channels, H x W pixels in and out, K output channels.
  struct Shape {
    int64_t n = 0, c = 0, k = 0, h = 0, w = 0;
    bool nhwc = false;  ///< X and Y in NHWC instead of nChw8c (the training backend's layout)
  };
  /// How transform_weights_into reads its weights: OIHW or OHWI (rn50's KRSC) of the forward
  /// conv, or the same tensors for the backward-data conv dX = conv(dY, W'), whose weights are
  /// W transposed and rotated: W'[c][k][r][q] = W[k][c][2 - r][2 - q].
  enum class WeightOrder { oihw, ohwi, oihw_bwd_data, ohwi_bwd_data };
  /// Most tiles per chunk: V and M of a 512-channel chunk are 4.5 MiB each; the prototype of
  /// this op (on oneDNN 2.6's gemm:jit, AVX2) ran 64-tile chunks faster than one whole-tensor
  /// product (bench/results/cpu/2026-11-27-avx2-epyc/own_winograd_f43_infer.md).
  static constexpr int64_t kMaxChunkTiles = 64;

  /// The transformed weights of W (K, C, 3, 3) f32 OIHW: U (36, C, K) f32, U[xi] = G g G^T at
  /// 6x6 position xi for every (c, k), each U[xi] (C x K, at xi x C x K) panel-packed as the
  /// products read it (gemm_f32_panels.h: panel_offset). Shared by the plans of every batch
  /// size of one layer.
  static std::shared_ptr<const aligned_vector<float>> transform_weights(const float* w, int64_t c,
                                                                     int64_t k);
  /// U (36, c, k) f32 (panel-packed as above) of the conv with c input and k output channels
  /// into `u`, from `w` read as `order` says (for the *_bwd_data orders w is the forward conv's
  /// (c, k, 3, 3) tensor, the forward conv's output channels being this conv's inputs). OpenMP
  /// over k.
  static void transform_weights_into(const float* w, int64_t c, int64_t k, WeightOrder order,
                                     float* u);

  /// The input transform of tiles [p0, p0 + rows) of x (N, C, H, W, nChw8c or NHWC as s says):
  /// V = B^T d B of each tile's 6x6 input d (zero outside the image) into v, the row of tile
  /// p0 + r at position xi being v[(xi * ld + r) * C ...] (ld >= rows rows per position), or
  /// with `pos_stride` (floats, at least ld x C; not with may_stream) v[xi * pos_stride + r * C
  /// ...]: a padded stride keeps a tile's 36 stores out of one cache set.
  /// With may_stream (the weight gradient, whose v is read once by a matmul much later) a v of
  /// more than 4 MiB (36 x ld x C floats) is written with non-temporal stores, through a
  /// staging block: it is left in memory, not in the caches. Without it (the forward's
  /// per-thread buffers, read from the caches by the products right after) v is written directly
  /// whatever its size.
  static void transform_input_tiles(const Shape& s, const float* x, int64_t p0, int64_t rows,
                                    float* v, int64_t ld, bool may_stream,
                                    int64_t pos_stride = 0);
  /// The weight gradient's transform of the output gradient dy (N, K, H, W, s's layout): Z = A
  /// g A^T of each 4x4 tile g of tiles [p0, p0 + rows) (zero outside the image; A = (A^T)^T)
  /// into z, laid out (and written) as transform_input_tiles's v with K channels, may_stream
  /// always (only the weight gradient calls it).
  static void transform_output_grad_tiles(const Shape& s, const float* dy, int64_t p0,
                                          int64_t rows, float* z, int64_t ld);
  /// The weight gradient dW (K, C, 3, 3) f32, `order` oihw or ohwi, from the products M (36, C,
  /// K) f32 = sum over all tiles of V[xi]^T Z[xi]: dW[k][c] = G^T M[., c, k] G. Since the
  /// forward tile is A^T (U . V) A with U = G g G^T, the chain rule gives dU = (A dY A^T) . V
  /// and dg = G^T dU G (Lavin and Gray's matrices). OpenMP over c. Throws rn50::Error for
  /// another order or k not a multiple of 8.
  static void weight_grad_from_products(const float* m, int64_t c, int64_t k, WeightOrder order,
                                        float* dw);

  /// The conv for `s`. `u` from transform_weights(_into) of the layer's weights; `bias` (K
  /// floats, or nullptr: none) is read at run time, not copied, as is U (it may be transformed
  /// again between runs, as training does). `accumulate` adds Y's previous contents (the
  /// residual) before the ReLU. Throws rn50::Error when C or K is not a multiple of 8 or U has
  /// another layer's size.
  WinogradF43Conv(const Shape& s, std::shared_ptr<const aligned_vector<float>> u, const float* bias,
                  bool relu, bool accumulate);
  ~WinogradF43Conv();
  WinogradF43Conv(const WinogradF43Conv&) = delete;
  WinogradF43Conv& operator=(const WinogradF43Conv&) = delete;

  /// Y from X (layouts above). Runs its own OpenMP parallel region; its threads' V and M live
  /// in per-thread scratch, so calls on other threads (another OpenMP team) may overlap.
  void run(const float* x, float* y);

  /// 4x4 output tiles of the layer: N x ceil(H / 4) x ceil(W / 4).
  static int64_t tiles(const Shape& s);
  /// Fewest tiles per chunk when the tiles are split over the threads: with fewer, each
  /// thread's products would read all of U for a few rows; the output channels are split
  /// instead.
  static constexpr int64_t kMinChunkTiles = 16;
  /// Fewest output channels per part (the products' columns).
  static constexpr int64_t kMinPartK = 64;
  /// How the work is divided: chunks of `chunk_tiles` tiles, each chunk's output channels in
  /// `k_parts` parts of K / k_parts channels (a multiple of 8), one (chunk, part) per task.
  struct Split {
    int64_t chunk_tiles = 1, k_parts = 1;
  };
  /// The tiles split evenly over the OpenMP threads, each thread as many equal chunks of at
  /// most kMaxChunkTiles tiles (set_winograd_chunk_tiles's override: chunks of exactly that,
  /// the last shorter), one part; when that gives chunks under kMinChunkTiles, whole chunks
  /// and as many output-channel parts as there are threads per chunk (fewer if K / 8 does not
  /// divide by that, or parts would have under kMinPartK channels).
  static Split split(const Shape& s);
  /// Whether this op is expected to beat oneDNN's direct AVX2 convolution for `s` with this
  /// process's OpenMP threads when U is transformed on every call (transform_weights_into
  /// before each run: the backend's forward and backward data in training; see the definition
  /// for the measurements): chunks of 48 tiles, or 16 up to 256 x 256 channels. False unless C
  /// and K are multiples of 8.
  static bool worthwhile(const Shape& s);
  /// The same when U is transformed once and kept (the inference engine's plans): chunks of 8
  /// tiles or more, of layers at least 4 x 4 outputs. False unless C and K are multiples of 8.
  static bool worthwhile_cached(const Shape& s);
  /// Whether the weight gradient (conv_winograd.h) is expected to beat im2col + matmuls for `s`
  /// (see the definition for the measurements). False unless C and K are multiples of 8.
  static bool weight_grad_worthwhile(const Shape& s);
  /// Bytes of U (36 x C x K floats).
  static size_t weight_bytes(const Shape& s) {
    return 36 * static_cast<size_t>(s.c) * static_cast<size_t>(s.k) * sizeof(float);
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Overrides the chunk size (tiles per chunk, at most kMaxChunkTiles) for this process: the
/// tests use it to run several chunks and a shorter last one on small shapes; std::nullopt
/// restores the default.
void set_winograd_chunk_tiles(std::optional<int64_t> tiles);

}  // namespace rn50::onednn
