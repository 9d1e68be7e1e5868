// Data stores other than ImageFolder (issue 31): WebDataset tar shards, TFRecord shards with
// DALI index files, PaddleClas file lists. Each must hold the same samples and labels as the
// ImageFolder it came from — written by `rn50 convert-data`, by GNU tar, and by an independent
// Python TFRecord writer (tests/data/tfrecord_writer.py) — damaged records and members are
// skipped, named and counted, the shard shuffle is a function of (seed, epoch), and evaluation
// reads every sample exactly once across 1, 2 and 3 ranks.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/convert_data.h"
#include "data/sample_index.h"
#include "data/stores.h"
#include "data/tar.h"
#include "data/tfrecord.h"
#include "data_test_util.h"
#include "require.h"
#include "rn50/data.h"

using namespace rn50;
using namespace rn50::data;
using namespace rn50::testutil;

namespace {

/// (image bytes, label) of every sample of a split, in the store's order.
using Samples = std::vector<std::pair<std::vector<uint8_t>, int>>;

/// root/{train,val}/c<k>/img_<i>.{jpg,png}: `classes` classes, `per_class` images each per
/// split, small JPEGs of varied sizes and every fifth a PNG.
void make_folder(const std::string& root, int classes, int train_per, int val_per) {
  uint64_t seed = 1;
  for (const auto& [split, per] : {std::pair<std::string, int>{"train", train_per}, {"val", val_per}})
    for (int c = 0; c < classes; ++c)
      for (int i = 0; i < per; ++i, ++seed) {
        const std::string base = fmt::format("{}/{}/c{:02}/img_{:03}", root, split, c, i);
        if (seed % 5 == 0)
          write_png(base + ".png", 20 + int(seed % 7), 18 + int(seed % 5), seed);
        else
          write_jpeg(base + ".jpg", 24 + int(seed % 9), 20 + int(seed % 6), seed);
      }
}

StoreOptions store(const std::string& root, DataFormat f) {
  StoreOptions o;
  o.root = root;
  o.format = f;
  return o;
}

Samples read_all(const SampleIndex& s) {
  Samples out;
  for (int64_t i = 0; i < s.size(); ++i) {
    std::vector<uint8_t> b;
    const int label = s.read(i, b);
    out.emplace_back(std::move(b), label);
  }
  return out;
}

Samples read_split(const StoreOptions& o, Split split) {
  std::string what;
  return read_all(*open_split(o, split, &what));
}

LoaderOptions small_loader(int batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.crop_size = 8;
  o.resize_short = 9;
  o.workers = 2;
  o.seed = 4;
  return o;
}

/// The labels an epoch of `src` delivers, in order.
std::vector<int> epoch_labels(DataSource& src, int epoch) {
  std::vector<int> labels;
  src.start_epoch(epoch);
  Batch b;
  while (src.next(b))
    for (int64_t i = 0; i < b.size; ++i) labels.push_back(b.labels.data_as<int32_t>()[i]);
  return labels;
}

std::unique_ptr<DataSource> source(const StoreOptions& o, Split split, const LoaderOptions& lo) {
  std::string what;
  return make_sample_source(open_split(o, split, &what), split, lo, what);
}

}  // namespace

TEST(DataFormats, ConvertedShardsHoldTheImageFolderSamplesInOrder) {
  TempDir dir("fmt_convert");
  const std::string root = dir.path + "/folder";
  make_folder(root, 3, 5, 3);
  const StoreOptions folder = store(root, DataFormat::imagefolder);
  for (const std::string format : {"webdataset", "tfrecord"}) {
    SCOPED_TRACE(format);
    const std::string out = dir.path + "/" + format;
    std::ostringstream log;
    const ConvertReport r = convert_data(folder, out, format, 4, log);
    EXPECT_EQ(r.samples, 24);
    EXPECT_EQ(r.skipped, 0);
    EXPECT_EQ(r.shards, 4 + 3);  // train 15 in 4 shards of <= 4, val 9 in 3
    const StoreOptions shards = store(out, DataFormat::automatic);
    EXPECT_EQ(detect_format(shards), parse_data_format(format));
    for (Split split : {Split::train, Split::val}) {
      std::string w1, w2;
      const auto a = open_split(folder, split, &w1), b = open_split(shards, split, &w2);
      EXPECT_EQ(a->classes(), b->classes());  // class names kept in manifest.json
      EXPECT_EQ(b->shard_starts().size(), split == Split::train ? 4u : 3u);
      const Samples sa = read_all(*a), sb = read_all(*b);
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t i = 0; i < sa.size(); ++i) {
        EXPECT_EQ(sa[i].second, sb[i].second) << "sample " << i << " " << b->name(i);
        EXPECT_TRUE(sa[i].first == sb[i].first) << "sample " << i << " " << b->name(i);
      }
    }
    std::ifstream mf(out + "/manifest.json");
    const nlohmann::json m = nlohmann::json::parse(mf);
    EXPECT_EQ(m["splits"]["train"]["samples"], 15);
    EXPECT_EQ(m["splits"]["val"]["samples"], 9);
    EXPECT_EQ(m["classes"].size(), 3u);
    // A second conversion into the same folder is refused rather than mixed in.
    EXPECT_THROW(convert_data(folder, out, format, 4, log), Error);
  }
}

TEST(DataFormats, FileListsHoldTheImageFolderSamples) {
  TempDir dir("fmt_list");
  make_folder(dir.path, 3, 4, 2);
  for (const std::string split : {"train", "val"}) {
    std::ofstream f(dir.path + "/" + split + "_list.txt");
    ImageFolderIndex idx = ImageFolderIndex::scan(dir.path + "/" + split);
    for (const auto& [path, label] : idx.samples)
      f << fs::relative(path, dir.path).string() << " " << label << "\n";
  }
  StoreOptions lists = store(dir.path, DataFormat::automatic);
  lists.train_list = dir.path + "/train_list.txt";
  lists.val_list = dir.path + "/val_list.txt";
  EXPECT_EQ(detect_format(lists), DataFormat::filelist);
  for (Split split : {Split::train, Split::val}) {
    std::string w;
    const auto l = open_split(lists, split, &w);
    const auto f = open_split(store(dir.path, DataFormat::imagefolder), split, &w);
    EXPECT_EQ(l->classes(), f->classes());  // named by the folder of each label's files
    EXPECT_EQ(read_all(*l), read_all(*f));
  }
  // Bad lines are named by file and line.
  write_text(dir.path + "/bad.txt", "train/c00/img_000.jpg 0\ntrain/c00/img_001.jpg x\n");
  try {
    file_list_samples(dir.path + "/bad.txt", dir.path);
    ADD_FAILURE() << "a non-integer label was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt' line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(file_list_samples(dir.path + "/missing.txt", dir.path), Error);
}

TEST(DataFormats, GnuTarShardsAreReadThroughABracePattern) {
  TempDir dir("fmt_gnutar");
  make_folder(dir.path + "/folder", 2, 1, 4);
  const Samples want = read_split(store(dir.path + "/folder", DataFormat::imagefolder), Split::val);
  // Keys as WebDataset writes them; one long enough (> 100 bytes) for a GNU/pax long-name header.
  const std::string tree = dir.path + "/tree";
  std::vector<std::string> keys;
  for (size_t i = 0; i < want.size(); ++i) {
    std::string key = fmt::format("sample_{:04}", i);
    if (i == 2) key = "deep/" + std::string(110, 'k') + "_0002";
    const bool png = want[i].first[0] == 0x89;
    write_bytes(tree + "/" + key + (png ? ".png" : ".jpg"), want[i].first.data(),
                want[i].first.size());
    write_text(tree + "/" + key + ".cls", std::to_string(want[i].second) + "\n");
    keys.push_back(key);
  }
  // Three shards: GNU format, POSIX (pax) format, and a GNU shard holding the last sample.
  const char* formats[] = {"gnu", "posix", "gnu"};
  const std::vector<std::vector<size_t>> parts = {{0, 1}, {2, 3}, {4, 5, 6, 7}};
  for (int s = 0; s < 3; ++s) {
    std::string cmd = fmt::format("cd '{}' && tar --format={} -cf '{}/val-{:06}.tar'", tree,
                                  formats[s], dir.path, s);
    for (size_t i : parts[s])
      if (i < keys.size()) {
        const bool png = want[i].first[0] == 0x89;
        cmd += " '" + keys[i] + (png ? ".png" : ".jpg") + "' '" + keys[i] + ".cls'";
      }
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  StoreOptions o = store("", DataFormat::automatic);
  o.val_shards = dir.path + "/val-{000000..000002}.tar";
  o.num_classes = 2;
  EXPECT_EQ(detect_format(o), DataFormat::webdataset);
  std::string what;
  const auto idx = open_split(o, Split::val, &what);
  EXPECT_EQ(read_all(*idx), want);
  EXPECT_NE(idx->name(2).find(std::string(110, 'k')), std::string::npos) << idx->name(2);
  for (int i = 8; i <= 10; ++i) write_text(fmt::format("{}/a-{:02}.tar", dir.path, i), "");
  EXPECT_EQ(expand_shards(dir.path + "/a-{08..10}.tar"),
            (std::vector<std::string>{dir.path + "/a-08.tar", dir.path + "/a-09.tar",
                                      dir.path + "/a-10.tar"}));
}

TEST(DataFormats, TfrecordsFromAnIndependentWriterAreRead) {
  RN50_REQUIRE_OR_SKIP("torch", fs::exists(rn50::test::python()),
                       "no " << rn50::test::python() << " for the TFRecord writer");
  TempDir dir("fmt_pytfr");
  make_folder(dir.path + "/folder", 3, 4, 3);
  const std::string out = dir.path + "/tfr";
  const std::string cmd = fmt::format("{} '{}/tests/data/tfrecord_writer.py' '{}/folder' '{}' 2",
                                      rn50::test::python(), RN50_SOURCE_DIR, dir.path, out);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  StoreOptions o = store(out, DataFormat::automatic);
  o.num_classes = 3;  // no manifest: labels 1..3 in the records, offset 1
  EXPECT_EQ(detect_format(o), DataFormat::tfrecord);
  for (Split split : {Split::train, Split::val}) {
    const Samples want = read_split(store(dir.path + "/folder", DataFormat::imagefolder), split);
    EXPECT_EQ(read_split(o, split), want);  // index built in one pass
    StoreOptions with_idx = o;
    with_idx.idx_dir = out + "/idx";  // DALI index files written by the Python writer
    EXPECT_EQ(read_split(with_idx, split), want);
    for (const std::string& shard : tfrecord_shards(out, split)) {
      std::vector<std::string> problems;
      const auto scanned = scan_tfrecord(shard, &problems);
      const auto dali = read_dali_index(out + "/idx/" + fs::path(shard).filename().string() + ".idx");
      ASSERT_EQ(scanned.size(), dali.size()) << shard;
      for (size_t i = 0; i < dali.size(); ++i) {
        EXPECT_EQ(scanned[i].offset, dali[i].offset);
        EXPECT_EQ(scanned[i].size, dali[i].size);
      }
      EXPECT_TRUE(problems.empty());
    }
  }
  // --label-offset 0 on 1-based labels: label 3 is out of range for 3 classes, so those
  // samples are bad samples, not silently wrong ones.
  StoreOptions off0 = o;
  off0.label_offset = 0;
  std::string what;
  const auto idx = open_split(off0, Split::val, &what);
  int bad = 0;
  for (int64_t i = 0; i < idx->size(); ++i) {
    std::vector<uint8_t> b;
    try {
      idx->read(i, b);
    } catch (const Error&) {
      ++bad;
    }
  }
  EXPECT_EQ(bad, 3);
}

namespace {

/// root/{train,val}/c<k>/img.jpg with one image per class: labels identify samples.
void make_unique_folder(const std::string& root, int n) {
  for (const std::string split : {"train", "val"})
    for (int c = 0; c < n; ++c)
      write_jpeg(fmt::format("{}/{}/c{:03}/img.jpg", root, split, c), 16 + c % 5, 16, 100 + c);
}

void flip_byte(const std::string& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(at);
  f.write(&c, 1);
}

void truncate_by(const std::string& path, int64_t bytes) {
  fs::resize_file(path, fs::file_size(path) - static_cast<uintmax_t>(bytes));
}

/// Runs one val epoch of `o` with every bad sample allowed: (images delivered, bad files).
std::pair<int64_t, std::vector<std::string>> val_epoch(const StoreOptions& o) {
  LoaderOptions lo = small_loader(4);
  lo.max_bad_fraction = 1.0;
  auto src = source(o, Split::val, lo);
  const int64_t images = static_cast<int64_t>(epoch_labels(*src, 0).size());
  return {images, src->bad_files()};
}

bool any_contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x.find(s) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(DataFormats, DamagedTfrecordsAreSkippedNamedAndCounted) {
  TempDir dir("fmt_badtfr");
  make_folder(dir.path + "/folder", 2, 1, 6);  // val: 12 samples
  std::ostringstream log;
  convert_data(store(dir.path + "/folder", DataFormat::imagefolder), dir.path + "/tfr", "tfrecord",
               4, log);
  const std::string s0 = dir.path + "/tfr/validation-00000-of-00003";
  const std::string s2 = dir.path + "/tfr/validation-00002-of-00003";
  std::vector<std::string> problems;
  const auto spans = scan_tfrecord(s0, &problems);
  ASSERT_EQ(spans.size(), 4u);
  flip_byte(s0, spans[1].offset + 12 + 40);  // record 1's data: its data CRC fails
  truncate_by(s2, 10);                       // the last record of shard 2 cut off
  StoreOptions o = store(dir.path + "/tfr", DataFormat::tfrecord);  // index rebuilt: none given
  const auto [images, bad] = val_epoch(o);
  EXPECT_EQ(images, 10);
  ASSERT_EQ(bad.size(), 2u) << fmt::format("{}", fmt::join(bad, "\n"));
  EXPECT_TRUE(any_contains(bad, fmt::format("validation-00000-of-00003@{}", spans[1].offset)));
  EXPECT_TRUE(any_contains(bad, "CRC"));
  EXPECT_TRUE(any_contains(bad, "cut off"));
  // A stale DALI index (offsets past the shard's end) is refused, naming the index file.
  StoreOptions stale = o;
  stale.idx_dir = dir.path + "/tfr/idx";
  EXPECT_THROW(read_split(stale, Split::val), Error);
  // Over --max-bad-fraction the epoch stops with an error naming a bad record.
  LoaderOptions strict = small_loader(4);
  strict.max_bad_fraction = 0.05;
  auto src = source(o, Split::val, strict);
  try {
    epoch_labels(*src, 0);
    ADD_FAILURE() << "2 bad records of 12 passed --max-bad-fraction 0.05";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("validation-0000"), std::string::npos) << e.what();
  }
}

TEST(DataFormats, DamagedTarShardsAreSkippedNamedAndCounted) {
  TempDir dir("fmt_badtar");
  make_folder(dir.path + "/folder", 2, 1, 6);
  const Samples good = read_split(store(dir.path + "/folder", DataFormat::imagefolder), Split::val);
  // Shard 0: a sample without .cls, a sample whose .jpg is not an image, two good ones.
  std::string t0;
  append_tar_member(t0, "a0.jpg", {reinterpret_cast<const char*>(good[0].first.data()), good[0].first.size()});
  append_tar_member(t0, "a1.jpg", {reinterpret_cast<const char*>(good[1].first.data()), good[1].first.size()});
  append_tar_member(t0, "a1.cls", "0");
  append_tar_member(t0, "a2.jpg", "this is not an image");
  append_tar_member(t0, "a2.cls", "0");
  append_tar_member(t0, "a3.jpg", {reinterpret_cast<const char*>(good[2].first.data()), good[2].first.size()});
  append_tar_member(t0, "a3.cls", "0");
  finish_tar(t0);
  write_text(dir.path + "/val/val-000000.tar", t0);
  // Shard 1: three good samples, then a member header with a broken checksum, then a truncated
  // last member.
  std::string t1;
  for (int i = 0; i < 3; ++i) {
    const auto& img = good[6 + i].first;
    append_tar_member(t1, fmt::format("b{}.jpg", i), {reinterpret_cast<const char*>(img.data()), img.size()});
    append_tar_member(t1, fmt::format("b{}.cls", i), "1");
  }
  const size_t broken = t1.size();
  append_tar_member(t1, "b3.jpg", {reinterpret_cast<const char*>(good[9].first.data()), good[9].first.size()});
  append_tar_member(t1, "b3.cls", "1");
  t1[broken + 148] ^= 0x11;  // the header's checksum field
  append_tar_member(t1, "b4.jpg", {reinterpret_cast<const char*>(good[10].first.data()), good[10].first.size()});
  t1.resize(t1.size() - 200);  // b4.jpg cut off
  write_text(dir.path + "/val/val-000001.tar", t1);
  StoreOptions o = store(dir.path, DataFormat::webdataset);
  o.num_classes = 2;
  const auto [images, bad] = val_epoch(o);
  EXPECT_EQ(images, 5);  // a1, a3, b0, b1, b2
  EXPECT_TRUE(any_contains(bad, "val-000000.tar:a0")) << fmt::format("{}", fmt::join(bad, "\n"));
  EXPECT_TRUE(any_contains(bad, "val-000000.tar:a2"));
  EXPECT_TRUE(any_contains(bad, fmt::format("val-000001.tar@{}", broken)));
  EXPECT_TRUE(any_contains(bad, "cut off"));
}

TEST(DataFormats, ShardShuffleIsAFunctionOfSeedAndEpoch) {
  TempDir dir("fmt_shuffle");
  make_unique_folder(dir.path + "/folder", 24);
  std::ostringstream log;
  convert_data(store(dir.path + "/folder", DataFormat::imagefolder), dir.path + "/wds",
               "webdataset", 4, log);
  const StoreOptions o = store(dir.path + "/wds", DataFormat::webdataset);
  LoaderOptions lo = small_loader(4);
  lo.shuffle_buffer = 6;
  lo.drop_last = false;
  auto a = source(o, Split::train, lo), b = source(o, Split::train, lo);
  const std::vector<int> a2 = epoch_labels(*a, 2), a3 = epoch_labels(*a, 3);
  EXPECT_EQ(epoch_labels(*b, 2), a2);  // a resumed run at epoch 2 sees the same order
  EXPECT_NE(a2, a3);
  std::vector<int> sorted = a2, all(24);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 24; ++i) all[i] = i;
  EXPECT_EQ(sorted, all);  // every sample once per epoch
  std::vector<int> identity = all;
  EXPECT_NE(a2, identity);  // and shuffled
  LoaderOptions other = lo;
  other.seed = 5;
  EXPECT_NE(epoch_labels(*source(o, Split::train, other), 2), a2);
}

TEST(DataFormats, EvalReadsEverySampleOnceAcrossRanks) {
  TempDir dir("fmt_ranks");
  const int n = 23;
  make_unique_folder(dir.path + "/folder", n);
  std::ostringstream log;
  for (const std::string format : {"webdataset", "tfrecord"})
    for (int shard_size : {2, 10}) {  // 12 shards (split by shard) and 3 (split by record)
      const std::string out = fmt::format("{}/{}_{}", dir.path, format, shard_size);
      convert_data(store(dir.path + "/folder", DataFormat::imagefolder), out, format, shard_size,
                   log);
      for (int world : {1, 2, 3}) {
        SCOPED_TRACE(fmt::format("{} shard size {} world {}", format, shard_size, world));
        std::multiset<int> val, train;
        int64_t train_batches = -1;
        for (int r = 0; r < world; ++r) {
          LoaderOptions lo = small_loader(3);
          lo.rank = r;
          lo.world_size = world;
          lo.local_ranks = world;
          LoaderOptions vo = lo;
          vo.drop_last = false;
          for (int l : epoch_labels(*source(store(out, DataFormat::automatic), Split::val, vo), 0))
            val.insert(l);
          auto t = source(store(out, DataFormat::automatic), Split::train, lo);
          if (train_batches < 0) train_batches = t->batches_per_epoch();
          EXPECT_EQ(t->batches_per_epoch(), train_batches);  // equal steps on every rank
          for (int l : epoch_labels(*t, 1)) train.insert(l);
        }
        std::multiset<int> all;
        for (int i = 0; i < n; ++i) all.insert(i);
        EXPECT_EQ(val, all);
        for (int l : train) EXPECT_EQ(train.count(l), 1u) << "label " << l;
        EXPECT_EQ(int64_t(train.size()), int64_t(world) * train_batches * 3);
      }
    }
}

TEST(DataFormats, Crc32cMatchesItsCheckValueAtAnyLengthAndAlignment) {
  // CRC-32C (Castagnoli) check value of "123456789" (RFC 3720 B.4 / the CRC catalogue).
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t*>(check.data()), check.size()), 0xE3069283u);
  // Chained over any split point and from unaligned addresses: the same as in one piece
  // (bitwise reference computed here).
  std::vector<uint8_t> buf(1000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  for (size_t off : {0u, 1u, 3u, 7u})
    for (size_t n : {0u, 1u, 8u, 13u, 64u, 993u}) {
      const uint8_t* p = buf.data() + off;
      const uint32_t want = bitwise(p, n);
      EXPECT_EQ(crc32c(p, n), want) << off << " " << n;
      EXPECT_EQ(crc32c(p + n / 3, n - n / 3, crc32c(p, n / 3)), want) << off << " " << n;
    }
}
