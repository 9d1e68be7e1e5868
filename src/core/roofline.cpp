// rn50: the measured peaks read back (PeakTable) and a benchmark's share of them
// (include/rn50/roofline.h). The measurement itself is src/backend/cpu/peak.cpp; the
// `rn50 bench peak` command src/train/bench_peak.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "core/check.h"
#include "core/json_value.h"
#include "core/report.h"
#include "rn50/roofline.h"

namespace rn50 {

PeakTable PeakTable::load(const std::string& path, const std::string& what) {
  std::ifstream f(path);
  RN50_CHECK(f.good(), "{} '{}': cannot open (write it with rn50 bench peak --report-file {})",
             what, path, path);
  PeakTable t;
  int lineno = 0;
  for (std::string line; std::getline(f, line);) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} '{}' line {}", what, path, lineno);
    nlohmann::json r;
    try {
      r = parse_json_limited(line, where);
    } catch (const nlohmann::json::exception&) {
      RN50_FAIL("{}: not JSON (expected the lines rn50 bench peak --report-file writes)", where);
    }
    if (!r.is_object() || r.value("type", "") != "peak") continue;
    // A compute peak holds "gflops", the memory roof "gbps"; a skipped measurement neither.
    const char* field = r.contains("gbps") ? "gbps" : "gflops";
    if (!r.contains(field) || !r[field].is_number()) continue;
    PeakRecord p;
    p.op = json_as<std::string>(r.value("op", nlohmann::json()), where + ": 'op'");
    p.precision =
        json_as<std::string>(r.value("precision", nlohmann::json()), where + ": 'precision'");
    p.device = r.value("device", std::string("cpu"));
    p.hardware = r.value("hardware", std::string());
    const double v = json_as<double>(r[field], where + ": '" + field + "'");
    (std::string(field) == "gbps" ? p.gbps : p.gflops) = v;
    if (v > 0) t.add(std::move(p));
  }
  RN50_CHECK(!f.bad(), "{} '{}': read error", what, path);
  RN50_CHECK(!t.empty(),
             "{} '{}': no measured peak in it (no \"peak\" records); write them with rn50 bench "
             "peak --report-file {}",
             what, path, path);
  return t;
}

void PeakTable::add(PeakRecord r) { records_.push_back(std::move(r)); }

const PeakRecord* PeakTable::best(const std::string& precision, const std::string& device) const {
  const PeakRecord* b = nullptr;
  for (const PeakRecord& r : records_)
    if (r.gflops > 0 && r.precision == precision && r.device == device &&
        (!b || r.gflops > b->gflops))
      b = &r;
  return b;
}

const PeakRecord* PeakTable::best_bandwidth(const std::string& device) const {
  const PeakRecord* b = nullptr;
  for (const PeakRecord& r : records_)
    if (r.gbps > 0 && r.device == device && (!b || r.gbps > b->gbps)) b = &r;
  return b;
}

Roof Roof::from(const PeakTable& t, const std::string& device) {
  Roof roof;
  for (const PeakRecord& r : t.records())
    if (r.gflops > 0 && r.device == device)
      roof.gflops[r.precision] = std::max(roof.gflops[r.precision], r.gflops);
  if (const PeakRecord* bw = t.best_bandwidth(device)) roof.gbps = bw->gbps;
  return roof;
}

double Roof::seconds(double flops, double bytes, const std::string& precision) const {
  double s = 0;
  if (flops > 0) {
    const auto it = gflops.find(precision);
    if (it == gflops.end() || it->second <= 0) return -1;
    s = flops / (it->second * 1e9);
  }
  if (bytes > 0) {
    if (gbps <= 0) return -1;
    s = std::max(s, bytes / (gbps * 1e9));
  }
  return s;
}

std::string peak_precision(const std::string& precision) {
  if (precision == "amp_bf16") return "bf16";
  if (precision == "amp_fp16" || precision == "pure_fp16") return "fp16";
  return precision;
}

RooflineShare set_roofline_fields(ReportRecord& r, double gflops_per_image, double ips,
                                  const PeakTable* peaks, const std::string& precision,
                                  const std::string& device) {
  const double achieved = ips * gflops_per_image;
  r.set("gflops_per_image", gflops_per_image);
  r.set("achieved_gflops", achieved);
  const PeakRecord* p = peaks ? peaks->best(peak_precision(precision), device) : nullptr;
  if (!p) return {};
  const double share = achieved / p->gflops;
  r.set("peak_gflops", p->gflops);
  r.set("peak_op", p->op);
  r.set("peak_share", share);
  return {p, share};
}

}  // namespace rn50
