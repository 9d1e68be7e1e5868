// rn50 report: the tables on hand-made results (speedup, efficiency, precision speedup, time to
// train; a missing 1-device point is an error), the renderings, DLLogger lines written and
// parsed back, both report formats read into the same curve, load errors, and the plots.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "core/dllogger.h"
#include "core/report.h"
#include "require.h"
#include "rn50/error.h"
#include "rn50/report.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

ThroughputPoint pt(const std::string& prec, int batch, int devices, std::vector<double> ips) {
  ThroughputPoint p;
  p.source = "test";
  p.hardware = "Test GPU";
  p.arch = "resnet50";
  p.precision = prec;
  p.batch_size = batch;
  p.devices = devices;
  p.ips = ips;
  std::sort(ips.begin(), ips.end());
  p.min = ips.front();
  p.max = ips.back();
  p.median =
      ips.size() % 2 ? ips[ips.size() / 2] : (ips[ips.size() / 2 - 1] + ips[ips.size() / 2]) / 2;
  return p;
}

/// The row of `t` whose columns `col` equal `want` (in order).
const std::vector<nlohmann::ordered_json>* find_row(
    const ReportTable& t, const std::vector<std::pair<std::string, nlohmann::ordered_json>>& want) {
  for (const auto& r : t.rows) {
    bool ok = true;
    for (const auto& [col, v] : want) {
      const auto it = std::find(t.columns.begin(), t.columns.end(), col);
      if (it == t.columns.end() || r[it - t.columns.begin()] != v) ok = false;
    }
    if (ok) return &r;
  }
  return nullptr;
}

double at(const ReportTable& t, const std::vector<nlohmann::ordered_json>& row,
          const std::string& col) {
  const auto it = std::find(t.columns.begin(), t.columns.end(), col);
  EXPECT_NE(it, t.columns.end()) << col;
  return row[it - t.columns.begin()].is_null() ? NAN : row[it - t.columns.begin()].get<double>();
}

TEST(ReportTables, SpeedupAndEfficiency) {
  const std::vector<ThroughputPoint> pts{
      pt("amp_fp16", 256, 1, {1000, 990, 1010}), pt("amp_fp16", 256, 2, {1900}),
      pt("amp_fp16", 256, 8, {7000, 7200}), pt("fp32", 256, 1, {400}), pt("fp32", 256, 8, {3000})};
  const ReportTable s = scaling_table(pts);
  const auto* r8 = find_row(s, {{"precision", "amp_fp16"}, {"devices", 8}});
  ASSERT_NE(r8, nullptr);
  EXPECT_DOUBLE_EQ(at(s, *r8, "img/s"), 7100);
  EXPECT_DOUBLE_EQ(at(s, *r8, "speedup"), 7.1);
  EXPECT_DOUBLE_EQ(at(s, *r8, "efficiency %"), 100 * 7.1 / 8);
  const auto* r2 = find_row(s, {{"precision", "amp_fp16"}, {"devices", 2}});
  ASSERT_NE(r2, nullptr);
  EXPECT_DOUBLE_EQ(at(s, *r2, "efficiency %"), 95);
  const auto* f8 = find_row(s, {{"precision", "fp32"}, {"devices", 8}});
  ASSERT_NE(f8, nullptr);
  EXPECT_DOUBLE_EQ(at(s, *f8, "speedup"), 7.5);

  const ReportTable p = precision_speedup_table(pts);
  const auto* a1 = find_row(p, {{"precision", "amp_fp16"}, {"devices", 1}});
  ASSERT_NE(a1, nullptr);
  EXPECT_DOUBLE_EQ(at(p, *a1, "over fp32"), 2.5);
  EXPECT_TRUE(std::isnan(at(p, *a1, "over tf32")));
  EXPECT_EQ(find_row(p, {{"precision", "amp_fp16"}, {"devices", 2}}), nullptr);  // no fp32 at 2

  const ReportTable tt = time_to_train_table(pts);
  const auto* t1 = find_row(tt, {{"precision", "fp32"}, {"devices", 1}});
  ASSERT_NE(t1, nullptr);
  EXPECT_DOUBLE_EQ(at(tt, *t1, "hours"), 90.0 * 1281167 / 400 / 3600);

  const ReportTable th = throughput_table(pts);
  const auto* m1 = find_row(th, {{"precision", "amp_fp16"}, {"devices", 1}});
  ASSERT_NE(m1, nullptr);
  EXPECT_DOUBLE_EQ(at(th, *m1, "img/s median"), 1000);
  EXPECT_DOUBLE_EQ(at(th, *m1, "spread %"), 2.0);
}

TEST(ReportTables, SamePointFromTwoFilesPoolsTheRuns) {
  ThroughputPoint a = pt("fp32", 32, 1, {10, 12}), b = pt("fp32", 32, 1, {20});
  b.source = "other";
  const ReportTable th = throughput_table({a, b});
  ASSERT_EQ(th.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(at(th, th.rows[0], "img/s median"), 12);
  EXPECT_EQ(at(th, th.rows[0], "runs"), 3);
}

TEST(ReportTables, MissingOneDevicePointIsAnError) {
  try {
    scaling_table({pt("amp_fp16", 256, 2, {1900}), pt("amp_fp16", 256, 4, {3700})});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no 1-device result for resnet50 amp_fp16 batch 256"), std::string::npos) << m;
    EXPECT_NE(m.find("bench/scaling.sh"), std::string::npos) << m;
  }
  // Only one device: no scaling rows, no error.
  EXPECT_TRUE(scaling_table({pt("fp32", 8, 1, {5})}).rows.empty());
}

TEST(ReportTables, Renderings) {
  ReportInputs in;
  in.throughput = {pt("fp32", 16, 1, {9.5}), pt("fp32", 16, 2, {17.0})};
  const auto tables = build_report(in, /*with_reference=*/true);
  ASSERT_GE(tables.size(), 4u);
  EXPECT_EQ(tables.back().name, "reference");
  const std::string md = render_report(tables, "md");
  EXPECT_NE(md.find("| Test GPU | resnet50 | fp32 | 16 | 2 | 17.0 | 1.79 | 89.5 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("DGX A100 (8x A100 80GB)"), std::string::npos);
  const std::string csv = render_report(tables, "csv");
  EXPECT_NE(csv.find("Test GPU,resnet50,fp32,16,2,17,"), std::string::npos) << csv;
  const auto j = nlohmann::json::parse(render_report(tables, "json"));
  EXPECT_EQ(j["tables"][1]["name"], "scaling");
  EXPECT_DOUBLE_EQ(j["tables"][1]["rows"][1]["speedup"].get<double>(), 17.0 / 9.5);
  EXPECT_THROW(render_report(tables, "html"), Error);
}

TEST(ReportDllogger, LinesParseBackToTheRecord) {
  ReportRecord step("step");
  step.set("epoch", 3).set("step", 120).set("iteration", 20).set("train.loss", 2.5);
  step.set("train.loss_avg", 2.6).set("train.lr", 0.1).set("train.ips", 950.0);
  const std::string line = dllogger_log_line(step.to_json(), 1795445317.25, 12.5);
  ASSERT_EQ(line.rfind("DLLL {", 0), 0u) << line;
  const auto d = parse_dllogger_line(line);
  EXPECT_EQ(d["type"], "LOG");
  EXPECT_EQ(d["step"], nlohmann::json::array({3, 20}));
  EXPECT_EQ(d["timestamp"], "1795445317.250000");
  EXPECT_EQ(d["elapsedtime"], "12.500000");
  EXPECT_TRUE(d["datetime"].is_string());
  EXPECT_DOUBLE_EQ(d["data"]["train.ips"].get<double>(), 950.0);
  const auto back = dllogger_to_record(d);
  EXPECT_EQ(back, nlohmann::json::parse(step.to_json().dump()));
  EXPECT_EQ(check_report_line(back), std::vector<std::string>{});

  nlohmann::ordered_json ep{{"type", "epoch"}, {"schema_version", 2}, {"epoch", 4}};
  EXPECT_EQ(parse_dllogger_line(dllogger_log_line(ep, 1, 0))["step"], nlohmann::json::array({4}));
  nlohmann::ordered_json cfg{{"type", "config"}, {"schema_version", 2}, {"lr", 0.256}};
  EXPECT_EQ(parse_dllogger_line(dllogger_log_line(cfg, 1, 0))["step"], "PARAMETER");
  nlohmann::ordered_json ev{{"type", "eval"}, {"val.top1", 76.1}};
  EXPECT_EQ(parse_dllogger_line(dllogger_log_line(ev, 1, 0))["step"], nlohmann::json::array());
  const auto md =
      parse_dllogger_line(dllogger_metadata_line("train.ips", "images/s", ":.2f", 1, 0));
  EXPECT_EQ(md["type"], "METADATA");
  EXPECT_EQ(md["metadata"]["unit"], "images/s");
  EXPECT_TRUE(dllogger_to_record(md).is_null());
  EXPECT_THROW(parse_dllogger_line("DLLL {not json"), Error);
}

/// Writes the same two epoch records in both formats and reads them back.
TEST(ReportDllogger, BothFormatsGiveTheSameCurve) {
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "report_test";
  fs::remove_all(dir);
  for (auto fmt : {ReportWriter::Format::rn50, ReportWriter::Format::dllogger}) {
    const bool dl = fmt == ReportWriter::Format::dllogger;
    ReportWriter w((dir / (dl ? "run.dlll" : "run.jsonl")).string(), ReportWriter::Mode::truncate,
                   "--report-file", fmt);
    for (int e = 0; e < 2; ++e) {
      ReportRecord r("epoch");
      r.set("epoch", e).set("step", 10 * (e + 1)).set("train.loss", 3.0 - e);
      r.set("train.top1", 20.0 + 10 * e).set("train.top5", 50.0).set("train.lr", 0.1);
      r.set("train.ips", 100.0).set("train.data_time", 0.01).set("train.compute_time", 0.2);
      r.set("train.bad_samples", int64_t{0});
      if (e == 1) r.set("val.top1", 41.5).set("val.top5", 80.0).set("val.loss", 2.2);
      w.write(r);
    }
  }
  const ReportInputs a = load_report_inputs({(dir / "run.jsonl").string()});
  const ReportInputs b = load_report_inputs({(dir / "run.dlll").string()});
  ASSERT_EQ(a.curves.size(), 1u);
  ASSERT_EQ(b.curves.size(), 1u);
  ASSERT_EQ(b.curves[0].epochs.size(), 2u);
  const ReportTable ta = curve_table(a.curves[0]), tb = curve_table(b.curves[0]);
  EXPECT_EQ(ta.rows, tb.rows);
  EXPECT_DOUBLE_EQ(at(tb, tb.rows[1], "val top1 %"), 41.5);
  EXPECT_TRUE(std::isnan(at(tb, tb.rows[0], "val top1 %")));  // epoch 0 not evaluated
}

TEST(ReportLoad, InferenceBenchmarkLines) {
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "report_test_infer";
  fs::remove_all(dir);
  {
    ReportWriter w((dir / "infer.jsonl").string());
    for (int b : {1, 32}) {
      ReportRecord r("infer_benchmark");
      r.set("batch_size", b).set("infer.ips", 40.0 * b).set("infer.latency_avg_ms", 25.0 * b);
      r.set("infer.latency_p50_ms", 24.0 * b).set("infer.latency_p90_ms", 27.0 * b);
      r.set("infer.latency_p95_ms", 28.0 * b).set("infer.latency_p99_ms", 30.0 * b);
      r.set("steps", 20).set("warmup_steps", 3).set("arch", std::string("resnet50"));
      r.set("num_of_class", 1000).set("crop_size", 224).set("precision", std::string("int8"));
      r.set("device", std::string("cpu"));
      w.write(r);
    }
  }
  const ReportInputs in = load_report_inputs({(dir / "infer.jsonl").string()});
  ASSERT_EQ(in.latency.size(), 2u);
  const ReportTable t = latency_table(in.latency);
  EXPECT_DOUBLE_EQ(at(t, t.rows[1], "p99 ms"), 960.0);
  EXPECT_EQ(t.rows[1][2], "int8");
}

PeakRecord peak(const std::string& hw, const std::string& prec, const std::string& op,
                double g) {
  PeakRecord p;
  p.hardware = hw;
  p.device = "cpu";
  p.precision = prec;
  p.op = op;
  p.gflops = g;
  return p;
}

// GFLOP/s = median x GFLOP per image; the share is of the record's own peak, else of a peak
// among the inputs of the same precision and hardware ("cpu" alone: only when the peaks are of
// one machine); none: "-".
TEST(ReportTables, RooflineColumns) {
  ThroughputPoint own = pt("fp32", 32, 1, {10});
  own.hardware = "EPYC";
  own.gflops_per_image = 12;
  own.peak_gflops = 240;  // recorded with --peak-file: wins over the inputs' peaks
  ThroughputPoint bf = pt("amp_bf16", 32, 1, {20});
  bf.hardware = "EPYC";
  bf.gflops_per_image = 12;
  ThroughputPoint bare = pt("amp_bf16", 64, 1, {20});
  bare.hardware = "cpu";  // a benchmark line names only its device
  bare.gflops_per_image = 12;
  ThroughputPoint old = pt("fp32", 64, 1, {10});  // written before the roofline: no GFLOP
  old.hardware = "EPYC";
  PeakTable peaks;
  peaks.add(peak("EPYC", "fp32", "matmul", 100));
  peaks.add(peak("EPYC", "bf16", "matmul", 300));
  peaks.add(peak("EPYC", "bf16", "conv3x3", 480));
  const ReportTable t = throughput_table({own, bf, bare, old}, peaks);
  auto row = [&](const std::string& prec, int batch) {
    const auto* r = find_row(t, {{"precision", prec}, {"batch/device", batch}});
    EXPECT_NE(r, nullptr) << prec << " " << batch;
    return *r;
  };
  EXPECT_DOUBLE_EQ(at(t, row("fp32", 32), "GFLOP/s"), 120);
  EXPECT_DOUBLE_EQ(at(t, row("fp32", 32), "% of peak"), 50);
  EXPECT_DOUBLE_EQ(at(t, row("amp_bf16", 32), "GFLOP/s"), 240);
  EXPECT_DOUBLE_EQ(at(t, row("amp_bf16", 32), "% of peak"), 50) << "bf16's best op: the conv";
  EXPECT_DOUBLE_EQ(at(t, row("amp_bf16", 64), "% of peak"), 50) << "one machine's peaks";
  EXPECT_TRUE(std::isnan(at(t, row("fp32", 64), "GFLOP/s")));
  EXPECT_TRUE(std::isnan(at(t, row("fp32", 64), "% of peak")));
  // Peaks of two machines: a result that names no CPU model matches neither.
  peaks.add(peak("Xeon", "bf16", "matmul", 900));
  const ReportTable t2 = throughput_table({bare, bf}, peaks);
  const auto* r = find_row(t2, {{"batch/device", 64}});
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(std::isnan(at(t2, *r, "% of peak")));
  EXPECT_DOUBLE_EQ(at(t2, *find_row(t2, {{"batch/device", 32}}), "% of peak"), 50);

  LatencyRow l;
  l.arch = "resnet50";
  l.precision = "int8";
  l.device = "cpu";
  l.batch_size = 1;
  l.ips = 50;
  l.gflops_per_image = 8;
  PeakTable one;
  one.add(peak("EPYC", "int8", "conv3x3", 800));
  const ReportTable lt = latency_table({l}, one);
  EXPECT_DOUBLE_EQ(at(lt, lt.rows[0], "GFLOP/s"), 400);
  EXPECT_DOUBLE_EQ(at(lt, lt.rows[0], "% of peak"), 50);
  l.device = "cuda:0";  // CPU peaks are not a GPU's
  EXPECT_TRUE(std::isnan(at(latency_table({l}, one), latency_table({l}, one).rows[0],
                            "% of peak")));
  const ReportTable pk = peak_table(one);
  ASSERT_EQ(pk.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(at(pk, pk.rows[0], "GFLOP/s"), 800);
}

TEST(ReportLoad, PeakAndProfileRecords) {
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "report_test_roofline";
  fs::remove_all(dir);
  {
    ReportWriter w((dir / "r.jsonl").string());
    ReportRecord p("peak");
    p.set("op", std::string("conv3x3")).set("precision", std::string("fp32"));
    p.set("shape", std::string("s")).set("ops_per_call", 1e9).set("calls", 1);
    p.set("warmup_calls", 0).set("impl", std::string("x")).set("isa", std::string("y"));
    p.set("threads", 2).set("device", std::string("cpu")).set("hardware", std::string("EPYC"));
    p.set("onednn", std::string("2.6")).set("gflops", 123.0);
    w.write(p);
    ReportRecord s("peak");  // skipped: no peak
    s.set("op", std::string("matmul")).set("precision", std::string("bf16"));
    s.set("shape", std::string("s")).set("ops_per_call", 1e9).set("calls", 1);
    s.set("warmup_calls", 0).set("impl", std::string("")).set("isa", std::string("y"));
    s.set("threads", 2).set("device", std::string("cpu")).set("hardware", std::string("EPYC"));
    s.set("onednn", std::string("2.6")).set("skipped", std::string("no bf16"));
    w.write(s);
    ReportRecord f("profile");
    f.set("source", std::string("bench infer")).set("arch", std::string("resnet50"));
    f.set("precision", std::string("fp32")).set("device", std::string("cpu"));
    f.set("batch_size", 1).set("crop_size", 224).set("steps", 2).set("step_ms", 10.0);
    f.set("ops_ms", 9.5);
    f.set_json("ops", nlohmann::ordered_json::parse(
                          R"([{"op":"conv fwd","family":"conv","phase":"fwd","calls_per_step":53,)"
                          R"("ms_per_step":9.5,"share":0.95,"gflops":400}])"));
    f.set_json("families", nlohmann::ordered_json::parse(
                               R"([{"family":"conv","ms_per_step":9.5,"share":0.95,"gflops":400}])"));
    w.write(f);
  }
  const ReportInputs in = load_report_inputs({(dir / "r.jsonl").string()});
  ASSERT_EQ(in.peaks.records().size(), 1u);
  EXPECT_DOUBLE_EQ(in.peaks.records()[0].gflops, 123);
  ASSERT_EQ(in.profiles.size(), 1u);
  const ReportTable t = op_profile_table(in.profiles);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][5], "conv fwd");
  EXPECT_DOUBLE_EQ(at(t, t.rows[0], "share %"), 95);
  EXPECT_DOUBLE_EQ(at(t, t.rows[0], "GFLOP/s"), 400);
  EXPECT_EQ(t.rows[1][5], "(between ops: host code)");
  EXPECT_DOUBLE_EQ(at(t, t.rows[1], "ms/step"), 0.5);
  const auto tables = build_report(in, false);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].name, "peak");
  EXPECT_EQ(tables[1].name, "profile");
}

TEST(ReportLoad, ErrorsNameFileAndLine) {
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "report_test_errors";
  fs::create_directories(dir);
  const std::string bad = (dir / "bad.jsonl").string();
  std::ofstream(bad) << "{\"type\":\"config\",\"schema_version\":2}\nthis is not json\n";
  try {
    load_report_inputs({bad});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad + "' line 2: not JSON"), std::string::npos)
        << e.what();
  }
  const std::string empty = (dir / "config_only.jsonl").string();
  std::ofstream(empty) << "{\"type\":\"config\",\"schema_version\":2}\n";
  try {
    load_report_inputs({empty});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to report"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_report_inputs({(dir / "missing.json").string()}), Error);
  EXPECT_THROW(load_report_inputs({}), Error);
}

/// Width and height from a PNG's IHDR chunk (bytes 16-23, big-endian).
std::pair<uint32_t, uint32_t> png_size(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  unsigned char h[24] = {0};
  f.read(reinterpret_cast<char*>(h), sizeof(h));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h) + 1, 3), "PNG");
  auto be = [&](int o) {
    return (uint32_t{h[o]} << 24) | (uint32_t{h[o + 1]} << 16) | (uint32_t{h[o + 2]} << 8) |
           h[o + 3];
  };
  return {be(16), be(20)};
}

TEST(ReportPlots, WritesPngAndSvg) {
  const bool have =
      std::system(
          (std::string(rn50::test::python()) + " -c 'import matplotlib' 2>/dev/null").c_str()) == 0;
  RN50_REQUIRE_OR_SKIP("plot", have,
                       rn50::test::python() << " cannot import matplotlib "
                                               "(apt-get install python3-matplotlib)");
  ReportInputs in;
  in.throughput = {pt("fp32", 16, 1, {9.5, 9.7}), pt("fp32", 16, 2, {17.0, 16.0})};
  TrainingCurve c;
  c.source = "run.jsonl";
  c.epochs = {{0, 3.0, 20, 50, 0.1, 100, NAN, NAN, NAN}, {1, 2.5, 30, 60, 0.1, 100, 2.2, 41, 80}};
  in.curves = {c};
  LatencyRow l{"infer.jsonl", "resnet50", "fp32", "cpu", 1, 40, 25, 24, 27, 28, 30};
  LatencyRow l2 = l;
  l2.batch_size = 32;
  l2.avg_ms = 700;
  l2.p50_ms = 690;
  l2.p90_ms = 720;
  l2.p95_ms = 730;
  l2.p99_ms = 760;
  in.latency = {l, l2};
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "report_test_plots";
  fs::remove_all(dir);
  const auto files = write_report_plots(build_report(in, false), dir.string(), rn50::test::python(),
                                        RN50_SOURCE_DIR "/tools/plot_report.py");
  EXPECT_EQ(files.size(), 6u);
  for (const char* stem : {"throughput_vs_devices", "training_curve", "latency"}) {
    const fs::path png = dir / (std::string(stem) + ".png"),
                   svg = dir / (std::string(stem) + ".svg");
    ASSERT_TRUE(fs::exists(png)) << png;
    EXPECT_EQ(png_size(png), std::make_pair(800u, 500u)) << png;
    ASSERT_TRUE(fs::exists(svg)) << svg;
    EXPECT_GT(fs::file_size(svg), 5000u) << svg;
    std::ifstream f(svg);
    std::string head(200, '\0');
    f.read(head.data(), 200);
    EXPECT_NE(head.find("<svg"), std::string::npos);
  }
  // A missing script is a clear error.
  EXPECT_THROW(write_report_plots(build_report(in, false), dir.string(), rn50::test::python(),
                                  "/nonexistent/plot_report.py"),
               Error);
}

}  // namespace
}  // namespace rn50
