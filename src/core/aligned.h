// rn50: host vectors whose data starts on a 64-byte boundary (a cache line, an AVX-512 vector).
// A plain std::vector gets its large blocks from malloc's mmap path, which starts them 16 bytes
// into a page: every 64-byte load and store of a kernel then spans two cache lines, which
// measured slower (bench/results/cpu/2026-12-03-zen5-epyc/aligned_buffers.md). Use these for
// activation buffers, packed operands and per-thread scratch that kernels stream through.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace rn50 {

/// std::allocator with 64-byte alignment (operator new's aligned form). Throws std::bad_alloc
/// as std::allocator does.
template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  static constexpr std::size_t kAlignment = 64;

  CacheAlignedAllocator() noexcept = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kAlignment}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t{kAlignment});
  }
  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const noexcept {
    return true;
  }
};

/// A std::vector whose data() is 64-byte aligned (zero-initialised on resize, as std::vector).
template <class T>
using aligned_vector = std::vector<T, CacheAlignedAllocator<T>>;

}  // namespace rn50
