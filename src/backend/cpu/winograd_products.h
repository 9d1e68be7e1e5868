// rn50: the batched products of the Winograd ops' chunks of tiles (winograd_f43.h,
// winograd_f23_bf16.h), one oneDNN matmul per chunk on the thread that transformed it.
#pragma once

#include <cstdint>
#include <vector>

#include <dnnl.hpp>

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
  std::vector<std::vector<char>> scratch_;  ///< per thread
  std::vector<dnnl::stream> streams_;       ///< per thread
};

}  // namespace rn50::onednn
