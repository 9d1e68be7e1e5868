// Data-parallel sharding (data/shard.h and LoaderOptions::rank / world_size): for many (N, world,
// batch) the ranks' shards are disjoint, every rank has the same number of batches, train with
// drop_last uses floor(N / world) distinct samples per rank, and val covers every sample exactly
// once with no padding counted; end to end through the loader with one class per file.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/shard.h"
#include "data_test_util.h"
#include "rn50/data.h"

using namespace rn50;
using namespace rn50::data;
using namespace rn50::testutil;

namespace {

TEST(Shard, PlansAreDisjointEqualAndCovering) {
  int cases = 0;
  for (int64_t n : {1, 2, 5, 7, 16, 23, 64, 100, 1001}) {
    for (int world : {1, 2, 3, 4, 7, 8}) {
      for (int64_t batch : {1, 3, 4, 32}) {
        for (int mode = 0; mode < 3; ++mode) {  // train drop_last, train keep, val
          const bool train = mode < 2, drop = mode == 0;
          SCOPED_TRACE(testing::Message() << "n " << n << " world " << world << " batch " << batch
                                          << " mode " << mode);
          if (drop && (n / world) / batch == 0) {
            EXPECT_EQ(make_shard_plan(n, 0, world, batch, train, drop).batches, 0);
            continue;
          }
          std::map<int64_t, int> uses;  // position -> times used across ranks
          int64_t batches = -1, valid = 0;
          for (int r = 0; r < world; ++r) {
            const ShardPlan p = make_shard_plan(n, r, world, batch, train, drop);
            if (batches < 0) batches = p.batches;
            EXPECT_EQ(p.batches, batches) << "rank " << r;  // equal batch counts
            EXPECT_GT(p.batches, 0);
            int64_t rank_valid = 0;
            for (int64_t b = 0; b < p.batches; ++b) {
              EXPECT_GE(p.batch_rows(b), 1);
              EXPECT_LE(p.batch_rows(b), batch);
              if (drop) {
                EXPECT_EQ(p.batch_rows(b), batch);
              }
              rank_valid += p.valid_rows(b);
              for (int64_t k = b * batch; k < b * batch + p.batch_rows(b); ++k) {
                const int64_t pos = p.position(k);
                if (pos < 0) {
                  EXPECT_FALSE(train);
                  EXPECT_EQ(b, p.batches - 1) << "padding only in the last batch";
                  continue;
                }
                ASSERT_LT(pos, n);
                ++uses[pos];
              }
            }
            valid += rank_valid;
            if (drop) {
              EXPECT_EQ(rank_valid, (n / world) / batch * batch);
            }
          }
          if (train && drop) {
            for (const auto& [pos, u] : uses) EXPECT_EQ(u, 1) << "position " << pos;
            EXPECT_EQ(int64_t(uses.size()), valid);
          } else if (train) {  // every position at least once; wrapping repeats few
            EXPECT_EQ(int64_t(uses.size()), n);
            const int64_t per_rank = (n + world - 1) / world;
            EXPECT_EQ(valid, per_rank * world);
            for (const auto& [pos, u] : uses) EXPECT_LE(u, (per_rank * world + n - 1) / n);
          } else {  // val: every position exactly once, no padding counted
            EXPECT_EQ(int64_t(uses.size()), n);
            for (const auto& [pos, u] : uses) EXPECT_EQ(u, 1) << "position " << pos;
            EXPECT_EQ(valid, n);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

TEST(Shard, RejectsBadRanks) {
  EXPECT_THROW(make_shard_plan(10, 2, 2, 1, true, true), Error);
  EXPECT_THROW(make_shard_plan(10, -1, 2, 1, true, true), Error);
  EXPECT_THROW(make_shard_plan(10, 0, 0, 1, true, true), Error);
  EXPECT_THROW(make_shard_plan(10, 0, 1, 0, true, true), Error);
}

/// n class folders with one small JPEG each: a label identifies its file.
std::string make_unique_classes(const TempDir& dir, int n) {
  for (int i = 0; i < n; ++i) {
    write_jpeg(dir.path + "/c" + std::to_string(1000 + i) + "/x.jpg", 20 + i % 5, 16, uint64_t(i));
  }
  return dir.path;
}

TEST(Shard, LoaderRanksCoverTheEpochWithEqualBatchCounts) {
  TempDir dir("shard");
  const int n = 23;
  make_unique_classes(dir, n);
  for (int world : {1, 2, 3, 4}) {
    for (int batch : {2, 3}) {
      SCOPED_TRACE(testing::Message() << "world " << world << " batch " << batch);
      for (Split split : {Split::train, Split::val}) {
        std::multiset<int> labels;
        int64_t batches = -1;
        for (int r = 0; r < world; ++r) {
          LoaderOptions o;
          o.batch_size = batch;
          o.crop_size = 8;
          o.resize_short = 9;
          o.workers = 2;
          o.seed = 4;
          o.rank = r;
          o.world_size = world;
          o.drop_last = split == Split::train;
          auto src = make_image_folder_source(dir.path, split, o);
          if (batches < 0) batches = src->batches_per_epoch();
          EXPECT_EQ(src->batches_per_epoch(), batches);
          src->start_epoch(3);
          Batch b;
          int64_t got = 0;
          while (src->next(b)) {
            ++got;
            for (int64_t i = 0; i < b.size; ++i) labels.insert(b.labels.data_as<int32_t>()[i]);
          }
          EXPECT_EQ(got, batches) << "rank " << r;
          if (split == Split::train) {
            EXPECT_EQ(batches, (n / world) / batch);
          }
        }
        if (split == Split::val) {  // every file exactly once across the ranks
          std::multiset<int> all;
          for (int i = 0; i < n; ++i) all.insert(i);
          EXPECT_EQ(labels, all);
        } else {  // disjoint: no file twice in one epoch across the ranks
          for (int l : labels) EXPECT_EQ(labels.count(l), 1u) << "label " << l;
          EXPECT_EQ(int64_t(labels.size()), int64_t(world) * batches * batch);
        }
      }
    }
  }
}

TEST(Shard, AugmentationDoesNotDependOnTheWorldSize) {
  // Rank r of w processes epoch positions r, r + w, ...: the sample at a position gets the same
  // crop and flip whatever w is (the rng is keyed by the global position).
  TempDir dir("shard_aug");
  make_unique_classes(dir, 12);
  auto batches_of = [&](int rank, int world) {
    LoaderOptions o;
    o.batch_size = 1;
    o.crop_size = 8;
    o.workers = 1;
    o.seed = 2;
    o.rank = rank;
    o.world_size = world;
    auto src = make_image_folder_source(dir.path, Split::train, o);
    src->start_epoch(1);
    std::vector<Tensor> out;
    Batch b;
    while (src->next(b)) out.push_back(b.images.clone());
    return out;
  };
  const auto single = batches_of(0, 1);
  const auto r1 = batches_of(1, 3);
  ASSERT_EQ(r1.size(), 4u);
  for (size_t k = 0; k < r1.size(); ++k) {  // rank 1 of 3, slot k = position 1 + 3k
    EXPECT_EQ(std::memcmp(r1[k].data(), single[1 + 3 * k].data(), r1[k].nbytes()), 0) << k;
  }
}

}  // namespace
