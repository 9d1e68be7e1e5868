// rn50: a bf16 3x3 stride-1 pad-1 convolution on NHWC activations as Winograd F(2x2, 3x3) on
// oneDNN's batched bf16 matmul, for CPUs with AVX-512 BF16 and no AMX, where oneDNN 2.6 has no
// bf16 Winograd, and the transforms of its weight gradient (see winograd_f23_bf16.cpp; the
// training driver: conv_winograd.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include <dnnl.hpp>

#include "backend/cpu/winograd_f43.h"

namespace rn50::onednn {

/// y = conv3x3(x, w) with stride 1 and zero padding 1, all bf16, computed as Winograd F(2x2,
/// 3x3) (Lavin and Gray 2016, "Fast Algorithms for Convolutional Neural Networks", the B^T, G
/// and A^T of their section 4.1): every 2x2 output tile (P = N ceil(H/2) ceil(W/2) tiles) reads
/// a 4x4 input tile d; V = B^T d B (in f32, rounded once to bf16) and U = G g G^T
/// (transform_weights_into, rounded once to bf16) turn the conv into 16 products M[xi] (P x K,
/// f32 sums) = V[xi] (P x C) . U[xi] (C x K), and each tile's output A^T m A is rounded once
/// to bf16. The tiles are taken in equal chunks per OpenMP thread (chunk_tiles): each thread
/// transforms its chunk's inputs into its own V, runs the 16 products as one oneDNN batched
/// matmul on its own core and transforms the products straight into y, so V and M stay in its
/// caches.
///   x: (N, C, H, W) bf16 NHWC;  y: (N, K, H, W) bf16 NHWC;  C and K multiples of 16.
///   u: (16, C, K) bf16 from transform_weights_into.
/// 4 multiply-adds of the direct conv's 9 per output remain in the products (16 per 2x2 tile
/// and input channel; 2.25x fewer). Rounding: the transformed operands are rounded to bf16, so the relative RMS error
/// of an output is about twice the direct bf16 conv's (3.6-3.8e-3 against 1.7e-3 of float64 at
/// ResNet-50's 7x7 to 28x28 shapes, random post-ReLU inputs, Kaiming weights; F(4x4, 3x3)'s
/// larger transforms gave 1.6-2.1e-2 and are not used in bf16). Not batch invariant: a chunk
/// mixes images.
class WinogradF23Bf16 {
 public:
  /// The layer: N images of C channels, H x W pixels in and out, K output channels.
  struct Shape {
    int64_t n = 0, c = 0, k = 0, h = 0, w = 0;
  };
  using WeightOrder = WinogradF43Conv::WeightOrder;
  /// Most bytes of V and M per chunk (16 x tiles x (2 C + 4 K)); see the definition of
  /// chunk_tiles for the measurements.
  static constexpr int64_t kChunkBytes = int64_t{2} << 20;

  /// Whether this CPU runs the op (cpu_info(), core/cpu_info.h): AVX-512 with BF16, no AMX.
  static bool built();
  /// Whether the op takes `s`: built, C and K multiples of 16, a non-empty image.
  static bool fits(const Shape& s);
  /// Whether the op is expected to beat oneDNN's direct bf16 kernel for `s` with this process's
  /// OpenMP threads: fits(s) and at least kMinTilesPerThread tiles per thread (see the
  /// definition for the measurements; the output-size rule is conv_own_winograd_bf16_allowed's).
  static bool worthwhile(const Shape& s);
  /// Fewest tiles per thread worthwhile asks for.
  static constexpr int64_t kMinTilesPerThread = 128;
  /// 2x2 output tiles of the layer: N x ceil(H / 2) x ceil(W / 2).
  static int64_t tiles(const Shape& s);
  /// Tiles per chunk with this process's OpenMP threads: each thread's even share of the
  /// tiles in as many equal chunks of at most kChunkBytes (set_winograd_f23_chunk_tiles's
  /// override: chunks of exactly that, the last shorter).
  static int64_t chunk_tiles(const Shape& s);
  /// bf16 elements of U: 16 x C x K.
  static size_t weight_elems(const Shape& s) {
    return 16 * static_cast<size_t>(s.c) * static_cast<size_t>(s.k);
  }

  /// U (16, c, k) bf16 of the conv with c input and k output channels into `u`: U[xi] = G g G^T
  /// at 4x4 position xi for every (ci, ko), summed in f32 and rounded once, from the bf16
  /// weights `w` read as `order` says (for the *_bwd_data orders `w` is the forward conv's
  /// (c, k, 3, 3) tensor, transposed and rotated: W'[ci][ko][r][q] = W[ko][ci][2-r][2-q]).
  /// OpenMP over k.
  static void transform_weights_into(const uint16_t* w, int64_t c, int64_t k, WeightOrder order,
                                     uint16_t* u);
  /// The same from f32 weights (the inference engine's, BN folded in): U rounded once.
  static void transform_weights_into(const float* w, int64_t c, int64_t k, WeightOrder order,
                                     uint16_t* u);

  /// The input transform of tiles [p0, p0 + rows) of x (N, H, W, C) bf16 NHWC: V = B^T d B of
  /// each tile's 4x4 input d (zero outside the image; B^T's rows (1 0 -1 0), (0 1 1 0),
  /// (0 -1 1 0), (0 1 0 -1)), summed in f32 and rounded once to bf16, into v, the row of tile
  /// p0 + r at position xi being v[(xi ld + r) C ...] (ld >= rows rows per position).
  static void transform_input_tiles(const Shape& s, const uint16_t* x, int64_t p0, int64_t rows,
                                    uint16_t* v, int64_t ld);
  /// The weight gradient's transform of the output gradient dy (N, H, W, K) bf16 NHWC: Z = A g
  /// A^T of each 2x2 tile g of tiles [p0, p0 + rows) (zero outside the image; A = (A^T)^T,
  /// A^T's rows (1 1 1 0), (0 1 -1 -1)), rounded once to bf16, into z laid out as
  /// transform_input_tiles's v with K channels.
  static void transform_output_grad_tiles(const Shape& s, const uint16_t* dy, int64_t p0,
                                          int64_t rows, uint16_t* z, int64_t ld);
  /// The weight gradient dW (K, C, 3, 3) bf16, `order` oihw or ohwi, from the products M (16,
  /// C, K) f32 = sum over all tiles of V[xi]^T Z[xi]: dW[k][c] = G^T M[., c, k] G, summed in f32
  /// and rounded once. The forward tile being A^T (U . V) A with U = G g G^T, the chain rule
  /// gives dU = (A dY A^T) . V and dg = G^T dU G (Lavin and Gray's matrices). OpenMP over c.
  /// Throws rn50::Error for another order.
  static void weight_grad_from_products(const float* m, int64_t c, int64_t k, WeightOrder order,
                                        uint16_t* dw);

  /// What the output transform adds before its rounding (the inference engine's fused conv):
  /// y = ReLU?(conv + bias (+ y)).
  struct Epilogue {
    const float* bias = nullptr;  ///< K f32 values read at run time, or nullptr: none
    bool relu = false;
    bool accumulate = false;  ///< add y's previous contents (the residual) before the ReLU
  };

  /// Builds the matmul primitives and per-thread buffers for `s` with epilogue `ep` (none
  /// without it). Throws rn50::Error when !fits(s), dnnl::error when oneDNN cannot build the
  /// matmul.
  WinogradF23Bf16(const dnnl::engine& eng, const Shape& s, const Epilogue& ep);
  WinogradF23Bf16(const dnnl::engine& eng, const Shape& s);
  ~WinogradF23Bf16();
  WinogradF23Bf16(const WinogradF23Bf16&) = delete;
  WinogradF23Bf16& operator=(const WinogradF23Bf16&) = delete;

  /// y (overwritten, or added to with Epilogue::accumulate) from x with the transformed
  /// weights u (layouts above). Runs its own OpenMP
  /// parallel region; not re-entrant (the per-thread buffers are the object's).
  void run(const uint16_t* u, const uint16_t* x, uint16_t* y);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Overrides the chunk size (tiles per chunk, at least 1) for this process: the tests use it
/// to run several chunks and a shorter last one on small shapes; std::nullopt restores the
/// default.
void set_winograd_f23_chunk_tiles(std::optional<int64_t> tiles);

}  // namespace rn50::onednn
