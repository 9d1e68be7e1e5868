// rn50 check-data (check_dataset): a good dataset passes with its class list; each problem --
// missing root or split, flat val/, no class folders, empty class, train/val class mismatch,
// unreadable files (header-only and decode modes) -- is reported with a specific message; the
// CLI exits non-zero and writes the class list. rn50 bench loader (bench_loader): JSON keys and
// the report file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/check.h"
#include "data_test_util.h"
#include "rn50/data.h"

using namespace rn50;
using namespace rn50::testutil;

namespace {

/// root/{train,val}/{n01,n02,n03}/ with two JPEGs each (val one PNG).
void make_dataset(const std::string& root) {
  int k = 0;
  for (const char* split : {"train", "val"}) {
    for (const char* cls : {"n01", "n02", "n03"}) {
      const std::string dir = root + "/" + split + "/" + cls;
      write_jpeg(dir + "/a.JPEG", 40 + k, 30, uint64_t(k));
      ++k;
      if (std::string(split) == "val") {
        write_png(dir + "/b.png", 33, 21, uint64_t(k));
      } else {
        write_jpeg(dir + "/b.jpg", 35, 44, uint64_t(k));
      }
      ++k;
    }
  }
}

/// The kinds of the problems found, in order.
std::vector<std::string> kinds(const DataCheckReport& r) {
  std::vector<std::string> k;
  for (const auto& p : r.problems) k.push_back(p.kind);
  return k;
}

std::string all_messages(const DataCheckReport& r) {
  std::string s;
  for (const auto& p : r.problems) s += p.message + "\n";
  return s;
}

TEST(CheckData, AGoodDatasetPasses) {
  TempDir dir("check_good");
  make_dataset(dir.path);
  write_text(dir.path + "/train/n01/notes.txt", "ignored, not an image");
  for (bool decode : {true, false}) {
    DataCheckOptions o;
    o.decode = decode;
    o.workers = 2;
    const DataCheckReport r = check_dataset(dir.path, o);
    EXPECT_TRUE(r.ok()) << all_messages(r);
    EXPECT_EQ(r.classes, (std::vector<std::string>{"n01", "n02", "n03"}));
    EXPECT_EQ(r.train_images, 6);
    EXPECT_EQ(r.val_images, 6);
    EXPECT_EQ(r.checked_files, 12);
  }
}

TEST(CheckData, MissingRootAndSplits) {
  TempDir dir("check_missing");
  DataCheckReport r = check_dataset(dir.path + "/nope");
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"missing_root"}));
  EXPECT_NE(all_messages(r).find(dir.path + "/nope"), std::string::npos);
  write_text(dir.path + "/file", "x");
  EXPECT_EQ(kinds(check_dataset(dir.path + "/file")), (std::vector<std::string>{"missing_root"}));

  make_dataset(dir.path + "/d");
  std::filesystem::remove_all(dir.path + "/d/val");
  r = check_dataset(dir.path + "/d");
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"missing_split"}));
  EXPECT_NE(all_messages(r).find("no val/ folder"), std::string::npos) << all_messages(r);
  EXPECT_EQ(r.classes.size(), 3u);  // the class list still comes from train/
}

TEST(CheckData, FlatValIsDetectedWithAHint) {
  TempDir dir("check_flat");
  make_dataset(dir.path);
  std::filesystem::remove_all(dir.path + "/val");
  for (int i = 1; i <= 4; ++i) {
    write_jpeg(dir.path + "/val/ILSVRC2012_val_0000000" + std::to_string(i) + ".JPEG", 30, 30, i);
  }
  const DataCheckReport r = check_dataset(dir.path);
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"flat_split"}));
  const std::string m = all_messages(r);
  EXPECT_NE(m.find("holds 4 images directly"), std::string::npos) << m;
  EXPECT_NE(m.find("ILSVRC2012_val_00000001.JPEG"), std::string::npos) << m;
  EXPECT_NE(m.find("val/<synset>/"), std::string::npos) << m;  // the hint
}

TEST(CheckData, NoClassFoldersAndEmptyClasses) {
  TempDir dir("check_empty");
  make_dataset(dir.path);
  std::filesystem::create_directories(dir.path + "/train/n04");
  write_text(dir.path + "/train/n04/readme.txt", "no images here");
  std::filesystem::create_directories(dir.path + "/val/n04");
  DataCheckReport r = check_dataset(dir.path);
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"empty_class", "empty_class"}));
  EXPECT_NE(all_messages(r).find(dir.path + "/train/n04"), std::string::npos);
  EXPECT_NE(all_messages(r).find(dir.path + "/val/n04"), std::string::npos);

  TempDir empty("check_noclass");
  std::filesystem::create_directories(empty.path + "/train");
  std::filesystem::create_directories(empty.path + "/val");
  r = check_dataset(empty.path);
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"no_classes", "no_classes"}));
}

TEST(CheckData, ClassMismatchNamesTheClasses) {
  TempDir dir("check_mismatch");
  make_dataset(dir.path);
  std::filesystem::remove_all(dir.path + "/val/n02");
  write_jpeg(dir.path + "/val/n99/x.jpg", 20, 20, 1);
  const DataCheckReport r = check_dataset(dir.path);
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"class_mismatch"}));
  const std::string m = all_messages(r);
  EXPECT_NE(m.find("only in train/: n02"), std::string::npos) << m;
  EXPECT_NE(m.find("only in val/: n99"), std::string::npos) << m;
}

TEST(CheckData, UnreadableFilesAreListed) {
  TempDir dir("check_bad");
  make_dataset(dir.path);
  const std::vector<uint8_t> jpg = make_jpeg(64, 64, 1);
  write_text(dir.path + "/train/n01/zero.jpg", "");
  write_bytes(dir.path + "/train/n02/truncated.jpg", jpg.data(), jpg.size() / 2);
  write_text(dir.path + "/val/n03/text.JPEG", "not an image at all");
  // A bad SOS header (component id 0x7F): found by the header read and the decode alike.
  std::vector<uint8_t> badsos = jpg;
  for (size_t i = 2; i + 1 < badsos.size(); ++i) {
    if (badsos[i] == 0xFF && badsos[i + 1] == 0xDA) {
      badsos[i + 5] = 0x7F;
      break;
    }
  }
  write_bytes(dir.path + "/val/n01/badsos.jpg", badsos.data(), badsos.size());
  for (bool decode : {true, false}) {
    SCOPED_TRACE(decode ? "decode" : "header only");
    DataCheckOptions o;
    o.decode = decode;
    const DataCheckReport r = check_dataset(dir.path, o);
    EXPECT_EQ(kinds(r), std::vector<std::string>(4, "unreadable")) << all_messages(r);
    ASSERT_EQ(r.unreadable.size(), 4u);
    const std::string m = all_messages(r);
    for (const char* f : {"/train/n01/zero.jpg", "/train/n02/truncated.jpg", "/val/n03/text.JPEG",
                          "/val/n01/badsos.jpg"}) {
      EXPECT_NE(m.find(dir.path + f), std::string::npos) << f << "\n" << m;
    }
    EXPECT_NE(m.find("empty"), std::string::npos) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << m;
    EXPECT_NE(m.find("not a JPEG or PNG"), std::string::npos) << m;
  }
}

/// Runs the rn50 CLI with `args`; returns its exit code, stdout in `out`, stderr in `err`.
int run_cli(const std::string& args, std::string& out, std::string& err, const TempDir& tmp) {
  const std::string o = tmp.path + "/cli.out", e = tmp.path + "/cli.err";
  const int st = std::system((std::string(RN50_CLI) + " " + args + " > " + o + " 2> " + e).c_str());
  std::ifstream fo(o), fe(e);
  out.assign(std::istreambuf_iterator<char>(fo), std::istreambuf_iterator<char>());
  err.assign(std::istreambuf_iterator<char>(fe), std::istreambuf_iterator<char>());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(CheckData, CliWritesTheClassListAndExitsNonZeroOnProblems) {
  ASSERT_TRUE(std::filesystem::exists(RN50_CLI)) << "no rn50 binary at " << RN50_CLI;
  TempDir dir("check_cli");
  make_dataset(dir.path + "/d");
  std::string out, err;
  EXPECT_EQ(run_cli("check-data --image-root " + dir.path + "/d", out, err, dir), 0) << err;
  EXPECT_EQ(out, "n01\nn02\nn03\n");
  EXPECT_EQ(run_cli("check-data --header-only --image-root " + dir.path + "/d --output " +
                        dir.path + "/classes.txt",
                    out, err, dir),
            0)
      << err;
  EXPECT_EQ(read_bytes(dir.path + "/classes.txt").size(), 12u);
  std::filesystem::remove_all(dir.path + "/d/val/n02");
  write_text(dir.path + "/d/train/n01/zero.jpg", "");
  EXPECT_EQ(run_cli("check-data --image-root " + dir.path + "/d", out, err, dir), 1);
  EXPECT_NE(err.find("[class_mismatch]"), std::string::npos) << err;
  EXPECT_NE(err.find("[unreadable]"), std::string::npos) << err;
  EXPECT_NE(err.find("zero.jpg"), std::string::npos) << err;
  EXPECT_EQ(run_cli("check-data --image-root " + dir.path + "/missing", out, err, dir), 1);
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST(BenchLoader, ReportsThroughputAsAJsonLine) {
  TempDir dir("bench");
  make_dataset(dir.path);
  for (int i = 0; i < 10; ++i) {
    write_jpeg(dir.path + "/train/n01/extra" + std::to_string(i) + ".jpg", 60, 50, uint64_t(i));
  }
  LoaderBenchConfig c;
  c.image_root = dir.path;
  c.loader.batch_size = 4;
  c.loader.crop_size = 16;
  c.loader.workers = 2;
  c.batches = 6;  // 4 batches per epoch: runs into the next epoch
  c.warmup_batches = 1;
  c.report_file = dir.path + "/report.jsonl";
  const LoaderBenchResult r = bench_loader(c);
  EXPECT_EQ(r.images, 24);
  EXPECT_GT(r.ips, 0);
  EXPECT_EQ(r.workers, 2);
  std::ifstream f(c.report_file);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  const auto j = nlohmann::json::parse(line);
  for (const char* k : {"loader.ips", "loader.images", "loader.seconds", "loader.cpu_seconds",
                        "loader.ips_per_cpu_second", "workers", "batch_size", "split"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["loader.images"], 24);
  c.split = Split::val;
  c.batches = 0;  // the rest of one epoch: 6 val images, batches of 4 -> 2 batches, 1 timed
  const LoaderBenchResult v = bench_loader(c);
  EXPECT_EQ(v.images, 2);
  c.warmup_batches = 5;
  EXPECT_THROW(bench_loader(c), Error);  // nothing left to time
}

}  // namespace
