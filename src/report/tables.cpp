// rn50 report: the tables (include/rn50/report.h) and their Markdown / CSV / JSON text.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/check.h"
#include "core/stats.h"
#include "rn50/precision.h"
#include "rn50/report.h"

namespace rn50 {
namespace {

using ojson = nlohmann::ordered_json;

/// A finite number, or null.
ojson numv(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

/// Where a point belongs: hardware, arch, precision, batch (devices apart).
using PointKey = std::tuple<std::string, std::string, std::string, int>;
PointKey config_of(const ThroughputPoint& p) {
  return {p.hardware, p.arch, p.precision, p.batch_size};
}

/// Points of the same configuration and device count (several files, or a sweep run again)
/// merged: their runs pooled, the summary recomputed.
std::map<PointKey, std::map<int, ThroughputPoint>> merged(const std::vector<ThroughputPoint>& pts) {
  std::map<PointKey, std::map<int, ThroughputPoint>> m;
  for (const ThroughputPoint& p : pts) {
    auto& slot = m[config_of(p)];
    auto it = slot.find(p.devices);
    if (it == slot.end()) {
      slot.emplace(p.devices, p);
      continue;
    }
    ThroughputPoint& q = it->second;
    // Roofline figures survive a merge only where the merged points agree.
    if (!(q.gflops_per_image == p.gflops_per_image)) q.gflops_per_image = NAN;
    if (!(q.peak_gflops == p.peak_gflops)) q.peak_gflops = NAN;
    q.ips.insert(q.ips.end(), p.ips.begin(), p.ips.end());
    if (q.source.find(p.source) == std::string::npos) q.source += ", " + p.source;
    const SampleSummary s = summarize(q.ips);
    q.median = s.median;
    q.min = s.min;
    q.max = s.max;
  }
  return m;
}

/// The peak a result is set against (GFLOP/s, NaN: none): the one its record holds, else the
/// best of `peaks` for its precision measured on the CPU named `hardware` ("cpu": a record
/// that names no model, which takes the peaks only when they are all of one machine).
double peak_for(double recorded, const PeakTable& peaks, const std::string& precision,
                const std::string& hardware) {
  if (std::isfinite(recorded)) return recorded;
  const std::string want = peak_precision(precision);
  std::set<std::string> machines;
  for (const PeakRecord& r : peaks.records()) machines.insert(r.hardware);
  double best = NAN;
  for (const PeakRecord& r : peaks.records()) {
    if (r.precision != want || r.device != "cpu") continue;
    if (hardware == "cpu" ? machines.size() != 1 : r.hardware != hardware) continue;
    if (!(r.gflops <= best)) best = r.gflops;
  }
  return best;
}

/// GFLOP/s and % of peak cells for `ips` images/s.
std::pair<ojson, ojson> roofline_cells(double ips, double gflops_per_image, double peak) {
  const double achieved = ips * gflops_per_image;
  return {numv(achieved), numv(100 * achieved / peak)};
}

std::string cell(const ojson& v, int digits) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return fmt::format("{:.{}f}", v.get<double>(), digits);
  return v.dump();
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

}  // namespace

ReportTable throughput_table(const std::vector<ThroughputPoint>& points,
                             const PeakTable& peaks) {
  ReportTable t;
  t.name = "throughput";
  t.title = "Training throughput (images/s of the whole job; median of the runs)";
  t.columns = {"hardware", "arch", "precision", "batch/device", "devices", "img/s median",
               "min",      "max",  "runs",      "spread %",     "GFLOP/s", "% of peak"};
  t.digits = {0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1};
  for (const auto& [cfg, by_dev] : merged(points))
    for (const auto& [d, p] : by_dev) {
      const auto [gf, share] = roofline_cells(
          p.median, p.gflops_per_image, peak_for(p.peak_gflops, peaks, p.precision, p.hardware));
      t.rows.push_back({p.hardware, p.arch, p.precision, p.batch_size, d, numv(p.median),
                        numv(p.min), numv(p.max), static_cast<int>(p.ips.size()),
                        numv(p.median > 0 ? 100 * (p.max - p.min) / p.median : NAN), gf, share});
    }
  t.note = "spread = (max - min) / median of the runs; warmup steps excluded from every run. "
           "GFLOP/s = median x GFLOP per image (training: 3 x the forward's conv and fc "
           "multiply-adds x 2); % of peak: of the measured peak of the precision (rn50 bench "
           "peak), '-' where none was measured.";
  return t;
}

ReportTable scaling_table(const std::vector<ThroughputPoint>& points) {
  ReportTable t;
  t.name = "scaling";
  t.title = "Scaling: speedup over 1 device and efficiency (speedup / devices)";
  t.columns = {"hardware", "arch",  "precision", "batch/device",
               "devices",  "img/s", "speedup",   "efficiency %"};
  t.digits = {0, 0, 0, 0, 0, 1, 2, 1};
  for (const auto& [cfg, by_dev] : merged(points)) {
    if (by_dev.size() == 1 && by_dev.count(1)) continue;  // one device only: nothing to scale
    const auto one = by_dev.find(1);
    RN50_CHECK(one != by_dev.end(),
               "no 1-device result for {} {} batch {} on {} (have {} devices): speedup and "
               "efficiency need the 1-device median; run the same sweep with one process too "
               "(bench/scaling.sh runs 1, 2, ... processes)",
               std::get<1>(cfg), std::get<2>(cfg), std::get<3>(cfg), std::get<0>(cfg),
               by_dev.begin()->first);
    const double base = one->second.median;
    for (const auto& [d, p] : by_dev) {
      const double speedup = base > 0 ? p.median / base : NAN;
      t.rows.push_back({p.hardware, p.arch, p.precision, p.batch_size, d, numv(p.median),
                        numv(speedup), numv(100 * speedup / d)});
    }
  }
  t.note = "ideal: speedup = devices, efficiency 100%.";
  return t;
}

ReportTable precision_speedup_table(const std::vector<ThroughputPoint>& points) {
  ReportTable t;
  t.name = "precision_speedup";
  t.title = "Precision speedup (median img/s over fp32 / tf32 at the same batch and devices)";
  t.columns = {"hardware",  "arch",  "batch/device", "devices",
               "precision", "img/s", "over fp32",    "over tf32"};
  t.digits = {0, 0, 0, 0, 0, 1, 2, 2};
  // (hardware, arch, batch, devices) -> precision -> median
  std::map<std::tuple<std::string, std::string, int, int>, std::map<std::string, double>> m;
  for (const auto& [cfg, by_dev] : merged(points))
    for (const auto& [d, p] : by_dev)
      m[{p.hardware, p.arch, p.batch_size, d}][p.precision] = p.median;
  for (const auto& [k, by_prec] : m) {
    const std::string fp32_name = precision_name(Precision::fp32),
                      tf32_name = precision_name(Precision::tf32);
    const auto fp32 = by_prec.find(fp32_name), tf32 = by_prec.find(tf32_name);
    if (fp32 == by_prec.end() && tf32 == by_prec.end()) continue;
    for (const auto& [prec, v] : by_prec) {
      if (prec == fp32_name) continue;
      const double over32 = fp32 != by_prec.end() && fp32->second > 0 ? v / fp32->second : NAN;
      const double over_tf =
          tf32 != by_prec.end() && prec != tf32_name && tf32->second > 0 ? v / tf32->second : NAN;
      if (!std::isfinite(over32) && !std::isfinite(over_tf)) continue;
      t.rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), prec,
                        numv(v), numv(over32), numv(over_tf)});
    }
  }
  return t;
}

ReportTable time_to_train_table(const std::vector<ThroughputPoint>& points, int epochs) {
  ReportTable t;
  t.name = "time_to_train";
  t.title = fmt::format("Time to train {} epochs of ImageNet-1k ({} images) at the measured speed",
                        epochs, kImageNet1kTrainImages);
  t.columns = {"hardware", "arch", "precision", "batch/device", "devices", "img/s", "hours"};
  t.digits = {0, 0, 0, 0, 0, 1, 1};
  for (const auto& [cfg, by_dev] : merged(points))
    for (const auto& [d, p] : by_dev)
      t.rows.push_back(
          {p.hardware, p.arch, p.precision, p.batch_size, d, numv(p.median),
           numv(p.median > 0 ? static_cast<double>(epochs) *
                                   static_cast<double>(kImageNet1kTrainImages) / p.median / 3600
                             : NAN)});
  t.note = "training steps only: evaluation and checkpoints not included.";
  return t;
}

ReportTable curve_table(const TrainingCurve& curve) {
  ReportTable t;
  t.name = "training_curve";
  t.title = fmt::format("Training curve: {}", curve.source);
  t.columns = {"epoch", "train loss", "train top1 %", "train top5 %", "lr",
               "img/s", "val loss",   "val top1 %",   "val top5 %"};
  t.digits = {0, 4, 2, 2, 5, 1, 4, 2, 2};
  for (const CurveRow& r : curve.epochs)
    t.rows.push_back({r.epoch, numv(r.loss), numv(r.top1), numv(r.top5), numv(r.lr), numv(r.ips),
                      numv(r.val_loss), numv(r.val_top1), numv(r.val_top5)});
  return t;
}

ReportTable latency_table(const std::vector<LatencyRow>& rows, const PeakTable& peaks) {
  ReportTable t;
  t.name = "latency";
  t.title = "Inference throughput and latency per batch size";
  t.columns = {"source", "arch",   "precision", "device", "batch",   "img/s",    "avg ms",
               "p50 ms", "p90 ms", "p95 ms",    "p99 ms", "GFLOP/s", "% of peak"};
  t.digits = {0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 1, 1};
  for (const LatencyRow& r : rows) {
    const double peak = r.device == "cpu" ? peak_for(r.peak_gflops, peaks, r.precision, "cpu")
                                          : r.peak_gflops;
    const auto [gf, share] = roofline_cells(r.ips, r.gflops_per_image, peak);
    t.rows.push_back({r.source, r.arch, r.precision, r.device, r.batch_size, numv(r.ips),
                      numv(r.avg_ms), numv(r.p50_ms), numv(r.p90_ms), numv(r.p95_ms),
                      numv(r.p99_ms), gf, share});
  }
  t.note = "GFLOP/s = img/s x the forward's GFLOP per image; % of peak: of the measured peak of "
           "the precision (rn50 bench peak; int8 in GOP/s), '-' where none was measured.";
  return t;
}

ReportTable peak_table(const PeakTable& peaks) {
  ReportTable t;
  t.name = "peak";
  t.title = "Measured peak (oneDNN's own large matmul and 3x3 convolution, all cores; memory: "
            "STREAM copy and triad)";
  t.columns = {"hardware", "device", "precision", "op", "GFLOP/s", "GB/s"};
  t.digits = {0, 0, 0, 0, 1, 1};
  for (const PeakRecord& r : peaks.records())
    t.rows.push_back({r.hardware, r.device, r.precision, r.op, numv(r.gflops > 0 ? r.gflops : NAN),
                      numv(r.gbps > 0 ? r.gbps : NAN)});
  t.note = "int8: GOP/s (u8 x s8 -> s32). A precision's peak is the better of its ops; the "
           "memory roof the better of copy and triad.";
  return t;
}

ReportTable op_profile_table(const std::vector<ProfileResult>& profiles) {
  ReportTable t;
  t.name = "profile";
  t.title = "Per-op profile (--profile): exclusive time per step";
  t.columns = {"source", "arch",    "precision", "device", "batch", "op",       "family",
               "phase",  "ms/step", "share %",   "GFLOP/s", "GB/s", "% of roof"};
  t.digits = {0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 1, 1, 0};
  for (const ProfileResult& p : profiles) {
    const std::string src = fmt::format("{} ({})", p.source, p.file);
    for (const ProfileResult::Op& o : p.ops)
      t.rows.push_back({src, p.arch, p.precision, p.device, p.batch_size, o.op, o.family, o.phase,
                        numv(o.ms_per_step), numv(100 * o.share), numv(o.gflops), numv(o.gbps),
                        numv(100 * o.roof_share)});
    const double rest = p.step_ms - p.ops_ms;
    t.rows.push_back({src, p.arch, p.precision, p.device, p.batch_size,
                      "(between ops: host code)", "-", "-", numv(rest),
                      numv(p.step_ms > 0 ? 100 * rest / p.step_ms : NAN), ojson(nullptr),
                      ojson(nullptr), ojson(nullptr)});
    if (std::isfinite(p.roof_ms))
      t.rows.push_back({src, p.arch, p.precision, p.device, p.batch_size,
                        "(the step: roofline time)", "-", "-", numv(p.roof_ms), ojson(nullptr),
                        ojson(nullptr), ojson(nullptr),
                        numv(p.step_ms > 0 ? 100 * p.roof_ms / p.step_ms : NAN)});
  }
  t.note = "share = of the mean profiled step (training: without the data wait); reorders and "
           "copies are ops of their own. GB/s: the bytes each op must read and write (each tensor "
           "once). % of roof (with a peak file holding the memory roof): the op's roofline time, "
           "max(FLOP / peak, bytes / bandwidth), over its time; the last row is the step's.";
  return t;
}

std::vector<ReportTable> build_report(const ReportInputs& in, bool with_reference) {
  std::vector<ReportTable> v;
  auto add = [&v](ReportTable t) {
    if (!t.rows.empty()) v.push_back(std::move(t));
  };
  if (!in.throughput.empty()) {
    add(throughput_table(in.throughput, in.peaks));
    add(scaling_table(in.throughput));
    add(precision_speedup_table(in.throughput));
    add(time_to_train_table(in.throughput));
  }
  for (const TrainingCurve& c : in.curves) add(curve_table(c));
  if (!in.latency.empty()) add(latency_table(in.latency, in.peaks));
  if (!in.peaks.empty()) add(peak_table(in.peaks));
  if (!in.profiles.empty()) add(op_profile_table(in.profiles));
  if (with_reference) add(reference_table());
  return v;
}

std::string render_report(const std::vector<ReportTable>& tables, const std::string& format) {
  RN50_CHECK(format == "md" || format == "csv" || format == "json",
             "--format '{}': expected md, csv or json", format);
  if (format == "json") {
    ojson all = ojson::array();
    for (const ReportTable& t : tables) {
      ojson rows = ojson::array();
      for (const auto& r : t.rows) {
        ojson o;
        for (size_t i = 0; i < t.columns.size(); ++i) o[t.columns[i]] = r[i];
        rows.push_back(std::move(o));
      }
      ojson j;
      j["name"] = t.name;
      j["title"] = t.title;
      j["columns"] = t.columns;
      j["rows"] = std::move(rows);
      if (!t.note.empty()) j["note"] = t.note;
      all.push_back(std::move(j));
    }
    ojson doc;
    doc["tables"] = std::move(all);
    return doc.dump(1) + "\n";
  }
  std::string out;
  for (const ReportTable& t : tables) {
    if (format == "md") {
      out += fmt::format("### {}\n\n|", t.title);
      for (const std::string& c : t.columns) out += " " + c + " |";
      out += "\n|";
      for (size_t i = 0; i < t.columns.size(); ++i) out += "---|";
      out += "\n";
      for (const auto& r : t.rows) {
        out += "|";
        for (size_t i = 0; i < r.size(); ++i)
          out += fmt::format(" {} |", cell(r[i], t.digits[i]));
        out += "\n";
      }
      if (!t.note.empty()) out += "\n" + t.note + "\n";
      out += "\n";
    } else {
      out += fmt::format("# {}\n", t.title);
      for (size_t i = 0; i < t.columns.size(); ++i) out += (i ? "," : "") + csv_quote(t.columns[i]);
      out += "\n";
      for (const auto& r : t.rows) {
        for (size_t i = 0; i < r.size(); ++i) {
          // CSV keeps full precision for numbers: it is for further processing.
          const std::string c = r[i].is_null()             ? std::string()
                                : r[i].is_string()         ? r[i].get<std::string>()
                                : r[i].is_number_integer() ? std::to_string(r[i].get<int64_t>())
                                                           : fmt::format("{}", r[i].get<double>());
          if (i) out += ',';
          out += csv_quote(c);
        }
        out += "\n";
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace rn50
