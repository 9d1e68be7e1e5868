// rn50: what the Winograd ops (winograd_f43.h, winograd_f23_bf16.h) share: the bf16 op's batched
// products of its chunks of tiles (one oneDNN matmul per chunk on the thread that transformed
// it; the f32 op has its own panel GEMM, gemm_f32_panels.h), the walk over the weights their
// weight transforms read and the walk over the products their weight gradients read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <dnnl.hpp>

#include "core/aligned.h"
#include "core/bf16.h"

namespace rn50::onednn {

/// M[xi] (rows x kt, f32) = V[xi] (rows x C, `src` dtype) . U[xi] (C x kt) for every position
/// xi of a transformed tile, as one oneDNN batched matmul: V (positions, rows, C) and M
/// (positions, rows, kt) dense, U as `u` describes it (positions, C, kt, any strides). Built
/// for chunks of `chunk` rows and a last one of `last` rows (one primitive when equal), each
/// thread of `threads` with its own stream and scratchpad, so that a thread of an OpenMP
/// parallel region runs its chunk's products on its own core (oneDNN runs a primitive called
/// from inside a parallel region on the calling thread alone). Throws dnnl::error when oneDNN
/// cannot build the matmul.
class ChunkProducts {
 public:
  ChunkProducts(const dnnl::engine& eng, const dnnl::memory::desc& u,
                dnnl::memory::data_type src, int64_t chunk, int64_t last, int threads);
  /// The products of a chunk of `rows` rows (the full chunk's or the last's) on thread `t`:
  /// V at v, U in u (of the desc given at construction), M at m; returns when M is written.
  void run(int t, int64_t rows, void* v, const dnnl::memory& u, float* m);

 private:
  dnnl::engine eng_;
  int64_t positions_, c_, kt_, chunk_;
  dnnl::memory::data_type src_;
  dnnl::matmul mm_[2];  ///< the full chunk's [0] and the shorter last one's [1]
  dnnl::memory::desc scratch_desc_[2];
  std::vector<aligned_vector<char>> scratch_;  ///< per thread
  std::vector<dnnl::stream> streams_;       ///< per thread
};

/// Output channels per block of for_each_kernel_block.
constexpr int64_t kKernelBlock = 16;

/// The weight transforms' walk over a 3x3 conv's kernels: fn(k0, nl, ci, g) for every block
/// [k0, k0 + nl) of at most kKernelBlock output channels of the conv with c input and k output
/// channels and every input channel ci, g[r][q][l] (float[3][3][kKernelBlock], zero past nl)
/// holding tap (r, q) from input channel ci to output channel k0 + l, read from the stored
/// weights `w` (f32 or bf16 bits, widened exactly): OIHW, or OHWI with `ohwi`; with `bwd_data`
/// the forward conv's (c, k, 3, 3) tensor read transposed and rotated by 180 degrees,
/// W'[ci][ko][r][q] = W[ko][ci][2 - r][2 - q] (the backward-data conv's kernels). Each thread
/// its own blocks, the input channels in order within a block, so that the block's taps read
/// from w advance through it in step. OpenMP over the blocks.
template <class T, class Fn>
void for_each_kernel_block(const T* w, int64_t c, int64_t k, bool bwd_data, bool ohwi, Fn fn) {
  const int64_t cs = bwd_data ? k : c;  // the stored tensor's input channels
#pragma omp parallel for schedule(static)
  for (int64_t k0 = 0; k0 < k; k0 += kKernelBlock)
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t nl = std::min(kKernelBlock, k - k0);
      float g[3][3][kKernelBlock] = {};
      for (int64_t l = 0; l < nl; ++l) {
        const int64_t ko = k0 + l;
        const int64_t so = bwd_data ? ci : ko, si = bwd_data ? ko : ci;  // in the stored tensor
        for (int r = 0; r < 3; ++r)
          for (int q = 0; q < 3; ++q) {
            const int rr = bwd_data ? 2 - r : r, qq = bwd_data ? 2 - q : q;
            g[r][q][l] = widen(ohwi ? w[((so * 3 + rr) * 3 + qq) * cs + si]
                                    : w[(so * cs + si) * 9 + rr * 3 + qq]);
          }
      }
      fn(k0, nl, ci, g);
    }
}

/// Output channels per block of for_each_product_block.
constexpr int64_t kProductBlock = 64;

/// The weight gradients' walk over their products M (P, C, K) f32: fn(ci, kb, nb, mt) for
/// every input channel ci and block [kb, kb + nb) of at most kProductBlock output channels,
/// mt[xi][l] (float[P][kProductBlock]) holding M[xi][ci][kb + l]. The P rows of a block are
/// copied out whole first: read a few channels at a time, those rows, C x K floats apart (a
/// multiple of 4 KiB at ResNet's widths), fall into one cache set and evict each other. OpenMP
/// over ci.
template <int P, class Fn>
void for_each_product_block(const float* m, int64_t c, int64_t k, Fn fn) {
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t kb = 0; kb < k; kb += kProductBlock) {
      const int64_t nb = std::min(kProductBlock, k - kb);
      alignas(64) float mt[P][kProductBlock];
      for (int xi = 0; xi < P; ++xi)
        std::memcpy(mt[xi], m + (xi * c + ci) * k + kb, static_cast<size_t>(nb) * sizeof(float));
      fn(ci, kb, nb, mt);
    }
}

}  // namespace rn50::onednn
