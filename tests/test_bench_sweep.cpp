// rn50 bench train: precision names, per-point summaries on known inputs (median/min/max,
// step-time percentiles, data-wait share, peak memory), flag errors, and a real short CPU sweep
// whose JSON conforms to the report schema and reads back into rn50 report.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/report.h"
#include "rn50/backend.h"
#include "rn50/bench.h"
#include "rn50/error.h"
#include "rn50/report.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

TEST(BenchSweep, PrecisionNames) {
  EXPECT_EQ(parse_precision("fp32", "--precisions"), Precision::fp32);
  EXPECT_EQ(parse_precision("amp-fp16", "--precisions"), Precision::amp_fp16);
  EXPECT_EQ(parse_precision("AMP_BF16", "--precisions"), Precision::amp_bf16);
  EXPECT_EQ(parse_precision("tf32", "--precisions"), Precision::tf32);
  EXPECT_EQ(parse_precision("pure-fp16", "--precisions"), Precision::pure_fp16);
  for (Precision p : all_precisions())
    EXPECT_EQ(parse_precision(precision_name(p), "--precisions"), p) << precision_name(p);
  try {
    parse_precision("fp16", "--precisions");
    FAIL() << "fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precisions 'fp16'"), std::string::npos) << e.what();
  }
  // The CPU trains in fp32, and in bf16 AMP where oneDNN has bf16 kernels.
  const bool bf16 = make_backend("onednn")->supports(Op::conv2d, DType::bf16, Layout::NHWC);
  const std::vector<Precision> cpu = bf16 ? std::vector<Precision>{Precision::fp32,
                                                                   Precision::amp_bf16}
                                          : std::vector<Precision>{Precision::fp32};
  EXPECT_EQ(backend_precisions("onednn"), cpu);
  EXPECT_EQ(backend_precisions("cuda").size(), 5u);
}

TEST(BenchSweep, CpuRefusesGpuPrecisions) {
  Config base;
  base.device = "cpu";
  for (Precision p : {Precision::tf32, Precision::amp_fp16, Precision::pure_fp16}) {
    try {
      sweep_point_config(base, p, 8);
      FAIL() << precision_name(p) << " accepted on the CPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not train in it"), std::string::npos) << e.what();
    }
  }
  const Config c = sweep_point_config(base, Precision::fp32, 8);
  EXPECT_EQ(c.batch_size, 8);
  EXPECT_TRUE(c.benchmark);
  EXPECT_FALSE(c.amp);
  EXPECT_FALSE(c.no_tf32);  // a CPU flag it would refuse
  if (make_backend("onednn")->supports(Op::conv2d, DType::bf16, Layout::NHWC)) {
    Config b = sweep_point_config(base, Precision::amp_bf16, 8);
    b.data = DataKind::synthetic;
    EXPECT_TRUE(b.amp);
    EXPECT_EQ(b.amp_dtype, "bf16");
    EXPECT_NO_THROW(validate(b));
  }
}

TrainBenchmarkResult run_with(double ips, std::vector<double> steps, double data, double compute,
                              int64_t rss) {
  TrainBenchmarkResult r;
  r.ips = ips;
  r.ips_per_rank = ips / 2;
  r.world_size = 2;
  r.step_seconds = std::move(steps);
  r.data_seconds = data;
  r.compute_seconds = compute;
  r.peak_host_rss_bytes = rss;
  r.last_loss = 6.5f;
  return r;
}

TEST(BenchSweep, SummaryArithmetic) {
  // Three runs: ips 30, 10, 20 -> median 20, min 10, max 30; step times (ms) 1..10 pooled.
  std::vector<TrainBenchmarkResult> runs{run_with(30, {0.001, 0.002, 0.003}, 1.0, 3.0, 100),
                                         run_with(10, {0.004, 0.005, 0.006, 0.007}, 0.5, 1.5, 300),
                                         run_with(20, {0.008, 0.009, 0.010}, 0.5, 1.5, 200)};
  const auto p = summarize_sweep_point(Precision::amp_fp16, 64, runs);
  EXPECT_EQ(p["precision"], "amp_fp16");
  EXPECT_EQ(p["batch_size"], 64);
  EXPECT_EQ(p["world_size"], 2);
  EXPECT_EQ(p["ips"].size(), 3u);
  EXPECT_DOUBLE_EQ(p["ips_median"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(p["ips_min"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(p["ips_max"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(p["ips_per_rank_median"].get<double>(), 10.0);
  // numpy.percentile(range(1, 11), q): 50 -> 5.5, 90 -> 9.1, 99 -> 9.91; mean 5.5.
  EXPECT_NEAR(p["step_time_ms"]["p50"].get<double>(), 5.5, 1e-9);
  EXPECT_NEAR(p["step_time_ms"]["p90"].get<double>(), 9.1, 1e-9);
  EXPECT_NEAR(p["step_time_ms"]["p99"].get<double>(), 9.91, 1e-9);
  EXPECT_NEAR(p["step_time_ms"]["mean"].get<double>(), 5.5, 1e-9);
  EXPECT_DOUBLE_EQ(p["data_wait_share"].get<double>(), 2.0 / 8.0);
  EXPECT_EQ(p["peak_host_rss_bytes"], 300);
  EXPECT_FALSE(p.contains("gpu_memory_used_bytes"));
  // Even count: the median is the mean of the middle two.
  runs.pop_back();
  EXPECT_DOUBLE_EQ(summarize_sweep_point(Precision::fp32, 8, runs)["ips_median"].get<double>(), 20.0);
  EXPECT_THROW(summarize_sweep_point(Precision::fp32, 8, {}), Error);
}

TEST(BenchSweep, BadFlags) {
  TrainSweepConfig c;
  c.base.device = "cpu";
  c.base.data = DataKind::synthetic;
  std::ostringstream out;
  c.batch_sizes = {};
  EXPECT_THROW(run_train_sweep(c, out), Error);
  c.batch_sizes = {0};
  EXPECT_THROW(run_train_sweep(c, out), Error);
  c.batch_sizes = {4};
  c.repeats = 0;
  EXPECT_THROW(run_train_sweep(c, out), Error);
  c.repeats = 1;
  c.precisions = {"amp-fp16"};  // refused before anything runs (fp16 AMP: CUDA only)
  EXPECT_THROW(run_train_sweep(c, out), Error);
  EXPECT_TRUE(out.str().empty()) << out.str();
}

TEST(BenchSweep, ShortCpuSweepWritesASchemaConformingReport) {
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "bench_sweep_test";
  fs::remove_all(dir);
  TrainSweepConfig c;
  c.base.device = "cpu";
  c.base.arch = "resnet18";
  c.base.crop_size = 32;
  c.base.data = DataKind::synthetic;
  c.base.num_classes = 10;
  c.base.benchmark_steps = 3;
  c.base.benchmark_warmup_steps = 1;
  c.batch_sizes = {2, 4};
  c.precisions = {"fp32"};
  c.repeats = 2;
  c.report_file = (dir / "sweep.json").string();
  std::ostringstream out;
  const auto rec = run_train_sweep(c, out);
  EXPECT_NE(out.str().find("| fp32 | 4 | 1 |"), std::string::npos) << out.str();

  std::ifstream f(c.report_file);
  std::string line, extra;
  ASSERT_TRUE(std::getline(f, line));
  EXPECT_FALSE(std::getline(f, extra)) << "one line expected";
  const auto j = nlohmann::json::parse(line);  // the file is one JSON document
  EXPECT_EQ(check_report_line(j), std::vector<std::string>{});
  EXPECT_EQ(j["type"], "train_sweep");
  EXPECT_EQ(j["backend"], "onednn");
  EXPECT_EQ(j["repeats"], 2);
  EXPECT_TRUE(j["environment"].contains("cpu_model"));
  EXPECT_TRUE(j["environment"].contains("onednn"));
  EXPECT_TRUE(j["environment"].contains("git_revision"));
  ASSERT_EQ(j["points"].size(), 2u);
  for (const auto& p : j["points"]) {
    ASSERT_EQ(p["ips"].size(), 2u);
    for (const auto& v : p["ips"]) EXPECT_GT(v.get<double>(), 0);
    EXPECT_GT(p["step_time_ms"]["p50"].get<double>(), 0);
    EXPECT_GE(p["data_wait_share"].get<double>(), 0);
    EXPECT_LE(p["data_wait_share"].get<double>(), 1);
    EXPECT_GT(p["peak_host_rss_bytes"].get<int64_t>(), 0);
  }
  // rn50 report reads it: two throughput points on 1 device.
  const ReportInputs in = load_report_inputs({c.report_file});
  ASSERT_EQ(in.throughput.size(), 2u);
  EXPECT_EQ(in.throughput[0].ips.size(), 2u);
  EXPECT_EQ(in.throughput[0].devices, 1);
  EXPECT_EQ(rec["points"][1]["batch_size"], 4);
}

}  // namespace
}  // namespace rn50
