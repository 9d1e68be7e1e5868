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

/// Wraps a tensor from a HostAllocator as a Storage of `bytes` bytes that keeps the tensor (and
/// so its memory) alive for as long as the Storage lives. Throws rn50::Error when the tensor is
/// smaller than `bytes` or not host memory.
inline std::shared_ptr<Storage> allocate_with(const HostAllocator& alloc, size_t bytes) {
  Tensor t = alloc({static_cast<int64_t>(bytes)}, DType::u8, Layout::NCHW);
  RN50_CHECK(t.defined() && t.nbytes() >= bytes && t.is_cpu(),
             "the loader's host allocator returned {} for a {}-byte batch buffer",
             t.defined() ? t.str() : std::string("an undefined tensor"), bytes);
  RN50_CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0,
             "the loader's host allocator returned memory that is not 64-byte aligned");
  auto* s = new Storage();
  s->ptr = t.data();
  s->bytes = bytes;
  return std::shared_ptr<Storage>(s, [t](Storage* p) { delete p; });  // the lambda owns t
}

/// A pool of batch storages that are reused once nobody else holds them: a storage is free when
/// the pool's shared_ptr is its only owner (the source dropped its handle after delivering the
/// batch and the consumer dropped every Tensor of it). Delivered batches are therefore zero-copy
/// and stay valid for as long as the consumer keeps them. Not thread-safe: callers serialise.
class BatchPool {
 public:
  /// `keep`: how many storages the pool retains at most while the consumer holds old batches.
  /// `alloc`: where new storages come from (empty = allocate_host_storage).
  BatchPool(BatchLayout layout, size_t keep, HostAllocator alloc = {})
      : layout_(layout), keep_(keep), alloc_(std::move(alloc)) {}
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
    pool_.push_back(alloc_ ? allocate_with(alloc_, layout_.total_bytes())
                           : allocate_host_storage(layout_.total_bytes()));
    ++allocations_;
    return pool_.back();
  }
  /// Allocates storages until the pool holds `n` (the steady-state demand), so that a loader's
  /// allocations happen up front instead of whenever timing first needs one more.
  void reserve(size_t n) {
    while (pool_.size() < n) {
      pool_.push_back(alloc_ ? allocate_with(alloc_, layout_.total_bytes())
                             : allocate_host_storage(layout_.total_bytes()));
      ++allocations_;
    }
  }
  const BatchLayout& layout() const { return layout_; }
  /// Storages allocated so far (flat after the first epoch unless the consumer hoards batches).
  int64_t allocations() const { return allocations_; }

 private:
  BatchLayout layout_;
  size_t keep_;
  HostAllocator alloc_;
  std::vector<std::shared_ptr<Storage>> pool_;
  int64_t allocations_ = 0;
};

}  // namespace rn50::data
