// The loader as the trainer uses it (fast decoding by default): every kind of bad file skipped,
// logged and counted (train) or left out without duplicates (val); the abort past
// max_bad_fraction with the list of bad files; determinism across worker counts and runs;
// batch buffers from the caller's allocator, reused so memory stays flat across epochs; worker
// CPU pinning.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data_test_util.h"
#include "rn50/data.h"
#include "sanitizer_build.h"

using namespace rn50;
using namespace rn50::testutil;

namespace {

/// Every bad kind of file the issue names, each in its own class folder "bad_<kind>", plus
/// good-but-unusual files (CMYK, gray, progressive, PNG behind a .JPEG name, 1x1 images) and
/// plain ones, one per class folder "good_<n>", so labels identify files. Returns the number of
/// bad files; `good` receives the good class names.
int make_zoo(const std::string& root, std::vector<std::string>& good) {
  const std::vector<uint8_t> jpg = make_jpeg(150, 110, 1);
  const std::vector<uint8_t> png = make_png(64, 48, 2);
  std::mt19937 g(5);
  std::vector<uint8_t> random(4000);
  for (auto& b : random) b = uint8_t(g());
  random[0] = 0x00;
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> bad = {
      {"zero_bytes", {}},
      {"truncated", std::vector<uint8_t>(jpg.begin(), jpg.begin() + long(jpg.size() / 2))},
      {"random_bytes", random},
      {"header_only", std::vector<uint8_t>(jpg.begin(), jpg.begin() + 300)},
      {"truncated_png", std::vector<uint8_t>(png.begin(), png.begin() + long(png.size() / 3))},
  };
  for (const auto& [kind, bytes] : bad) {
    write_bytes(root + "/bad_" + kind + "/img.JPEG", bytes.data(), bytes.size());
  }
  std::vector<std::vector<uint8_t>> goods = {
      make_jpeg(120, 90, 3, TJPF_CMYK, TJSAMP_444),
      make_jpeg(120, 90, 4, TJPF_GRAY, TJSAMP_GRAY),
      make_jpeg(333, 250, 5, TJPF_RGB, TJSAMP_420, 90, TJFLAG_PROGRESSIVE),
      make_jpeg(200, 150, 6, TJPF_RGB, TJSAMP_422),
      png,
      make_jpeg(1, 1, 7),
      make_png(1, 1, 8),
      make_jpeg(700, 500, 9)};
  for (int i = 0; i < 17; ++i) goods.push_back(make_jpeg(90 + 7 * i, 70 + 3 * i, 100 + i));
  for (size_t i = 0; i < goods.size(); ++i) {
    const std::string cls = "good_" + std::to_string(100 + i);
    write_bytes(root + "/" + cls + "/img.JPEG", goods[i].data(), goods[i].size());
    good.push_back(cls);
  }
  return int(bad.size());
}

LoaderOptions opts(int workers, bool exact) {
  LoaderOptions o;
  o.batch_size = 4;
  o.crop_size = 24;
  o.resize_short = 28;
  o.workers = workers;
  o.seed = 9;
  o.exact_decode = exact;
  o.max_bad_fraction = 0.25;
  return o;
}

TEST(Pipeline, EveryKindOfBadFileIsSkippedLoggedAndCounted) {
  TempDir dir("zoo");
  std::vector<std::string> good;
  const int nbad = make_zoo(dir.path, good);
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact" : "fast");
    // Train: bad slots take the next sample, every batch full, every bad file logged once.
    ::testing::internal::CaptureStderr();
    auto train = make_image_folder_source(dir.path, Split::train, opts(2, exact));
    const auto batches = run_epoch(*train, 0);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(train->bad_samples(), nbad);
    for (const char* kind :
         {"zero_bytes", "truncated", "random_bytes", "header_only", "truncated_png"}) {
      EXPECT_NE(log.find(dir.path + "/bad_" + kind + "/img.JPEG"), std::string::npos)
          << kind << " not logged:\n"
          << log;
    }
    EXPECT_EQ(train->bad_files().size(), size_t(nbad));
    const std::set<std::string> good_set(good.begin(), good.end());
    for (const Batch& b : batches) {
      EXPECT_EQ(b.size, 4);
      for (int i = 0; i < 4; ++i) {
        const int l = b.labels.data_as<int32_t>()[i];
        ASSERT_TRUE(l >= 0 && l < train->num_classes());
        EXPECT_TRUE(good_set.count(train->classes()[size_t(l)])) << train->classes()[size_t(l)];
      }
    }
    // Val: bad files are left out, every good file appears exactly once, sizes add up.
    ::testing::internal::CaptureStderr();
    auto val = make_image_folder_source(dir.path, Split::val, opts(3, exact));
    const auto vb = run_epoch(*val, 0);
    ::testing::internal::GetCapturedStderr();
    std::multiset<std::string> seen;
    int64_t total = 0;
    for (const Batch& b : vb) {
      total += b.size;
      for (int64_t i = 0; i < b.images.dim(0); ++i) {
        const int l = b.labels.data_as<int32_t>()[i];
        if (i >= b.size) {
          EXPECT_EQ(l, -1);  // rows past size: no sample
          continue;
        }
        ASSERT_GE(l, 0);
        seen.insert(val->classes()[size_t(l)]);
      }
    }
    EXPECT_EQ(total, int64_t(good.size()));
    EXPECT_EQ(seen, std::multiset<std::string>(good.begin(), good.end()));
    EXPECT_EQ(val->bad_samples(), nbad);
    EXPECT_EQ(val->epoch_samples(), int64_t(good.size()) + nbad);
  }
}

TEST(Pipeline, TooManyBadFilesAbortWithTheListWritten) {
  TempDir dir("toomany");
  std::vector<std::string> good;
  const int nbad = make_zoo(dir.path, good);
  LoaderOptions o = opts(2, false);
  o.max_bad_fraction = 0.1;  // 28 samples per epoch: 2 bad files tolerated, 5 present
  o.bad_files_path = dir.path + "/report.bad_files.txt";
  ::testing::internal::CaptureStderr();
  auto src = make_image_folder_source(dir.path, Split::train, o);
  src->start_epoch(0);
  Batch b;
  std::string msg;
  try {
    while (src->next(b)) {
    }
  } catch (const Error& e) {
    msg = e.what();
  }
  ::testing::internal::GetCapturedStderr();
  ASSERT_NE(msg, "") << "no abort";
  EXPECT_NE(msg.find("too many undecodable images"), std::string::npos) << msg;
  EXPECT_NE(msg.find(o.bad_files_path), std::string::npos) << msg;
  std::ifstream f(o.bad_files_path);
  std::string line;
  int lines = 0;
  while (std::getline(f, line)) {
    EXPECT_NE(line.find(dir.path + "/bad_"), std::string::npos) << line;
    EXPECT_NE(line.find('\t'), std::string::npos) << line;  // path TAB reason
    ++lines;
  }
  EXPECT_GE(lines, 3);  // more than the 2 tolerated
  EXPECT_LE(lines, nbad);
}

TEST(Pipeline, FastModeIsDeterministicAcrossWorkerCountsAndRuns) {
  TempDir dir("fastdet");
  std::vector<std::string> good;
  make_zoo(dir.path, good);
  ::testing::internal::CaptureStderr();
  auto one = make_image_folder_source(dir.path, Split::train, opts(1, false));
  auto three = make_image_folder_source(dir.path, Split::train, opts(3, false));
  const auto a0 = run_epoch(*one, 0), a1 = run_epoch(*one, 1);
  const auto b0 = run_epoch(*three, 0), b1 = run_epoch(*three, 1);
  auto again = make_image_folder_source(dir.path, Split::train, opts(2, false));
  const auto c1 = run_epoch(*again, 1);
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(same_batches(a0, b0));
  EXPECT_TRUE(same_batches(a1, b1));
  EXPECT_TRUE(same_batches(a1, c1));
  EXPECT_FALSE(same_batches(a0, a1));
}

TEST(Pipeline, BatchesLiveInTheCallersBuffersAndMemoryStaysFlat) {
  TempDir dir("flat");
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 12; ++i) {
      write_jpeg(dir.path + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg",
                 300 + 13 * i, 220 + 7 * c, uint64_t(c * 100 + i));
    }
  }
  struct Block {
    const uint8_t* begin;
    size_t bytes;
  };
  std::vector<Block> blocks;  // every buffer the allocator handed out (from worker threads)
  std::mutex blocks_mu;
  std::atomic<int> calls{0};
  LoaderOptions o = opts(2, false);
  o.batch_size = 8;
  o.crop_size = 64;
  o.prefetch = 2;
  o.alloc_host = [&](std::vector<int64_t> shape, DType dt, Layout l) {
    ++calls;
    EXPECT_EQ(shape.size(), 1u);
    EXPECT_EQ(dt, DType::u8);
    Tensor t = Tensor::empty(std::move(shape), dt, l);
    std::lock_guard<std::mutex> lock(blocks_mu);
    blocks.push_back({t.data_as<uint8_t>(), t.nbytes()});
    return t;
  };
  auto src = make_image_folder_source(dir.path, Split::train, o);
  int64_t allocs_after_warmup = 0, rss_after_warmup = 0;
  for (int epoch = 0; epoch < 8; ++epoch) {
    src->start_epoch(epoch);
    Batch b;
    while (src->next(b)) {
      const auto* p = b.images.data_as<uint8_t>();
      bool inside = false;
      std::lock_guard<std::mutex> lock(blocks_mu);
      for (const Block& k : blocks)
        inside |= p >= k.begin && p + b.images.nbytes() <= k.begin + k.bytes;
      ASSERT_TRUE(inside) << "batch not in an allocator buffer";
      const auto* l = b.labels.data_as<uint8_t>();
      ASSERT_TRUE(l >= p && l < p + 2 * b.images.nbytes());  // labels share the buffer
    }
    if (epoch == 1) {
      allocs_after_warmup = calls;
      rss_after_warmup = rss_bytes();
    }
  }
  EXPECT_GT(allocs_after_warmup, 0);
  EXPECT_LE(allocs_after_warmup, 2 * 2 + 4);  // workers * prefetch + 4 at most
  EXPECT_EQ(calls, allocs_after_warmup) << "buffers allocated after the first epochs";
  const double growth_mib = double(rss_bytes() - rss_after_warmup) / (1 << 20);
  if (!test::kAddressSanitizer) EXPECT_LT(growth_mib, 8.0) << "RSS grew over 6 epochs";
  std::printf("batch buffers allocated: %d; RSS growth over 6 epochs after warm-up: %.2f MiB\n",
              calls.load(), growth_mib);
}

TEST(Pipeline, WorkersArePinnedAndLogged) {
  TempDir dir("pin");
  for (int i = 0; i < 8; ++i) write_jpeg(dir.path + "/c/" + std::to_string(i) + ".jpg", 50, 40, i);
  LoaderOptions o = opts(2, false);
  o.worker_cpus = {0};
  ::testing::internal::CaptureStderr();
  auto src = make_image_folder_source(dir.path, Split::train, o);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("0->cpu0, 1->cpu0"), std::string::npos) << log;
  EXPECT_EQ(run_epoch(*src, 0).size(), 2u);
  o.worker_cpus = {CPU_SETSIZE - 1};  // no such CPU here
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(make_image_folder_source(dir.path, Split::train, o), Error);
  ::testing::internal::GetCapturedStderr();
  o.worker_cpus = {-1};
  EXPECT_THROW(make_image_folder_source(dir.path, Split::train, o), Error);
}

}  // namespace
