// scripts/prepare-imagenet.sh on small archives built here in the official ILSVRC2012 format:
// a train tar of per-class tars named by synset, a flat val tar, and the val labels as Kaggle's
// LOC_val_solution.csv or a plain "FILENAME SYNSET" list. The result passes rn50 check-data and
// rn50 trains on it; bad archives and label files fail with a message and leave no split behind.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "data_test_util.h"

using namespace rn50::testutil;

namespace {

const std::string kScript = std::string(RN50_SOURCE_DIR) + "/scripts/prepare-imagenet.sh";
const std::vector<std::string> kSynsets = {"n01440764", "n02102040", "n03000684"};
constexpr int kTrainPerClass = 4;

/// Runs `cmd` through the shell; stdout+stderr in `out`; returns the exit status.
int sh(const std::string& cmd, std::string* out = nullptr) {
  std::string full = cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  std::string o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.append(buf, n);
  const int st = ::pclose(p);
  if (out) *out = o;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct Archives {
  std::string train_tar, val_tar;
  /// val file name -> synset, in the order written to the tar.
  std::vector<std::pair<std::string, std::string>> val;
};

/// dir/ILSVRC2012_img_train.tar (one <synset>.tar of kTrainPerClass JPEGs per class) and
/// dir/ILSVRC2012_img_val.tar (two JPEGs per class, flat, labels interleaved).
Archives make_archives(const std::string& dir) {
  Archives a;
  const std::string stage = dir + "/stage";
  uint64_t seed = 1;
  for (const std::string& syn : kSynsets) {
    const std::string cdir = stage + "/class/" + syn;
    for (int i = 0; i < kTrainPerClass; ++i)
      write_jpeg(cdir + "/" + syn + "_" + std::to_string(100 + i) + ".JPEG", 48 + i, 40, seed++);
    std::filesystem::create_directories(stage + "/outer");
    EXPECT_EQ(sh("tar -cf " + stage + "/outer/" + syn + ".tar -C " + cdir + " $(ls " + cdir + ")"),
              0);
  }
  a.train_tar = dir + "/ILSVRC2012_img_train.tar";
  EXPECT_EQ(sh("tar -cf " + a.train_tar + " -C " + stage + "/outer $(ls " + stage + "/outer)"), 0);
  for (int i = 0; i < 2 * static_cast<int>(kSynsets.size()); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "ILSVRC2012_val_%08d.JPEG", i + 1);
    a.val.emplace_back(name, kSynsets[(i * 2 + 1) % kSynsets.size()]);
    write_jpeg(stage + "/val/" + name, 50, 38 + i, seed++);
  }
  a.val_tar = dir + "/ILSVRC2012_img_val.tar";
  EXPECT_EQ(sh("tar -cf " + a.val_tar + " -C " + stage + "/val $(ls " + stage + "/val)"), 0);
  std::filesystem::remove_all(stage);
  return a;
}

/// LOC_val_solution.csv: header, ImageId without extension, synset first of several boxes,
/// rows not in file order.
std::string write_loc_csv(const std::string& path, const Archives& a) {
  std::ofstream f(path);
  f << "ImageId,PredictionString\r\n";
  for (size_t k = a.val.size(); k-- > 0;) {
    const std::string id = a.val[k].first.substr(0, a.val[k].first.size() - 5);
    f << id << "," << a.val[k].second << " 12 30 200 180 " << a.val[k].second << " 1 2 3 4 \r\n";
  }
  return path;
}

/// Plain "FILENAME SYNSET" list: mixed separators, names with and without .JPEG, a comment.
std::string write_plain_list(const std::string& path, const Archives& a) {
  std::ofstream f(path);
  f << "# validation labels\n";
  for (size_t k = 0; k < a.val.size(); ++k) {
    const std::string& n = a.val[k].first;
    f << (k % 2 ? n : n.substr(0, n.size() - 5)) << (k % 3 ? "\t" : " ") << a.val[k].second
      << "\n";
  }
  f << "\n";
  return path;
}

std::string prepare(const Archives& a, const std::string& labels, const std::string& out,
                    int* rc) {
  std::string log;
  *rc = sh("RN50=" + std::string(RN50_CLI) + " JOBS=2 bash " + kScript + " " + a.train_tar + " " +
               a.val_tar + " " + labels + " " + out,
           &log);
  return log;
}

/// Files under dir/<split>/<class>/ as class -> sorted names.
std::map<std::string, std::vector<std::string>> layout(const std::string& split_dir) {
  std::map<std::string, std::vector<std::string>> m;
  for (const auto& c : std::filesystem::directory_iterator(split_dir)) {
    EXPECT_TRUE(c.is_directory()) << c.path();
    auto& v = m[c.path().filename().string()];
    for (const auto& f : std::filesystem::directory_iterator(c.path()))
      v.push_back(f.path().filename().string());
    std::sort(v.begin(), v.end());
  }
  return m;
}

void expect_imagefolder(const std::string& out, const Archives& a) {
  const auto train = layout(out + "/train");
  ASSERT_EQ(train.size(), kSynsets.size());
  for (const std::string& syn : kSynsets) {
    ASSERT_EQ(train.count(syn), 1u) << syn;
    EXPECT_EQ(train.at(syn).size(), size_t(kTrainPerClass)) << syn;
    for (const std::string& f : train.at(syn)) EXPECT_EQ(f.rfind(syn + "_", 0), 0u) << f;
  }
  std::map<std::string, std::vector<std::string>> want;
  for (const auto& [file, syn] : a.val) want[syn].push_back(file);
  for (auto& [syn, v] : want) std::sort(v.begin(), v.end());
  EXPECT_EQ(layout(out + "/val"), want);
  // Nothing half-done is left beside the splits.
  for (const char* left : {"/.train.partial", "/.val.partial", "/.val.labels", "/.val.resolved"})
    EXPECT_FALSE(std::filesystem::exists(out + left)) << left;
  std::ifstream cls(out + "/classes.txt");
  std::vector<std::string> listed;
  for (std::string l; std::getline(cls, l);) listed.push_back(l);
  EXPECT_EQ(listed, kSynsets);
}

}  // namespace

TEST(PrepareImagenet, LocCsvLabelsGiveAnImageFolderThatChecksAndTrains) {
  ASSERT_TRUE(std::filesystem::exists(RN50_CLI)) << "the rn50 binary is built with the tests";
  TempDir dir("prep_csv");
  const Archives a = make_archives(dir.path);
  int rc = -1;
  const std::string out = dir.path + "/imagenet";
  const std::string log =
      prepare(a, write_loc_csv(dir.path + "/LOC_val_solution.csv", a), out, &rc);
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("is ready for training"), std::string::npos) << log;  // check-data ran
  expect_imagefolder(out, a);

  // rn50 trains on it: one short epoch of a small network, then val top-1 on val/.
  std::string train_log;
  const int trc = sh(std::string(RN50_CLI) + " train --image-root " + out +
                         " --arch resnet18 --epochs 1 --warmup-epochs 0 --batch-size 4 "
                         "--crop-size 32 --resize-short 36 --workers 2 --checkpoint-dir " +
                         dir.path + "/ckpt --report-file " + dir.path + "/report.jsonl",
                     &train_log);
  ASSERT_EQ(trc, 0) << train_log;
  std::ifstream rep(dir.path + "/report.jsonl");
  std::string all((std::istreambuf_iterator<char>(rep)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("val.top1"), std::string::npos) << all;
}

TEST(PrepareImagenet, PlainListLabels) {
  TempDir dir("prep_plain");
  const Archives a = make_archives(dir.path);
  int rc = -1;
  const std::string out = dir.path + "/out";
  const std::string log = prepare(a, write_plain_list(dir.path + "/val.txt", a), out, &rc);
  ASSERT_EQ(rc, 0) << log;
  expect_imagefolder(out, a);
  // A second run never overwrites a prepared split.
  const std::string again = prepare(a, dir.path + "/val.txt", out, &rc);
  EXPECT_EQ(rc, 1) << again;
  EXPECT_NE(again.find("already exists"), std::string::npos) << again;
  EXPECT_EQ(layout(out + "/train").size(), kSynsets.size());
}

TEST(PrepareImagenet, BadLabelsAndArchivesFailWithTheReasonAndNoValSplit) {
  TempDir dir("prep_bad");
  const Archives a = make_archives(dir.path);
  struct Case {
    std::string labels;  // label file contents
    std::string expect;  // substring of the log
  };
  std::string all_but_last, wrong_name;
  for (size_t k = 0; k < a.val.size(); ++k) {
    if (k + 1 < a.val.size()) all_but_last += a.val[k].first + " " + a.val[k].second + "\n";
    wrong_name += (k ? a.val[k].first : std::string("ILSVRC2012_val_99999999.JPEG")) + " " +
                  a.val[k].second + "\n";
  }
  const std::vector<Case> cases = {
      {all_but_last, "unlabelled: " + a.val.back().first},
      {wrong_name, "ILSVRC2012_val_99999999.JPEG"},
      {a.val[0].first + " dog\n", "line 1"},
      {all_but_last + a.val[0].first + " " + a.val[0].second + "\n", "more than once"},
      {"", "empty"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string labels = dir.path + "/labels" + std::to_string(i) + ".txt";
    write_text(labels, c.labels);
    const std::string out = dir.path + "/out" + std::to_string(i++);
    int rc = -1;
    const std::string log = prepare(a, labels, out, &rc);
    EXPECT_EQ(rc, 1) << log;
    EXPECT_NE(log.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in:\n" << log;
    EXPECT_FALSE(std::filesystem::exists(out + "/val")) << log;
    EXPECT_EQ(log.find(".cpp:"), std::string::npos) << log;
  }
  // The val tar given as the train tar: no per-class tars inside.
  int rc = -1;
  write_text(dir.path + "/ok.txt", "");
  const std::string log = prepare({a.val_tar, a.val_tar, {}}, dir.path + "/ok.txt",
                                  dir.path + "/swapped", &rc);
  EXPECT_EQ(rc, 1) << log;
  EXPECT_NE(log.find("per-class tars"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/swapped/train")) << log;
  // A missing archive is named.
  const std::string log2 =
      prepare({dir.path + "/nope.tar", a.val_tar, {}}, dir.path + "/ok.txt", dir.path + "/x", &rc);
  EXPECT_EQ(rc, 1) << log2;
  EXPECT_NE(log2.find("nope.tar"), std::string::npos) << log2;
}
