// rn50 data: which samples of an epoch one data-parallel rank processes, and how they form
// batches.
//
// Every rank computes the same epoch order (a permutation of the N samples for train, file order
// for val) and takes the positions p = rank + k * world, k = 0, 1, 2, ... (strided, as PyTorch's
// DistributedSampler), so the ranks' shards are disjoint and together cover the order.
//  * train, drop_last (DLE): each rank takes floor(N / world) positions (the N mod world last
//    positions of the permutation are dropped this epoch -- different samples every epoch) and
//    makes floor(floor(N / world) / batch) full batches; the rest is dropped, as DLE drops the
//    last partial batch. DistributedSampler instead pads the order to a multiple of world by
//    repeating its first samples, and DALI's sharded readers give ranks contiguous slices of
//    possibly unequal size; dropping keeps every sample of an epoch distinct and the batch count
//    identical on every rank without repeats.
//  * train, no drop_last: each rank takes ceil(N / world) positions, wrapping past the end of the
//    order to its beginning (DistributedSampler's padding), and the last batch may be short (the
//    same size on every rank).
//  * val: each rank has ceil(N / world) slots; slot k holds position rank + k * world when that
//    is < N, and is empty (padding, never counted) otherwise -- only a rank's last slot can be
//    empty. Batches: ceil(ceil(N / world) / batch) on every rank; a batch's valid rows come first,
//    so the evaluation covers every sample exactly once across the ranks.
//  * train from shards (`contiguous`: TFRecord and WebDataset, whose epoch order reads shards
//    mostly in sequence, data/epoch_order.h): rank r takes the contiguous positions
//    [r * floor(N / world), (r + 1) * floor(N / world)) instead, so each rank reads whole shards
//    (split only at the block boundaries), as WebDataset and DALI shard by file.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/check.h"

namespace rn50::data {

struct ShardPlan {
  int64_t n = 0;  ///< samples in the split
  int rank = 0, world = 1;
  int64_t batch = 1;
  bool train = true;
  bool drop_last = true;  ///< train only
  bool contiguous = false;  ///< train with drop_last: contiguous blocks per rank, not strided
  int64_t slots = 0;      ///< per-rank slots per epoch (batches * batch, or fewer: short last)
  int64_t batches = 0;    ///< per-rank batches per epoch, equal on every rank

  /// Epoch-order position of this rank's slot k (0 <= k < slots), or -1 for an empty val slot.
  int64_t position(int64_t k) const {
    if (train && contiguous) return rank * (n / world) + k;
    const int64_t p = rank + k * world;
    if (train) return drop_last ? p : p % n;
    return p < n ? p : -1;
  }
  /// Rows of batch b (the last one may be short when !drop_last or val).
  int64_t batch_rows(int64_t b) const { return std::min(batch, slots - b * batch); }
  /// Valid rows of batch b (val: empty slots excluded; they are at the end of the last batches).
  int64_t valid_rows(int64_t b) const {
    int64_t v = 0;
    for (int64_t k = b * batch, e = k + batch_rows(b); k < e; ++k) v += position(k) >= 0;
    return v;
  }
};

/// Throws rn50::Error for bad arguments or when a rank would get no batch.
inline ShardPlan make_shard_plan(int64_t n, int rank, int world, int64_t batch, bool train,
                                 bool drop_last, bool contiguous = false) {
  RN50_CHECK(world >= 1 && rank >= 0 && rank < world,
             "invalid data-parallel rank {} of world size {}", rank, world);
  RN50_CHECK(batch >= 1, "batch size must be positive (got {})", batch);
  RN50_CHECK(n >= 1, "the dataset is empty");
  ShardPlan s;
  s.n = n;
  s.rank = rank;
  s.world = world;
  s.batch = batch;
  s.train = train;
  s.drop_last = train && drop_last;
  s.contiguous = s.drop_last && contiguous;
  if (s.drop_last) {
    const int64_t per_rank = n / world;
    s.batches = per_rank / batch;
    s.slots = s.batches * batch;
  } else {
    s.slots = (n + world - 1) / world;
    s.batches = (s.slots + batch - 1) / batch;
  }
  return s;
}

}  // namespace rn50::data
