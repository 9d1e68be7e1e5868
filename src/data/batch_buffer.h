// rn50 data: reusable host memory for batches (images + labels in one allocation).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/check.h"
#include "rn50/data.h"
#include "rn50/tensor.h"

namespace rn50::data {

/// One 64-byte-aligned allocation holding a batch: images u8 (N, 3, crop, crop) Layout::NHWC at
/// offset 0, then labels i32 (N) at the next 64-byte boundary.
struct BatchLayout {
  int64_t n = 0;
  int crop = 0;
  size_t image_bytes() const { return static_cast<size_t>(n) * 3 * crop * crop; }
  size_t label_offset() const { return (image_bytes() + 63) / 64 * 64; }
  size_t total_bytes() const { return label_offset() + static_cast<size_t>(n) * 4; }
};

/// Allocates an owning host Storage of `bytes` (64-byte aligned, uninitialised).
inline std::shared_ptr<Storage> allocate_host_storage(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  RN50_CHECK(p != nullptr, "out of host memory allocating a {}-byte batch buffer", bytes);
  auto s = std::make_shared<Storage>();
  s->ptr = p;
  s->bytes = bytes;
  s->deleter = &std::free;
  return s;
}

/// Wraps a batch storage as the Batch tensors (shared ownership: the batch keeps the memory
/// alive after the source recycles or drops its handle).
inline Batch batch_from_storage(const std::shared_ptr<Storage>& s, const BatchLayout& l,
                                int64_t size) {
  Batch b;
  b.images = Tensor::from_storage(s, 0, {l.n, 3, l.crop, l.crop}, DType::u8, Layout::NHWC);
  b.labels = Tensor::from_storage(s, l.label_offset(), {l.n}, DType::i32, Layout::NCHW);
  b.size = size;
  return b;
}

/// A pool of batch storages that are reused once nobody else holds them: a storage is free when
/// the pool's shared_ptr is its only owner (the source dropped its handle after delivering the
/// batch and the consumer dropped every Tensor of it). Delivered batches are therefore zero-copy
/// and stay valid for as long as the consumer keeps them. Not thread-safe: callers serialise.
class BatchPool {
 public:
  /// `keep`: how many storages the pool retains at most while the consumer holds old batches.
  BatchPool(BatchLayout layout, size_t keep) : layout_(layout), keep_(keep) {}
  /// A storage nobody else refers to: reused when possible, else newly allocated.
  std::shared_ptr<Storage> acquire() {
    for (auto& s : pool_) {
      if (s.use_count() == 1) {
        // Pairs with the release in the last holder's shared_ptr decrement: its accesses to the
        // buffer happen before we refill it.
        std::atomic_thread_fence(std::memory_order_acquire);
        return s;
      }
    }
    // Over budget: forget storages still held elsewhere (their holders free them later).
    if (pool_.size() >= keep_) {
      std::erase_if(pool_, [](const std::shared_ptr<Storage>& s) { return s.use_count() > 1; });
    }
    pool_.push_back(allocate_host_storage(layout_.total_bytes()));
    return pool_.back();
  }
  const BatchLayout& layout() const { return layout_; }

 private:
  BatchLayout layout_;
  size_t keep_;
  std::vector<std::shared_ptr<Storage>> pool_;
};

}  // namespace rn50::data
