// The roofline commands end to end (issue 33): `rn50 bench peak` (table and peak records), the
// GFLOP per image, achieved GFLOP/s and share of the peak on `rn50 train --benchmark`,
// `rn50 bench train` and `rn50 bench infer` results (--peak-file), --profile (per-op table and
// profile record whose ops sum to the step within 5%), `rn50 report`'s columns and tables, and
// the refusals. Small sizes: these check the figures' arithmetic and the wiring, not speed.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include <cmath>

#include "core/report.h"
#include "config/flags.h"
#include "rn50/graph.h"
#include "test_train_util.h"

using namespace rn50_test;
using nlohmann::json;

namespace {

const std::string kCli = RN50_CLI;

/// Every line of `file` conforms to the report schema.
void expect_schema(const fs::path& file) {
  const std::vector<rn50::ReportField> flags = rn50::config_flag_fields();
  for (const json& line : read_jsonl(file))
    for (const std::string& p : rn50::check_report_line(line, &flags))
      ADD_FAILURE() << file << ": " << p << "\n" << line.dump();
}

/// One peak file per test process: fp32 (a matmul and a conv) and the memory roof (STREAM copy
/// and triad), one timed call each.
const fs::path& peak_file() {
  static TempDir dir("roofline_peak");
  static const fs::path f = [] {
    const fs::path p = dir.path / "peak.jsonl";
    std::string out;
    const int rc = run_command(kCli + " bench peak --precisions fp32,memory --benchmark-steps 1 "
                                      "--benchmark-warmup-steps 0 --report-file " +
                                   p.string(),
                               &out);
    EXPECT_EQ(rc, 0) << out;
    return p;
  }();
  return f;
}

double best_fp32_peak() {
  double best = 0;
  for (const json& r : of_type(read_jsonl(peak_file()), "peak"))
    if (r["precision"] == "fp32") best = std::max(best, r["gflops"].get<double>());
  return best;
}

/// The profile's ops add up to its step within 5%, and to its own ops_ms.
void expect_profile_sums(const json& prof) {
  const double step = prof["step_ms"].get<double>(), ops = prof["ops_ms"].get<double>();
  double sum = 0, fam = 0;
  for (const json& o : prof["ops"]) sum += o["ms_per_step"].get<double>();
  for (const json& f : prof["families"]) fam += f["ms_per_step"].get<double>();
  EXPECT_NEAR(sum, ops, 1e-6 * ops);
  EXPECT_NEAR(fam, ops, 1e-6 * ops);
  EXPECT_GT(step, 0);
  EXPECT_LE(ops, step * 1.0001);
  EXPECT_GE(ops, 0.95 * step) << "the per-op times sum to the step time within 5%";
}

const json* op_row(const json& prof, const std::string& op) {
  for (const json& o : prof["ops"])
    if (o["op"] == op) return &o;
  return nullptr;
}

}  // namespace

TEST(CliRoofline, BenchPeakWritesATableAndRecords) {
  auto lines = of_type(read_jsonl(peak_file()), "peak");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["op"], "matmul");
  EXPECT_EQ(lines[1]["op"], "conv3x3");
  // The memory roof: STREAM copy (2 arrays) and triad (3), 64 Mi floats each.
  for (int i : {2, 3}) {
    const json& r = lines[i];
    EXPECT_EQ(r["op"], i == 2 ? "copy" : "triad");
    EXPECT_EQ(r["precision"], "memory");
    EXPECT_DOUBLE_EQ(r["bytes_per_call"].get<double>(), (i == 2 ? 2 : 3) * 4.0 * (1 << 26));
    EXPECT_NEAR(r["gbps"].get<double>(),
                r["bytes_per_call"].get<double>() / r["seconds_median"].get<double>() / 1e9,
                1e-6 * r["gbps"].get<double>());
  }
  lines.resize(2);
  for (const json& r : lines) {
    EXPECT_EQ(r["precision"], "fp32");
    EXPECT_EQ(r["device"], "cpu");
    EXPECT_GT(r["gflops"].get<double>(), 0);
    EXPECT_NEAR(r["gflops"].get<double>(),
                r["ops_per_call"].get<double>() / r["seconds_median"].get<double>() / 1e9,
                1e-6 * r["gflops"].get<double>());
  }
  expect_schema(peak_file());
  // The table, and a precision this build has no kernels for is refused by name.
  TempDir tmp("roofline_peak_table");
  std::string out;
  ASSERT_EQ(run_command(kCli + " bench peak --precisions int8 --benchmark-steps 1 "
                               "--benchmark-warmup-steps 0",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("| op | precision | shape | GFLOP/s |"), std::string::npos) << out;
  EXPECT_NE(out.find("| matmul | int8 |"), std::string::npos) << out;
  EXPECT_NE(out.find("peak per precision"), std::string::npos) << out;
  EXPECT_EQ(run_command(kCli + " bench peak --precisions fp16", &out), 2) << out;
  EXPECT_NE(out.find("fp32, bf16, int8 and memory"), std::string::npos) << out;
}

// rn50 train --benchmark --profile --peak-file: the roofline fields and the per-op profile.
TEST(CliRoofline, TrainBenchmarkRooflineAndProfile) {
  TempDir tmp("roofline_train");
  const fs::path report = tmp.path / "train.jsonl", conv_log = tmp.path / "conv.log";
  std::string out;
  const int rc = run_command(
      "RN50_CONV_LOG=" + conv_log.string() + " " + kCli +
      " train --benchmark --data synthetic --device cpu --arch resnet18 --crop-size 64 "
             "--batch-size 4 --benchmark-steps 3 --benchmark-warmup-steps 1 --profile "
             "--peak-file " + peak_file().string() + " --report-file " + report.string(),
      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("| op | family | phase | calls/step | ms/step | share % | GFLOP/s |"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("of the measured fp32 peak"), std::string::npos) << out;
  const auto lines = read_jsonl(report);
  const auto bench = of_type(lines, "benchmark");
  ASSERT_EQ(bench.size(), 1u);
  const json& b = bench[0];
  const double g = rn50::train_flops(rn50::describe(rn50::arch_from_name("resnet18"), 1000), 64,
                                     64) / 1e9;
  EXPECT_DOUBLE_EQ(b["gflops_per_image"].get<double>(), g);
  const double achieved = b["train.ips"].get<double>() * g;
  EXPECT_NEAR(b["achieved_gflops"].get<double>(), achieved, 1e-9 * achieved);
  EXPECT_DOUBLE_EQ(b["peak_gflops"].get<double>(), best_fp32_peak());
  EXPECT_NEAR(b["peak_share"].get<double>(), achieved / best_fp32_peak(), 1e-9);
  EXPECT_EQ(b["profiled"], true);
  const auto prof = of_type(lines, "profile");
  ASSERT_EQ(prof.size(), 1u);
  const json& p = prof[0];
  EXPECT_EQ(p["source"], "train --benchmark");
  EXPECT_EQ(p["steps"], 3);
  EXPECT_EQ(p["batch_size"], 4);
  expect_profile_sums(p);
  // Forward, backward-data and backward-weights apart, each with its conv FLOPs.
  for (const char* op : {"conv fwd", "conv bwd_data", "conv bwd_weights"}) {
    const json* o = op_row(p, op);
    ASSERT_NE(o, nullptr) << op;
    EXPECT_GT((*o)["gflops"].get<double>(), 0) << op;
  }
  // Each conv row names the implementations that ran it (the CPU convolution registry), their
  // calls adding up to the row's; RN50_CONV_LOG has one line per direction and shape.
  std::string log;
  {
    std::ifstream f(conv_log);
    log.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (const char* op : {"conv fwd", "conv bwd_data", "conv bwd_weights"}) {
    const json& o = *op_row(p, op);
    ASSERT_TRUE(o.contains("impls")) << o.dump();
    double calls = 0;
    for (const auto& [name, c] : o["impls"].items()) {
      calls += c.get<double>();
      EXPECT_NE(log.find(": " + name + "\n"), std::string::npos) << name << "\n" << log;
    }
    EXPECT_DOUBLE_EQ(calls, o["calls_per_step"].get<double>()) << op;
  }
  EXPECT_NE(log.find("conv fwd x [4,3,64,64] w [64,3,7,7] y [4,64,32,32] stride 2 pad 3 "),
            std::string::npos)
      << log;
  EXPECT_NE(out.find("| implementations (calls/step) |"), std::string::npos) << out;
  // ResNet-18: 20 convs forward and backward-weights, 19 backward-data (not the stem's).
  EXPECT_DOUBLE_EQ((*op_row(p, "conv fwd"))["calls_per_step"].get<double>(), 20);
  EXPECT_DOUBLE_EQ((*op_row(p, "conv bwd_data"))["calls_per_step"].get<double>(), 19);
  EXPECT_NE(op_row(p, "sgd update"), nullptr);
  EXPECT_NE(op_row(p, "batchnorm bwd"), nullptr);
  EXPECT_TRUE((*op_row(p, "sgd update"))["gflops"].is_null());
  // The roofline: both roofs from the peak file, every op's least time, the step's share.
  ASSERT_TRUE(p.contains("roofline")) << p.dump();
  const json& roof = p["roofline"];
  EXPECT_GT(roof["memory_gbps"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(roof["peak_gflops"]["fp32"].get<double>(), best_fp32_peak());
  const double roof_ms = roof["roof_ms_per_step"].get<double>();
  double sum = 0;
  for (const json& o : p["ops"]) sum += o["roof_ms_per_step"].get<double>();
  EXPECT_NEAR(roof_ms, sum, 1e-9 * sum) << "the step's roofline time is its ops'";
  EXPECT_NEAR(roof["roof_share"].get<double>(), roof_ms / p["step_ms"].get<double>(), 1e-12);
  // Not also below step_ms: the peaks and the step are timed apart, and on a machine whose
  // speed moves with its neighbours (or under a parallel ctest) either can be the slow one.
  EXPECT_GT(roof_ms, 0);
  const json& conv = *op_row(p, "conv fwd");
  EXPECT_GT(conv["gbps"].get<double>(), 0);
  EXPECT_GT(conv["roof_share"].get<double>(), 0);
  EXPECT_GT((*op_row(p, "sgd update"))["gbps"].get<double>(), 0) << "bytes without FLOPs";
  EXPECT_NE(out.find("| GB/s | roof ms | % of roof |"), std::string::npos) << out;
  EXPECT_NE(out.find("roofline: the step needs"), std::string::npos) << out;
  expect_schema(report);

  // rn50 report: the throughput table's GFLOP/s and share columns, and the profile table.
  ASSERT_EQ(run_command(kCli + " report " + report.string() + " " + peak_file().string(), &out),
            0)
      << out;
  EXPECT_NE(out.find("| GFLOP/s | % of peak |"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("| {:.1f} | {:.1f} |", achieved,
                                 100 * achieved / best_fp32_peak())),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("### Per-op profile"), std::string::npos) << out;
  EXPECT_NE(out.find("| GB/s | % of roof |"), std::string::npos) << out;
  EXPECT_NE(out.find("(the step: roofline time)"), std::string::npos) << out;
  EXPECT_NE(out.find("### Measured peak"), std::string::npos) << out;
  EXPECT_NE(out.find("| memory | triad |"), std::string::npos) << out;
}

// rn50 bench infer --profile --peak-file: forward GFLOP per image, share, one profile per batch.
TEST(CliRoofline, BenchInferRooflineAndProfile) {
  TempDir tmp("roofline_infer");
  const fs::path report = tmp.path / "infer.jsonl";
  std::string out;
  const int rc = run_command(
      kCli + " bench infer --device cpu --arch resnet18 --crop-size 64 --batch-sizes 1,2 "
             "--benchmark-steps 3 --benchmark-warmup-steps 1 --profile --peak-file " +
          peak_file().string() + " --report-file " + report.string(),
      &out);
  ASSERT_EQ(rc, 0) << out;
  const auto lines = read_jsonl(report);
  const auto inf = of_type(lines, "infer_benchmark");
  const auto prof = of_type(lines, "profile");
  ASSERT_EQ(inf.size(), 2u);
  ASSERT_EQ(prof.size(), 2u);
  const double g =
      rn50::forward_flops(rn50::describe(rn50::arch_from_name("resnet18"), 1000), 64, 64) / 1e9;
  for (const json& r : inf) {
    EXPECT_EQ(r["device"], "cpu");
    EXPECT_DOUBLE_EQ(r["gflops_per_image"].get<double>(), g);
    const double achieved = r["infer.ips"].get<double>() * g;
    EXPECT_NEAR(r["peak_share"].get<double>(), achieved / best_fp32_peak(), 1e-9);
  }
  for (const json& p : prof) {
    EXPECT_EQ(p["source"], "bench infer");
    expect_profile_sums(p);
    const json* conv = op_row(p, "conv fwd (bias, add, relu fused)");
    ASSERT_NE(conv, nullptr) << p.dump();
    EXPECT_GT((*conv)["gflops"].get<double>(), 0);
    // ResNet-18's 20 convs: oneDNN's, and on CPUs without AVX-512 the 3x3 stride-1 ones our
    // Winograd takes, in a row of their own.
    double convs = 0;
    for (const json& o : p["ops"])
      if (o["family"] == "conv" && o["phase"] == "fwd") convs += o["calls_per_step"].get<double>();
    EXPECT_DOUBLE_EQ(convs, 20) << p.dump();
    EXPECT_NE(op_row(p, "reorder input (f32 -> engine layout)"), nullptr);
  }
  EXPECT_EQ(prof[1]["batch_size"], 2);
  expect_schema(report);
  ASSERT_EQ(run_command(kCli + " report " + report.string(), &out), 0) << out;
  EXPECT_NE(out.find("| p99 ms | GFLOP/s | % of peak |"), std::string::npos) << out;
}

// A bench train sweep records GFLOP per image, and per point the achieved GFLOP/s and share.
TEST(CliRoofline, BenchTrainSweepRoofline) {
  TempDir tmp("roofline_sweep");
  const fs::path sweep = tmp.path / "sweep.json";
  std::string out;
  ASSERT_EQ(run_command(kCli + " bench train --device cpu --arch resnet18 --crop-size 32 "
                               "--batch-sizes 2 --repeats 1 --benchmark-steps 1 "
                               "--benchmark-warmup-steps 1 --peak-file " +
                            peak_file().string() + " --report-file " + sweep.string(),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("| GFLOP/s | % of peak |"), std::string::npos) << out;
  const json s = read_jsonl(sweep).at(0);
  const double g =
      rn50::train_flops(rn50::describe(rn50::arch_from_name("resnet18"), 1000), 32, 32) / 1e9;
  EXPECT_DOUBLE_EQ(s["gflops_per_image"].get<double>(), g);
  const json& pt = s["points"][0];
  EXPECT_NEAR(pt["achieved_gflops"].get<double>(), pt["ips_median"].get<double>() * g, 1e-9);
  EXPECT_DOUBLE_EQ(pt["peak_gflops"].get<double>(), best_fp32_peak());
  EXPECT_NEAR(pt["peak_share"].get<double>(), pt["achieved_gflops"].get<double>() /
                                                  best_fp32_peak(), 1e-12);
  expect_schema(sweep);
}

TEST(CliRoofline, Refusals) {
  TempDir tmp("roofline_refuse");
  std::string out;
  EXPECT_NE(run_command(kCli + " train --data synthetic --profile", &out), 0) << out;
  EXPECT_NE(out.find("--profile"), std::string::npos) << out;
  EXPECT_NE(out.find("add --benchmark"), std::string::npos) << out;
  EXPECT_NE(run_command(kCli + " train --data synthetic --peak-file x.jsonl", &out), 0) << out;
  EXPECT_NE(out.find("--peak-file"), std::string::npos) << out;
  const std::string missing = (tmp.path / "none.jsonl").string();
  EXPECT_NE(run_command(kCli + " bench infer --arch resnet18 --crop-size 32 --batch-sizes 1 "
                               "--benchmark-steps 1 --peak-file " + missing,
                        &out),
            0);
  EXPECT_NE(out.find(missing), std::string::npos) << out;
  EXPECT_NE(out.find("rn50 bench peak"), std::string::npos) << out;
  EXPECT_EQ(run_command(kCli + " bench peak --profile", &out), 2) << out;
  EXPECT_EQ(run_command(kCli + " eval --profile", &out), 2) << out;
  // The convolution algorithm switch of the CPU backend (src/backend/cpu/conv_algo.h): a bad
  // value is named (--device cpu: on a GPU machine auto picks the GPU, which has no such switch).
  EXPECT_NE(run_command("RN50_CONV_ALGO=fft " + kCli +
                            " train --device cpu --benchmark --data synthetic --arch resnet18 "
                            "--crop-size 32 "
                            "--batch-size 2 --benchmark-steps 1 --benchmark-warmup-steps 0",
                        &out),
            0);
  EXPECT_NE(out.find("RN50_CONV_ALGO is 'fft'"), std::string::npos) << out;
  EXPECT_NE(out.find("direct"), std::string::npos) << out;
}
