// rn50: `rn50 bench train`, the training benchmark sweep (include/rn50/bench.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <ostream>

#include "core/check.h"
#include "core/environment.h"
#include "core/progress.h"
#include "core/report.h"
#include "core/stats.h"
#include "rn50/backend.h"
#include "rn50/bench.h"
#include "rn50/parallel.h"
#include "rn50/roofline.h"
#include "config/config.h"

namespace rn50 {

using json = nlohmann::ordered_json;

std::vector<Precision> backend_precisions(const std::string& backend) {
  if (backend == "cuda") return all_precisions();
  if (make_backend(backend)->supports(Op::conv2d, DType::bf16, Layout::NHWC))
    return {Precision::fp32, Precision::amp_bf16};
  return {Precision::fp32};
}

namespace {
/// The sweep's precisions without --precisions: CUDA's four DLE modes; fp32 on the CPU.
std::vector<Precision> default_precisions(const std::string& backend) {
  if (backend == "cuda")
    return {Precision::fp32, Precision::tf32, Precision::amp_fp16, Precision::amp_bf16};
  return {Precision::fp32};
}
}  // namespace

Config sweep_point_config(const Config& base, Precision precision, int batch_size) {
  const DeviceChoice dev = resolve_device(base.device);
  const std::vector<Precision> have = backend_precisions(dev.backend);
  std::vector<std::string> names;
  for (Precision p : have) names.push_back(precision_name(p));
  RN50_CHECK(std::find(have.begin(), have.end(), precision) != have.end(),
             "--precisions {}: the {} backend (--device {}) does not train in it; it has {}{}",
             precision_name(precision), dev.backend, base.device, fmt::join(names, ", "),
             dev.backend == "cuda" ? "" : " (TF32 and fp16 need a CUDA GPU)");
  Config c = with_precision(base, precision, dev.backend);
  c.batch_size = batch_size;
  c.benchmark = true;
  return c;
}

json summarize_sweep_point(Precision precision, int batch_size,
                           const std::vector<TrainBenchmarkResult>& runs) {
  RN50_CHECK(!runs.empty(), "benchmark point {} batch {}: no runs", precision_name(precision),
             batch_size);
  std::vector<double> ips, per_rank, step_ms;
  double data_s = 0, compute_s = 0;
  int64_t rss = -1, gpu = -1;
  for (const TrainBenchmarkResult& r : runs) {
    ips.push_back(r.ips);
    per_rank.push_back(r.ips_per_rank);
    for (double s : r.step_seconds) step_ms.push_back(1e3 * s);
    data_s += r.data_seconds;
    compute_s += r.compute_seconds;
    rss = std::max(rss, r.peak_host_rss_bytes);
    gpu = std::max(gpu, r.gpu_memory_used_bytes);
  }
  const SampleSummary s = summarize(ips);
  json p;
  p["precision"] = precision_name(precision);
  p["batch_size"] = batch_size;
  p["world_size"] = runs.front().world_size;
  p["ips"] = ips;
  p["ips_median"] = s.median;
  p["ips_min"] = s.min;
  p["ips_max"] = s.max;
  p["ips_per_rank_median"] = summarize(per_rank).median;
  json st = json::object();
  if (!step_ms.empty()) {
    st["mean"] = summarize(step_ms).mean;
    for (int q : {50, 90, 95, 99}) st[fmt::format("p{}", q)] = percentile(step_ms, q);
  }
  p["step_time_ms"] = st;
  p["data_wait_share"] = data_s + compute_s > 0 ? data_s / (data_s + compute_s) : 0.0;
  p["peak_host_rss_bytes"] = rss;
  if (gpu >= 0) p["gpu_memory_used_bytes"] = gpu;
  p["loss"] = runs.back().last_loss;
  // The roofline (rn50/roofline.h): GFLOP/s at the median, and its share of the measured peak.
  const double gflops = runs.front().gflops_per_image;
  if (gflops > 0) {
    const double achieved = s.median * gflops;
    p["achieved_gflops"] = achieved;
    const TrainBenchmarkResult& r = runs.front();
    if (r.peak_gflops > 0) {
      p["peak_gflops"] = r.peak_gflops;
      p["peak_op"] = r.peak_op;
      p["peak_share"] = achieved / r.peak_gflops;
    }
  }
  return p;
}

namespace {

std::string local_iso_time() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &tm);
  return buf;
}

std::string gib(int64_t bytes) {
  return bytes < 0 ? std::string("?")
                   : fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 30));
}

}  // namespace

json run_train_sweep(const TrainSweepConfig& cfg, std::ostream& out) {
  RN50_CHECK(!cfg.batch_sizes.empty(), "--batch-sizes: give at least one");
  for (int b : cfg.batch_sizes) RN50_CHECK(b >= 1, "--batch-sizes: {} is not >= 1", b);
  RN50_CHECK(cfg.repeats >= 1, "--repeats {}: must be >= 1", cfg.repeats);
  const DeviceChoice dev = resolve_device(cfg.base.device);
  std::vector<Precision> precisions;
  for (const std::string& p : cfg.precisions)
    precisions.push_back(parse_precision(p, "--precisions"));
  if (precisions.empty()) precisions = default_precisions(dev.backend);
  // Every point's configuration checked before the first run: a sweep fails in its first
  // second, not after an hour.
  for (Precision p : precisions)
    for (int b : cfg.batch_sizes) validate(sweep_point_config(cfg.base, p, b));

  const ProcessInfo proc = ProcessInfo::from_environment();
  const bool log = proc.rank == 0;
  // The report file is opened (and its folder made) before the runs, so a bad path fails now.
  ReportWriter writer(proc.rank == 0 ? cfg.report_file : std::string());
  const auto t0 = std::chrono::steady_clock::now();
  const std::string started = local_iso_time();
  json points = json::array();
  TrainBenchmarkResult last;
  if (log)
    out << fmt::format(
               "bench train: {} on {} x {} process(es), {} precision(s) x {} batch size(s) x {} "
               "repeats, {} warmup + {} measured steps each, data {}\n",
               cfg.base.arch, dev.name, proc.world_size, precisions.size(), cfg.batch_sizes.size(),
               cfg.repeats, cfg.base.benchmark_warmup_steps, cfg.base.benchmark_steps,
               cfg.base.data == DataKind::synthetic ? std::string("synthetic")
                                                    : cfg.base.image_root)
        << std::flush;
  // A bad --peak-file fails now, before the first run.
  if (!cfg.base.peak_file.empty()) PeakTable::load(cfg.base.peak_file);
  std::string table = fmt::format(
      "\n| precision | batch | procs | img/s median | min | max | step p50 ms | step p90 ms | "
      "data wait | peak host GiB{} | GFLOP/s | % of peak |\n|---|---|---|---|---|---|---|---|---|"
      "---|{}---|---|\n",
      dev.backend == "cuda" ? " | GPU GiB" : "", dev.backend == "cuda" ? "---|" : "");
  ProgressLine progress(stderr);
  const int total_runs = static_cast<int>(precisions.size() * cfg.batch_sizes.size()) * cfg.repeats;
  int run = 0;
  for (Precision p : precisions) {
    for (int b : cfg.batch_sizes) {
      const Config c = sweep_point_config(cfg.base, p, b);
      std::vector<TrainBenchmarkResult> runs;
      for (int r = 0; r < cfg.repeats; ++r) {
        // On a terminal, which run is under way (the result lines below are the log).
        if (log && progress.mode() == ProgressLine::Mode::tty && !cfg.verbose)
          progress.show(fmt::format("bench train: running {} batch {} repeat {}/{} (run {} of {})",
                                    precision_name(p), b, r + 1, cfg.repeats, ++run, total_runs),
                        true);
        runs.push_back(benchmark_train(c, cfg.verbose));
        progress.finish();
        if (log)
          out << fmt::format("bench train: {} batch {} repeat {}/{}: {:.2f} img/s\n",
                             precision_name(p), b, r + 1,
                             cfg.repeats, runs.back().ips)
              << std::flush;
      }
      json pt = summarize_sweep_point(p, b, runs);
      const json& st = pt["step_time_ms"];
      std::string row = fmt::format(
          "| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.1f}% | {} |",
          precision_name(p), b,
          proc.world_size, pt["ips_median"].get<double>(), pt["ips_min"].get<double>(),
          pt["ips_max"].get<double>(), st.value("p50", 0.0), st.value("p90", 0.0),
          100 * pt["data_wait_share"].get<double>(), gib(pt["peak_host_rss_bytes"].get<int64_t>()));
      if (dev.backend == "cuda")
        row += fmt::format(" {} |", gib(pt.value("gpu_memory_used_bytes", int64_t{-1})));
      row += fmt::format(" {} | {} |",
                         pt.contains("achieved_gflops")
                             ? fmt::format("{:.1f}", pt["achieved_gflops"].get<double>())
                             : std::string("-"),
                         pt.contains("peak_share")
                             ? fmt::format("{:.1f}%", 100 * pt["peak_share"].get<double>())
                             : std::string("-"));
      table += row + "\n";
      points.push_back(std::move(pt));
      last = runs.back();
    }
  }
  if (log) out << table << std::flush;

  ReportRecord rec("train_sweep");
  rec.set("version", std::string(kRn50Version));
  rec.set("started", started);
  rec.set("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  json env = host_environment();
  for (const auto& [k, v] : last.environment) env[k] = v;
  rec.set_json("environment", env);
  rec.set("world_size", proc.world_size);
  rec.set("communicator", last.communicator);
  rec.set("backend", last.backend);
  rec.set("device", last.device);
  rec.set("arch", cfg.base.arch);
  rec.set("num_of_class", cfg.base.num_classes > 0 ? cfg.base.num_classes : 1000);
  rec.set("crop_size", cfg.base.crop_size);
  rec.set("data_layout", std::string(layout_name(cfg.base.data_layout)));
  rec.set("data",
          cfg.base.data == DataKind::synthetic ? std::string("synthetic") : cfg.base.image_root);
  rec.set("steps", cfg.base.benchmark_steps);
  rec.set("warmup_steps", cfg.base.benchmark_warmup_steps);
  rec.set("repeats", cfg.repeats);
  if (last.gflops_per_image > 0) rec.set("gflops_per_image", last.gflops_per_image);
  rec.set_json("points", points);
  writer.write(rec);
  if (log && writer.enabled())
    out << fmt::format("bench train: wrote {} (rn50 report {})\n", cfg.report_file,
                       cfg.report_file);
  return rec.to_json();
}

}  // namespace rn50
