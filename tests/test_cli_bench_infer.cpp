// rn50 bench infer as DLE's inference scripts drive it (issue 71):
//  * DLE Paddle inference.py's flags (--inference-dir, --batch-size one or several, --image-shape
//    with its default 4 channels, --data-layout, --show-config, --use-synthetic, --precision
//    FP32) parse and run; its Paddle-TRT knobs are refused naming what rn50 does instead;
//  * with real images (--image-root) the same batch sizes are timed again with data loading:
//    a table and an infer_benchmark record per batch size with input "loader", latency
//    percentiles, data_time and the loader's share; `rn50 eval --benchmark` on real images does
//    the same; too few images for a batch size is refused naming the folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "require.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rn50_test::read_jsonl;
using rn50_test::run_command;
using rn50_test::sh_quote;

const std::string kCli = RN50_CLI;

std::vector<json> loader_records(const fs::path& report) {
  std::vector<json> out;
  for (const json& j : read_jsonl(report))
    if (j.value("type", "") == "infer_benchmark" && j.value("input", "") == "loader")
      out.push_back(j);
  return out;
}

void expect_loader_record(const json& r, int batch) {
  EXPECT_EQ(r["batch_size"], batch) << r.dump();
  EXPECT_GT(r["infer.ips"].get<double>(), 0) << r.dump();
  EXPECT_LE(r["infer.latency_p50_ms"].get<double>(), r["infer.latency_p90_ms"].get<double>());
  EXPECT_LE(r["infer.latency_p90_ms"].get<double>(), r["infer.latency_p99_ms"].get<double>());
  EXPECT_GT(r["data_time"].get<double>(), 0) << r.dump();
  EXPECT_GT(r["data_share"].get<double>(), 0) << r.dump();
  EXPECT_LT(r["data_share"].get<double>(), 1) << r.dump();
  // The loader's wait is part of each batch's latency.
  EXPECT_LT(1e3 * r["data_time"].get<double>(), r["infer.latency_avg_ms"].get<double>());
}

TEST(CliBenchInfer, DleInferencePyFlagsParseAndRun) {
  rn50_test::TempDir tmp("bench_infer_dle");
  const std::string model = (tmp.path / "inference").string();
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --data synthetic --synthetic-samples 4 --batch-size 4 "
                               "--epochs 1 --warmup-epochs 0 --lr 0 --arch resnet18 "
                               "--num-of-class 10 --crop-size 32 --resize-short 36 "
                               "--run-scope train_only --checkpoint-dir " +
                               sh_quote((tmp.path / "ck").string()) + " --inference-dir " +
                               sh_quote(model),
                        &out),
            0)
      << out;
  // As scripts/inference/infer_resnet50_*.sh write them (DLE's default 4-channel image shape).
  const fs::path report = tmp.path / "inference.json";
  ASSERT_EQ(run_command(kCli + " bench infer --data-layout NHWC --inference-dir " +
                            sh_quote(model) +
                            " --precision FP32 --batch-size 2 --benchmark-steps 2 "
                            "--benchmark-warmup-steps 1 --use-synthetic True --image-shape "
                            "4,32,32 --show-config True --report-file " +
                            sh_quote(report.string()),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("--batch-sizes"), std::string::npos) << "the --show-config table: " << out;
  EXPECT_NE(out.find("--image-shape 4,32,32: DLE's zero fourth input channel"), std::string::npos)
      << out;
  std::vector<json> recs;
  for (const json& j : read_jsonl(report))
    if (j.value("type", "") == "infer_benchmark") recs.push_back(j);
  ASSERT_EQ(recs.size(), 1u) << out;
  EXPECT_EQ(recs[0]["batch_size"], 2);
  EXPECT_EQ(recs[0]["crop_size"], 32);
  EXPECT_EQ(recs[0]["num_of_class"], 10) << "the --inference-dir model was timed";
  // --batch-size with several sizes, as --batch-sizes; an NCHW input batch.
  fs::remove(report);
  ASSERT_EQ(run_command(kCli + " bench infer --data-layout NCHW --inference-dir " +
                            sh_quote(model) +
                            " --batch-size 1,3 --benchmark-steps 1 --benchmark-warmup-steps 0 "
                            "--crop-size 32 --report-file " +
                            sh_quote(report.string()),
                        &out),
            0)
      << out;
  std::vector<int> sizes;
  for (const json& j : read_jsonl(report))
    if (j.value("type", "") == "infer_benchmark") sizes.push_back(j["batch_size"].get<int>());
  EXPECT_EQ(sizes, (std::vector<int>{1, 3})) << out;
  // Paddle-TRT's knobs: refused, saying what rn50 does instead.
  for (const std::string flag :
       {"--workspace-size 1073741824", "--min-subgraph-size 3", "--use-static False",
        "--use-calib-mode True"}) {
    SCOPED_TRACE(flag);
    EXPECT_NE(run_command(kCli + " bench infer --inference-dir " + sh_quote(model) + " " + flag,
                          &out),
              0);
    EXPECT_NE(out.find(flag.substr(0, flag.find(' ')) + " (DLE inference.py, Paddle-TRT) has no "
                                                        "counterpart in rn50: "),
              std::string::npos)
        << out;
  }
}

TEST(CliBenchInfer, RealImagesAreTimedWithDataLoading) {
  rn50_test::TempDir tmp("bench_infer_data");
  const fs::path data = tmp.path / "data";
  RN50_REQUIRE_OR_SKIP("data", rn50_test::make_imagenette_subset(data, 4, 2, 6),
                       "imagenette not found");
  const fs::path report = tmp.path / "r.jsonl";
  std::string out;
  ASSERT_EQ(run_command(kCli + " bench infer --arch resnet18 --num-of-class 4 --image-root " +
                            sh_quote(data.string()) +
                            " --batch-sizes 1,4 --crop-size 32 --benchmark-steps 8 "
                            "--benchmark-warmup-steps 1 --report-file " +
                            sh_quote(report.string()),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("inference with data loading"), std::string::npos) << out;
  std::vector<json> recs = loader_records(report);
  ASSERT_EQ(recs.size(), 2u) << out;
  expect_loader_record(recs[0], 1);
  expect_loader_record(recs[1], 4);
  EXPECT_EQ(recs[0]["image_root"], (data / "val").string());
  // 24 val images cannot fill a batch of 32: refused naming the folder.
  EXPECT_NE(run_command(kCli + " bench infer --arch resnet18 --num-of-class 4 --image-root " +
                            sh_quote(data.string()) + " --batch-sizes 32 --crop-size 32",
                        &out),
            0);
  EXPECT_NE(out.find("no full batch of 32 images"), std::string::npos) << out;
  // rn50 eval --benchmark on real images: the same, at its --batch-size.
  fs::remove(report);
  ASSERT_EQ(run_command(kCli + " eval --benchmark --arch resnet18 --image-root " +
                            sh_quote(data.string()) +
                            " --batch-size 4 --crop-size 32 --resize-short 36 --benchmark-steps 8 "
                            "--benchmark-warmup-steps 1 --report-file " +
                            sh_quote(report.string()),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("inference with data loading"), std::string::npos) << out;
  recs = loader_records(report);
  ASSERT_EQ(recs.size(), 1u) << out;
  expect_loader_record(recs[0], 4);
}

}  // namespace
}  // namespace rn50
