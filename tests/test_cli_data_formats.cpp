// The data formats end to end through the CLI (issue 31): `rn50 convert-data` writes WebDataset
// and TFRecord shards of an ImageFolder; `rn50 train` trains and evaluates from each of them and
// from PaddleClas file lists; `rn50 eval` of one checkpoint gives the same val figures on every
// format; a resumed run on shards repeats the uninterrupted run's steps; `rn50 check-data`
// names a damaged record; a format that does not match the folder is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "data_test_util.h"
#include "test_train_util.h"

using namespace rn50_test;
using nlohmann::json;

namespace {

const std::string kCli = RN50_CLI;
/// Flags of train and eval alike; kTrain adds the training-only ones.
const std::string kTiny =
    " --arch resnet18 --crop-size 32 --resize-short 36 --batch-size 4 --workers 2 --device cpu";
const std::string kTrain = kTiny + " --lr 0.05 --warmup-epochs 1 --print-interval 1";

std::string run_ok(const std::string& args) {
  std::string out;
  const int rc = run_command(kCli + " " + args, &out);
  EXPECT_EQ(rc, 0) << "rn50 " << args << "\n" << out;
  return out;
}

/// root/{train,val}/c<k>/*.jpg: 3 classes, 8 train and 4 val images each.
void make_folder(const fs::path& root) {
  uint64_t seed = 11;
  for (const auto& [split, per] : {std::pair<std::string, int>{"train", 8}, {"val", 4}})
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < per; ++i, ++seed)
        rn50::testutil::write_jpeg(
            (root / split / ("c" + std::to_string(c)) / ("img_" + std::to_string(i) + ".jpg"))
                .string(),
            40 + int(seed % 7), 36 + int(seed % 5), seed);
}

void write_lists(const fs::path& root) {
  for (const std::string split : {"train", "val"}) {
    std::ofstream f(root / (split + "_list.txt"));
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < (split == "train" ? 8 : 4); ++i)
        f << split << "/c" << c << "/img_" << i << ".jpg " << c << "\n";
  }
}

struct Formats {
  TempDir tmp{"cli_formats"};
  fs::path folder = tmp.path / "folder", wds = tmp.path / "wds", tfr = tmp.path / "tfr";
  Formats() {
    make_folder(folder);
    write_lists(folder);
    run_ok("convert-data --image-root " + sh_quote(folder.string()) + " --output " +
           sh_quote(wds.string()) + " --format webdataset --shard-size 5");
    run_ok("convert-data --image-root " + sh_quote(folder.string()) + " --output " +
           sh_quote(tfr.string()) + " --format tfrecord --shard-size 5");
  }
  /// The data flags of each format, by name.
  std::vector<std::pair<std::string, std::string>> data_flags() const {
    const std::string f = sh_quote(folder.string());
    return {{"imagefolder", " --image-root " + f},
            {"filelist", " --image-root " + f + " --train-list " +
                             sh_quote((folder / "train_list.txt").string()) + " --val-list " +
                             sh_quote((folder / "val_list.txt").string())},
            {"webdataset", " --image-root " + sh_quote(wds.string())},
            {"tfrecord", " --image-root " + sh_quote(tfr.string()) + " --data-idx-dir " +
                             sh_quote((tfr / "idx").string())}};
  }
};

}  // namespace

TEST(CliDataFormats, TrainAndEvalFromEveryFormat) {
  Formats d;
  const fs::path ckpt = d.tmp.path / "ckpt";
  for (const auto& [name, flags] : d.data_flags()) {
    SCOPED_TRACE(name);
    const fs::path report = d.tmp.path / (name + ".jsonl");
    run_ok("train" + kTrain + flags + " --epochs 1 --report-file " + sh_quote(report.string()) +
           " --checkpoint-dir " + sh_quote((d.tmp.path / ("ck_" + name)).string()));
    const auto epochs = of_type(read_jsonl(report), "epoch");
    ASSERT_EQ(epochs.size(), 1u);
    EXPECT_EQ(epochs[0]["val.images"], 12);
    EXPECT_EQ(epochs[0]["train.bad_samples"], 0);
    EXPECT_TRUE(std::isfinite(epochs[0]["train.loss"].get<double>()));
  }
  // One checkpoint evaluated from every format: the same val figures.
  json first;
  for (const auto& [name, flags] : d.data_flags()) {
    SCOPED_TRACE(name);
    const fs::path report = d.tmp.path / ("eval_" + name + ".jsonl");
    run_ok("eval" + kTiny + flags + " --from-checkpoint " +
           sh_quote((d.tmp.path / "ck_imagefolder").string()) + " --report-file " +
           sh_quote(report.string()));
    const auto ev = of_type(read_jsonl(report), "eval");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0]["val.images"], 12);
    if (first.is_null()) {
      first = ev[0];
      continue;
    }
    EXPECT_EQ(ev[0]["val.top1"], first["val.top1"]);
    EXPECT_NEAR(ev[0]["val.loss"].get<double>(), first["val.loss"].get<double>(), 1e-5);
  }
}

TEST(CliDataFormats, ResumeOnShardsRepeatsTheUninterruptedRun) {
  Formats d;
  for (const auto& [name, flags] : d.data_flags()) {
    if (name != "webdataset" && name != "tfrecord") continue;
    SCOPED_TRACE(name);
    const fs::path a = d.tmp.path / (name + "_a"), b = d.tmp.path / (name + "_b");
    run_ok("train" + kTrain + flags + " --epochs 2 --report-file " +
           sh_quote((a / "r.jsonl").string()) + " --checkpoint-dir " + sh_quote((a / "ck").string()));
    fs::create_directories(b / "ck" / "resnet18");
    fs::copy(a / "ck" / "resnet18" / "0", b / "ck" / "resnet18" / "0",
             fs::copy_options::recursive);
    run_ok("train" + kTrain + flags + " --epochs 2 --report-file " +
           sh_quote((b / "r.jsonl").string()) + " --checkpoint-dir " +
           sh_quote((b / "ck").string()) + " --from-checkpoint " + sh_quote((b / "ck").string()));
    const auto sa = of_type(read_jsonl(a / "r.jsonl"), "step");
    const auto sb = of_type(read_jsonl(b / "r.jsonl"), "step");
    ASSERT_EQ(sa.size(), 12u);  // 24 train images / batch 4, two epochs
    ASSERT_EQ(sb.size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      const double la = sa[6 + i]["train.loss"].get<double>(), lb = sb[i]["train.loss"].get<double>();
      EXPECT_NEAR(la, lb, 1e-6 + 1e-4 * std::abs(la)) << "step " << sb[i]["step"];
    }
  }
}

TEST(CliDataFormats, CheckDataNamesDamageAndWrongFormatsAreRefused) {
  Formats d;
  for (const auto& [name, flags] : d.data_flags()) {
    std::string out;
    EXPECT_EQ(run_command(kCli + " check-data" + flags, &out), 0) << name << "\n" << out;
  }
  // A damaged record: check-data fails, naming the shard and the record's offset.
  const fs::path shard = d.tfr / "train-00000-of-00005";
  ASSERT_TRUE(fs::exists(shard));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  std::string out;
  EXPECT_NE(run_command(kCli + " check-data --image-root " + sh_quote(d.tfr.string()), &out), 0);
  EXPECT_NE(out.find("train-00000-of-00005@0"), std::string::npos) << out;
  EXPECT_NE(out.find("CRC"), std::string::npos) << out;
  // Training goes on past it, counting it (the default --max-bad-fraction allows none of 24:
  // raise it).
  const fs::path report = d.tmp.path / "bad.jsonl";
  run_ok("train" + kTrain + " --image-root " + sh_quote(d.tfr.string()) +
         " --epochs 1 --max-bad-fraction 0.1 --report-file " + sh_quote(report.string()) +
         " --checkpoint-dir " + sh_quote((d.tmp.path / "ck_bad").string()));
  const auto epochs = of_type(read_jsonl(report), "epoch");
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0]["train.bad_samples"], 1);
  // A format that is not there is refused by name.
  EXPECT_NE(run_command(kCli + " train" + kTrain + " --epochs 1 --data-format tfrecord --image-root " +
                            sh_quote(d.folder.string()),
                        &out),
            0);
  EXPECT_NE(out.find("TFRecord"), std::string::npos) << out;
}
