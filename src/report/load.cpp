// rn50 report: reading sweeps, training reports (rn50 or DLLogger lines), inference benchmark
// lines, measured peaks and per-op profiles into ReportInputs (include/rn50/report.h).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include "core/check.h"
#include "core/dllogger.h"
#include "core/json_value.h"
#include "core/progress.h"
#include "core/stats.h"
#include "rn50/report.h"

namespace rn50 {
namespace {

using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A number field, NaN when absent or null.
double num(const json& r, const char* key) {
  if (!r.contains(key) || !r[key].is_number()) return kNaN;
  return r[key].get<double>();
}

/// A required field, or an error naming the file, line and field.
const json& need(const json& r, const char* key, const std::string& where) {
  RN50_CHECK(r.contains(key) && !r[key].is_null(), "{}: the {} record has no '{}'", where,
             r.value("type", "?"), key);
  return r[key];
}

std::string hardware_of(const json& env, const std::string& device) {
  if (env.contains("gpu") && env["gpu"].is_string()) return env["gpu"];
  if (env.contains("cpu_model") && env["cpu_model"].is_string()) return env["cpu_model"];
  return device;
}

/// A required field as T (type- and range-checked), or an error naming the file, line and field.
template <class T>
T need_as(const json& r, const char* key, const std::string& where) {
  return json_as<T>(need(r, key, where), fmt::format("{}: '{}'", where, key));
}

ThroughputPoint point_from(const std::string& source, const std::string& hardware,
                           const std::string& arch, const std::string& precision, int batch,
                           int devices, std::vector<double> ips) {
  ThroughputPoint p;
  p.source = source;
  p.hardware = hardware;
  p.arch = arch;
  p.precision = precision;
  p.batch_size = batch;
  p.devices = devices;
  const SampleSummary s = summarize(ips);
  p.ips = std::move(ips);
  p.median = s.median;
  p.min = s.min;
  p.max = s.max;
  return p;
}

/// An epoch's row from the fields of an rn50 epoch record or a DLE epoch line (DLE PyTorch logs
/// train.total_ips where rn50 writes train.ips).
CurveRow curve_row(int epoch, const json& d) {
  CurveRow c;
  c.epoch = epoch;
  c.loss = num(d, "train.loss");
  c.top1 = num(d, "train.top1");
  c.top5 = num(d, "train.top5");
  c.lr = num(d, "train.lr");
  c.ips = d.contains("train.total_ips") ? num(d, "train.total_ips") : num(d, "train.ips");
  c.val_loss = num(d, "val.loss");
  c.val_top1 = num(d, "val.top1");
  c.val_top5 = num(d, "val.top5");
  return c;
}

/// Per-file state: the curve being built (epochs in file order; a resumed run's later epochs
/// replace earlier ones with the same number).
struct FileState {
  std::map<int, CurveRow> epochs;
};

void add_record(const json& r, const std::string& file, const std::string& where, ReportInputs& in,
                FileState& st) {
  const std::string type = r.value("type", "");
  if (type == "train_sweep") {
    const json& env = r.contains("environment") ? r["environment"] : json::object();
    const std::string hw = hardware_of(env, r.value("device", "?"));
    const std::string arch = need_as<std::string>(r, "arch", where);
    for (const json& p : need(r, "points", where)) {
      std::vector<double> ips = need_as<std::vector<double>>(p, "ips", where);
      RN50_CHECK(!ips.empty(), "{}: a sweep point has no runs", where);
      in.throughput.push_back(point_from(file, hw, arch, need_as<std::string>(p, "precision", where),
                                         need_as<int>(p, "batch_size", where),
                                         need_as<int>(p, "world_size", where), std::move(ips)));
      in.throughput.back().gflops_per_image = num(r, "gflops_per_image");
      in.throughput.back().peak_gflops = num(p, "peak_gflops");
    }
  } else if (type == "benchmark") {
    in.throughput.push_back(point_from(
        file, need_as<std::string>(r, "device", where), need_as<std::string>(r, "arch", where),
        need_as<std::string>(r, "precision", where), need_as<int>(r, "batch_size", where),
        need_as<int>(r, "world_size", where), {need_as<double>(r, "train.ips", where)}));
    in.throughput.back().gflops_per_image = num(r, "gflops_per_image");
    in.throughput.back().peak_gflops = num(r, "peak_gflops");
  } else if (type == "epoch") {
    const CurveRow c = curve_row(need_as<int>(r, "epoch", where), r);
    st.epochs[c.epoch] = c;
  } else if (type == "infer_benchmark") {
    LatencyRow l;
    l.source = file;
    l.arch = need_as<std::string>(r, "arch", where);
    l.precision = need_as<std::string>(r, "precision", where);
    l.device = need_as<std::string>(r, "device", where);
    l.batch_size = need_as<int>(r, "batch_size", where);
    l.ips = num(r, "infer.ips");
    l.avg_ms = num(r, "infer.latency_avg_ms");
    l.p50_ms = num(r, "infer.latency_p50_ms");
    l.p90_ms = num(r, "infer.latency_p90_ms");
    l.p95_ms = num(r, "infer.latency_p95_ms");
    l.p99_ms = num(r, "infer.latency_p99_ms");
    l.gflops_per_image = num(r, "gflops_per_image");
    l.peak_gflops = num(r, "peak_gflops");
    in.latency.push_back(l);
  } else if (type == "peak") {
    // A compute peak holds "gflops", the memory roof "gbps"; a skipped measurement neither.
    const double gflops = num(r, "gflops"), gbps = num(r, "gbps");
    if (!std::isfinite(gflops) && !std::isfinite(gbps)) return;
    PeakRecord p;
    p.op = need_as<std::string>(r, "op", where);
    p.precision = need_as<std::string>(r, "precision", where);
    p.device = need_as<std::string>(r, "device", where);
    p.hardware = r.value("hardware", std::string());
    p.gflops = std::isfinite(gflops) ? gflops : 0;
    p.gbps = std::isfinite(gbps) ? gbps : 0;
    if (p.gflops > 0 || p.gbps > 0) in.peaks.add(std::move(p));
  } else if (type == "profile") {
    ProfileResult p;
    p.file = file;
    p.source = need_as<std::string>(r, "source", where);
    p.arch = need_as<std::string>(r, "arch", where);
    p.precision = need_as<std::string>(r, "precision", where);
    p.device = need_as<std::string>(r, "device", where);
    p.batch_size = need_as<int>(r, "batch_size", where);
    p.step_ms = need_as<double>(r, "step_ms", where);
    p.ops_ms = need_as<double>(r, "ops_ms", where);
    if (r.contains("roofline") && r["roofline"].is_object())
      p.roof_ms = num(r["roofline"], "roof_ms_per_step");
    for (const json& o : need(r, "ops", where)) {
      ProfileResult::Op op;
      op.op = need_as<std::string>(o, "op", where);
      op.family = need_as<std::string>(o, "family", where);
      op.phase = need_as<std::string>(o, "phase", where);
      op.ms_per_step = need_as<double>(o, "ms_per_step", where);
      op.share = need_as<double>(o, "share", where);
      op.gflops = num(o, "gflops");
      op.gbps = num(o, "gbps");
      op.roof_share = num(o, "roof_share");
      p.ops.push_back(std::move(op));
    }
    in.profiles.push_back(std::move(p));
  }
  // config, step, eval, loader, infer_accuracy: nothing the tables use.
}

/// An epoch line of DLE's own PyTorch logs (step [epoch], no rn50.record): the keys it shares.
bool add_dle_epoch(const json& dlll, FileState& st, const std::string& where) {
  if (!dlll.is_object() || !dlll.contains("type") || dlll["type"] != "LOG" ||
      !dlll.contains("step") || !dlll["step"].is_array() || dlll["step"].size() != 1 ||
      !dlll["step"][0].is_number_integer() || !dlll.contains("data"))
    return false;
  const json& d = dlll["data"];
  if (!d.is_object() || !(d.contains("train.loss") || d.contains("val.top1"))) return false;
  const CurveRow c = curve_row(json_as<int>(dlll["step"][0], where + ": step[0]"), d);
  st.epochs[c.epoch] = c;
  return true;
}

}  // namespace

ReportInputs load_report_inputs(const std::vector<std::string>& files) {
  RN50_CHECK(!files.empty(),
             "rn50 report: give at least one result file (a rn50 bench train "
             "sweep, a --report-file, or rn50 bench infer lines)");
  ReportInputs in;
  ProgressLine progress(stderr, 10.0);  // stdout carries the tables
  int64_t done = 0;
  for (const std::string& file : files) {
    progress.update("report: reading", done++, static_cast<int64_t>(files.size()), 0, file);
    std::ifstream f(file);
    RN50_CHECK(f.good(), "'{}': cannot open", file);
    auto count = [&in] {
      return in.throughput.size() + in.curves.size() + in.latency.size() +
             in.peaks.records().size() + in.profiles.size();
    };
    const size_t before = count();
    FileState st;
    int lineno = 0;
    for (std::string line; std::getline(f, line);) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("'{}' line {}", file, lineno);
      json r;
      if (line.rfind("DLLL ", 0) == 0) {
        json d;
        try {
          d = parse_dllogger_line(line);
        } catch (const Error& e) {
          RN50_FAIL("{}: {}", where, e.what());
        }
        r = dllogger_to_record(d);
        if (r.is_null()) {
          add_dle_epoch(d, st, where);
          continue;
        }
      } else {
        try {
          r = parse_json_limited(line, where);
        } catch (const json::exception&) {
          RN50_FAIL("{}: not JSON (expected an rn50 report, a bench sweep or DLLogger lines)",
                    where);
        }
        RN50_CHECK(r.is_object() && r.contains("type"),
                   "{}: not an rn50 record (a JSON object with \"type\")", where);
      }
      try {
        add_record(r, file, where, in, st);
      } catch (const json::exception& e) {
        RN50_FAIL("{}: a field has the wrong type ({})", where, e.what());
      }
    }
    RN50_CHECK(!f.bad(), "'{}': read error", file);
    if (!st.epochs.empty()) {
      TrainingCurve c;
      c.source = file;
      for (auto& [e, row] : st.epochs) c.epochs.push_back(row);
      in.curves.push_back(std::move(c));
    }
    RN50_CHECK(count() > before,
               "'{}': nothing to report (no train_sweep, benchmark, epoch, infer_benchmark, "
               "peak or profile records)",
               file);
  }
  progress.finish();
  return in;
}

}  // namespace rn50
