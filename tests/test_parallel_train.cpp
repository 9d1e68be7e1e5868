// Data-parallel training end to end under `mpirun --oversubscribe -np N` (CPU, MPI):
//  * one data-parallel step gives every rank the single-process gradient of the global batch
//    (rn50_parallel_train_worker; per-rank BatchNorm as DLE, see that file), with small buckets
//    (many allreduces during backward) and one big bucket;
//  * `rn50 eval` on 1, 2 and 3 ranks gives identical top-1, top-5 and image count on a val set
//    of 37 real JPEGs (no batch size of 8 divides it, and 37 is not a multiple of 2 or 3);
//  * a rank that fails (an undecodable file with --max-bad-fraction 0) stops the whole job
//    within the timeout with a non-zero exit code, its error printed; so does a rank that fails
//    before training while the other waits for it, at once (MPI_Abort), not after --timeout;
//  * on a GPU: NCCL at world size 1 gives the same losses as no communicator.
// Skipped, with the reason, when mpirun or the MPI communicator is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel_test_util.h"
#include "rn50/backend.h"
#include "rn50/parallel.h"
#include "require.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using rn50::test::run;
using rn50::test::RunResult;
std::string mpirun(int np) { return rn50::test::mpirun_prefix(np); }

/// A fresh directory under the build tree.
fs::path temp_dir(const std::string& name) {
  fs::path d = fs::path(RN50_BINARY_DIR) / "dist_train_tmp" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path imagenette() {
  return fs::path(RN50_SOURCE_DIR) / ".." / "shared" / "data" / "imagenette";
}

#define SKIP_WITHOUT_IMAGENETTE()                                                      \
  do {                                                                                 \
    RN50_REQUIRE_OR_SKIP("data",                                                       \
                         fs::is_directory(imagenette() / "train") &&                   \
                             fs::is_directory(imagenette() / "val"),                   \
                         "no imagenette at " << imagenette() << " (../shared beside the repo)"); \
  } while (0)

/// Copies the first files (sorted) of each imagenette class into root/split until `total`.
void copy_subset(const fs::path& root, const std::string& split, int total) {
  const fs::path src = imagenette() / split;
  std::vector<fs::path> classes;
  for (const auto& e : fs::directory_iterator(src)) classes.push_back(e.path());
  std::sort(classes.begin(), classes.end());
  std::vector<std::vector<fs::path>> files(classes.size());
  for (size_t c = 0; c < classes.size(); ++c) {
    for (const auto& e : fs::directory_iterator(classes[c])) files[c].push_back(e.path());
    std::sort(files[c].begin(), files[c].end());
  }
  int copied = 0;
  for (size_t k = 0; copied < total; ++k)
    for (size_t c = 0; c < classes.size() && copied < total; ++c) {
      if (k >= files[c].size()) continue;
      const fs::path dst = root / split / classes[c].filename();
      fs::create_directories(dst);
      fs::copy_file(files[c][k], dst / files[c][k].filename());
      ++copied;
    }
}

json last_line_of_type(const fs::path& report, const std::string& type) {
  std::ifstream f(report);
  std::string line;
  json found;
  while (std::getline(f, line))
    if (!line.empty()) {
      json j = json::parse(line);
      if (j.value("type", "") == type) found = j;
    }
  return found;
}

TEST(DistTrain, OneStepGivesTheSingleProcessGradient) {
  SKIP_WITHOUT_MPI();
  for (const char* bucket_mb : {"0.05", "25"}) {
    SCOPED_TRACE(std::string("bucket MB ") + bucket_mb);
    RunResult r = run(mpirun(2) + RN50_PARALLEL_TRAIN_WORKER + " " + bucket_mb);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 0: OK"), std::string::npos) << r.output;
    std::printf("%s", r.output.c_str());
  }
}

TEST(DistTrain, EvalIsExactOnOneTwoAndThreeRanks) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_IMAGENETTE();
  const fs::path root = temp_dir("eval37");
  copy_subset(root, "val", 37);
  std::vector<json> results;
  for (int np : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << np << " ranks");
    const fs::path report = root / ("eval_" + std::to_string(np) + ".jsonl");
    RunResult r = run(mpirun(np) + RN50_CLI + " eval --device cpu --image-root " + root.string() +
                      " --arch resnet18 --num-of-class 10 --crop-size 64 --resize-short 73 "
                      "--batch-size 8 --seed 3 --workers 1 --report-file " + report.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    json e = last_line_of_type(report, "eval");
    ASSERT_FALSE(e.is_null()) << r.output;
    results.push_back(e);
    std::printf("%d rank(s): val.top1 %s val.top5 %s val.images %s val.loss %s\n", np,
                e["val.top1"].dump().c_str(), e["val.top5"].dump().c_str(),
                e["val.images"].dump().c_str(), e["val.loss"].dump().c_str());
  }
  for (const json& e : results) {
    EXPECT_EQ(e["val.images"], 37);
    EXPECT_EQ(e["val.top1"], results[0]["val.top1"]);
    EXPECT_EQ(e["val.top5"], results[0]["val.top5"]);
    // The loss is a sum of f32 batch means (the backend's loss, as torch's val loss), and the
    // batches differ with the number of ranks: equal to f32 rounding, not bit for bit.
    EXPECT_NEAR(e["val.loss"].get<double>(), results[0]["val.loss"].get<double>(),
                1e-6 * results[0]["val.loss"].get<double>());
  }
}

TEST(DistTrain, AFailingRankStopsTheJob) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_IMAGENETTE();
  const fs::path root = temp_dir("fail");
  copy_subset(root, "train", 19);
  copy_subset(root, "val", 10);
  // One undecodable file (20 train samples: no remainder is dropped at world size 2), and no
  // tolerance for bad files: the rank whose shard holds it fails.
  {
    std::ofstream bad(root / "train" / "n01440764" / "zz_corrupt.JPEG", std::ios::binary);
    bad << "definitely not a JPEG";
  }
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run(mpirun(2) + RN50_CLI + " train --device cpu --image-root " + root.string() +
                    " --arch resnet18 --crop-size 64 --resize-short 73 --batch-size 2 "
                    "--epochs 1 --workers 1 --max-bad-fraction 0 --timeout 60 "
                    "--checkpoint-dir " + (root / "ckpt").string());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(s, 60.0) << "the job must stop within the timeout";
  EXPECT_NE(r.output.find("zz_corrupt.JPEG"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank "), std::string::npos) << r.output;
  // With no --report-file the list of bad files goes to the checkpoint directory, not the cwd.
  EXPECT_TRUE(fs::exists(root / "ckpt" / "bad_files.txt")) << r.output;
  std::printf("job stopped after %.1f s with exit code %d\n", s, r.exit_code);
}

// A rank that fails before training (here: a data folder that exists on one node only) while
// the other waits in the job's first collective: the failing rank aborts the MPI job, so the
// job stops at once rather than after --timeout (600 s here), or never (exiting normally, the
// rank would wait in MPI_Finalize for the rank that waits for it).
TEST(DistTrain, ARankFailingAtStartStopsTheJob) {
  SKIP_WITHOUT_MPI();
  const fs::path root = temp_dir("fail_start");
  const std::string common = std::string(RN50_CLI) +
                             " train --device cpu --arch resnet18 --crop-size 64 --batch-size 2 "
                             "--epochs 1 --workers 1 --timeout 600 --checkpoint-dir " +
                             (root / "ckpt").string();
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run(mpirun(1) + common + " --data synthetic --synthetic-samples 8 : -np 1 " +
                    common + " --image-root " + (root / "not_here").string());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(s, 60.0) << "the job must stop at once, not after --timeout 600\n" << r.output;
  EXPECT_NE(r.output.find("not_here"), std::string::npos) << r.output;
  std::printf("job stopped after %.1f s with exit code %d\n", s, r.exit_code);
}

TEST(DistTrain, NcclAtWorldSizeOneMatchesNoCommunicator) {
  SKIP_WITHOUT_MPI();
  RN50_REQUIRE_OR_SKIP("gpu", rn50::cuda_device_count() > 0,
                       "no usable GPU: " << rn50::cuda_unavailable_reason());
  const fs::path root = temp_dir("nccl1");
  std::vector<json> lines;
  for (const char* kind : {"single", "nccl"}) {
    const fs::path report = root / (std::string(kind) + ".jsonl");
    RunResult r = run(mpirun(1) + RN50_CLI + " train --device cuda --data synthetic --benchmark "
                      "--benchmark-steps 4 --benchmark-warmup-steps 2 --batch-size 32 "
                      "--arch resnet18 --crop-size 64 --dist-backend " + kind +
                      " --report-file " + report.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    lines.push_back(last_line_of_type(report, "benchmark"));
  }
  // Two processes time cuDNN's algorithms separately and may choose different ones, whose
  // rounding differs (seen on an H100: 7.0914 vs 7.0926); a communicator that changed the
  // gradients (a wrong average, a missed allreduce) would move it by more than that.
  EXPECT_NEAR(lines[1]["train.loss"].get<double>(), lines[0]["train.loss"].get<double>(), 5e-3);
}

}  // namespace
