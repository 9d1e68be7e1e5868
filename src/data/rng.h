// rn50 data: deterministic random numbers for augmentation and shuffling.
//
// Augmentation randomness is counter-based: every sample draws from its own small generator keyed
// by (seed, epoch, position in the epoch, stream), so the result never depends on which worker
// thread decoded the sample or in which order samples were processed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace rn50::data {

/// SplitMix64 finaliser (Steele, Lea, Flood 2014; the seeding function of xoshiro): a bijective
/// 64-bit mixer with full avalanche, used to derive independent keys from small integers.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Unbiased integer in [0, range) from a 64-bit generator `next` (Lemire 2019, "Fast random
/// integer generation in an interval", multiply-shift with rejection). range must be >= 1.
template <class Next>
uint64_t bounded_u64(uint64_t range, Next&& next) {
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * range;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < range) {
    const uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * range;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

/// Per-sample generator: a SplitMix64 stream whose starting state is a hash of
/// (seed, epoch, index, stream). Cheap to construct (no state table), statistically good for the
/// handful of draws an augmentation needs, and identical on every platform.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t stream = 0)
      : state_(mix64(mix64(mix64(mix64(seed ^ 0x5851f42d4c957f2dULL) ^ epoch) ^ index) ^ stream)) {}

  /// Next 64 random bits (SplitMix64 step).
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  /// Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform double in [lo, hi) (torch.empty(1).uniform_(lo, hi) semantics).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [lo, hi] inclusive (torch.randint(lo, hi + 1) semantics). hi >= lo.
  int64_t randint(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(bounded_u64(range, [this] { return next(); }));
  }

 private:
  uint64_t state_;
};

/// The permutation of [0, n) used for epoch `epoch`: Fisher-Yates driven by std::mt19937_64
/// seeded with a hash of (seed, epoch), with Lemire's unbiased bounded integers (not
/// std::uniform_int_distribution, whose algorithm differs between standard libraries), so the
/// order is the same on every platform.
inline std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  std::mt19937_64 eng(mix64(mix64(seed ^ 0x2545f4914f6cdd1dULL) ^ epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(bounded_u64(static_cast<uint64_t>(i) + 1, eng));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

/// The training order of an epoch of samples stored in shards (TFRecord, WebDataset), as
/// WebDataset's shuffle: the shards in a random order of (seed, epoch), their samples streamed
/// in sequence through a shuffle buffer of `buffer` samples (each incoming sample replaces a
/// random one of the full buffer, which is emitted; the rest leaves in random order at the
/// end). `starts`: the first sample of each shard (ascending, from 0); n: all samples. Reads
/// stay within about `buffer` samples of the shard stream. buffer <= 1: shards shuffled only.
inline std::vector<int64_t> shard_shuffle_order(int64_t n, const std::vector<int64_t>& starts,
                                                int64_t buffer, uint64_t seed, uint64_t epoch) {
  const std::vector<int64_t> shards =
      epoch_permutation(static_cast<int64_t>(starts.size()), seed, epoch);
  std::mt19937_64 eng(mix64(mix64(seed ^ 0x9e3779b97f4a7c15ULL) ^ epoch));
  std::vector<int64_t> out, pool;
  out.reserve(static_cast<size_t>(n));
  pool.reserve(static_cast<size_t>(std::max<int64_t>(buffer, 1)));
  for (int64_t s : shards) {
    const int64_t end = s + 1 < static_cast<int64_t>(starts.size())
                            ? starts[static_cast<size_t>(s + 1)]
                            : n;
    for (int64_t i = starts[static_cast<size_t>(s)]; i < end; ++i) {
      if (static_cast<int64_t>(pool.size()) < std::max<int64_t>(buffer, 1)) {
        pool.push_back(i);
        continue;
      }
      const auto j = static_cast<size_t>(bounded_u64(pool.size(), eng));
      out.push_back(pool[j]);
      pool[j] = i;
    }
  }
  while (!pool.empty()) {  // drain in random order
    const auto j = static_cast<size_t>(bounded_u64(pool.size(), eng));
    out.push_back(pool[j]);
    pool[j] = pool.back();
    pool.pop_back();
  }
  return out;
}


}  // namespace rn50::data
