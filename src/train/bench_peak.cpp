// rn50: `rn50 bench peak` (run_bench_peak, include/rn50/roofline.h): the machine's own limit,
// oneDNN's large matmul and 3x3 convolution per precision (measured by measure_cpu_peak,
// src/backend/cpu/peak.cpp) and the memory bandwidth (STREAM copy and triad,
// measure_cpu_bandwidth), as tables and as "peak" report records that --peak-file reads.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <ostream>

#include "core/check.h"
#include "core/environment.h"
#include "core/report.h"
#include "core/stats.h"
#include "rn50/backend.h"
#include "rn50/roofline.h"

namespace rn50 {

std::vector<PeakMeasurement> run_bench_peak(const PeakBenchConfig& cfg, std::ostream& out) {
  const std::vector<std::string> all{"fp32", "bf16", "int8", "memory"};
  std::vector<std::string> precisions;
  for (const std::string& p : cfg.precisions.empty() ? all : cfg.precisions) {
    std::string l = p;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    RN50_CHECK(std::find(all.begin(), all.end(), l) != all.end(),
               "--precisions {}: bench peak measures fp32, bf16, int8 and memory (bandwidth)", p);
    if (std::find(precisions.begin(), precisions.end(), l) == precisions.end())
      precisions.push_back(l);
  }
  RN50_CHECK(cfg.calls >= 1, "--benchmark-steps {}: must be >= 1", cfg.calls);
  RN50_CHECK(cfg.warmup >= 0, "--benchmark-warmup-steps {}: must be >= 0", cfg.warmup);
  // The report file is opened before the runs, so a bad path fails now.
  ReportWriter report(cfg.report_file, ReportWriter::Mode::append);

  const nlohmann::ordered_json host = host_environment();
  const std::string hardware = host.value("cpu_model", std::string("unknown"));
  std::string onednn = "unknown";
  for (const auto& [k, v] : make_backend("onednn")->environment())
    if (k == "onednn") onednn = v;
  const std::string isa = onednn_cpu_isa();
  const int threads = omp_get_max_threads();
  out << fmt::format(
      "bench peak: oneDNN {} on {} (ISA {}), {} thread(s); {} timed calls after {} per op and "
      "precision\n\n| op | precision | shape | GFLOP/s | median ms | min ms | oneDNN impl |\n"
      "|---|---|---|---|---|---|---|\n",
      onednn, hardware, isa, threads, cfg.calls, cfg.warmup);
  out.flush();

  std::vector<PeakMeasurement> all_m;
  std::map<std::string, const PeakMeasurement*> best;
  const bool memory = std::find(precisions.begin(), precisions.end(), "memory") != precisions.end();
  precisions.erase(std::remove(precisions.begin(), precisions.end(), "memory"), precisions.end());
  // The fields every peak record shares; the timings when it was measured.
  auto record = [&](const PeakMeasurement& m) {
    ReportRecord r("peak");
    r.set("op", m.op)
        .set("precision", m.precision)
        .set("shape", m.shape)
        .set("calls", cfg.calls)
        .set("warmup_calls", cfg.warmup)
        .set("impl", m.impl)
        .set("isa", isa)
        .set("threads", threads)
        .set("device", std::string("cpu"))
        .set("hardware", hardware)
        .set("onednn", onednn);
    if (!m.seconds.empty())
      r.set("seconds_median", percentile(m.seconds, 50))
          .set("seconds_min", *std::min_element(m.seconds.begin(), m.seconds.end()));
    return r;
  };
  for (const std::string& p : precisions) {
    for (const char* op : {"matmul", "conv3x3"}) {
      PeakMeasurement m = measure_cpu_peak(op, p, cfg.calls, cfg.warmup);
      ReportRecord r = record(m);
      r.set("ops_per_call", m.ops_per_call);
      if (m.skipped.empty()) {
        const double med = percentile(m.seconds, 50);
        const double mn = *std::min_element(m.seconds.begin(), m.seconds.end());
        r.set("gflops", m.gflops);
        out << fmt::format("| {} | {} | {} | {:.1f} | {:.2f} | {:.2f} | {} |\n", m.op, p, m.shape,
                           m.gflops, 1e3 * med, 1e3 * mn, m.impl);
      } else {
        r.set("skipped", m.skipped);
        out << fmt::format("| {} | {} | {} | skipped | - | - | {} |\n", m.op, p, m.shape,
                           m.skipped);
      }
      out.flush();
      report.write(r);
      all_m.push_back(std::move(m));
    }
  }
  const size_t compute_end = all_m.size();
  if (memory) {
    out << fmt::format("\n| memory kernel | arrays | GB/s | median ms | min ms |\n"
                       "|---|---|---|---|---|\n");
    for (const char* kernel : {"copy", "triad"}) {
      PeakMeasurement m = measure_cpu_bandwidth(kernel, cfg.stream_elements, cfg.calls, cfg.warmup);
      const double med = percentile(m.seconds, 50);
      const double mn = *std::min_element(m.seconds.begin(), m.seconds.end());
      ReportRecord r = record(m);
      r.set("bytes_per_call", m.bytes_per_call).set("gbps", m.gbps);
      out << fmt::format("| {} | {} | {:.1f} | {:.2f} | {:.2f} |\n", m.op, m.shape, m.gbps,
                         1e3 * med, 1e3 * mn);
      out.flush();
      report.write(r);
      all_m.push_back(std::move(m));
    }
  }
  for (size_t i = 0; i < compute_end; ++i) {
    const PeakMeasurement& m = all_m[i];
    if (m.skipped.empty() && (!best.count(m.precision) || m.gflops > best[m.precision]->gflops))
      best[m.precision] = &m;
  }
  out << "\npeak per precision (the better op; int8 in GOP/s):";
  for (const std::string& p : precisions)
    out << (best.count(p) ? fmt::format(" {} {:.1f} ({})", p, best[p]->gflops, best[p]->op)
                          : fmt::format(" {} skipped", p));
  if (memory) {
    const PeakMeasurement* bw = nullptr;
    for (size_t i = compute_end; i < all_m.size(); ++i)
      if (!bw || all_m[i].gbps > bw->gbps) bw = &all_m[i];
    out << fmt::format("; memory {:.1f} GB/s ({})", bw->gbps, bw->op);
  }
  out << "\n";
  if (report.enabled())
    out << fmt::format("bench peak: appended to {}; pass --peak-file {} to rn50 bench train, "
                       "bench infer or train --benchmark for their share of it\n",
                       cfg.report_file, cfg.report_file);
  return all_m;
}

}  // namespace rn50
