// rn50: OpProfiler, the per-op profile's counters, and its summary, table and JSON
// (include/rn50/profile.h). The decorator that times a backend's ops is
// src/backend/profiling_backend.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_map>

#include "core/check.h"
#include "rn50/profile.h"

namespace rn50 {

namespace {
using Clock = std::chrono::steady_clock;
thread_local OpProfiler* g_current = nullptr;
}  // namespace

struct OpProfiler::Impl {
  struct Acc {
    int64_t calls = 0, unbounded = 0;
    double seconds = 0, flops = 0, bytes = 0, roof_seconds = 0;
    std::map<std::string, int64_t> impls;
  };
  /// An op under way: when it started and how long the ops nested in it took.
  struct Frame {
    const ProfileOp* op;
    double flops, bytes;
    const char* precision;
    Clock::time_point start;
    double child_seconds;
    const char* impl;  ///< note_impl's name, or nullptr
  };
  std::unordered_map<const ProfileOp*, Acc> acc;
  std::vector<Frame> stack;
};

OpProfiler::OpProfiler() : impl_(std::make_unique<Impl>()) { impl_->stack.reserve(8); }
OpProfiler::~OpProfiler() = default;

OpProfiler* OpProfiler::current() { return g_current; }

OpProfiler::Activation::Activation(OpProfiler& p) : prev_(g_current) { g_current = &p; }
OpProfiler::Activation::~Activation() { g_current = prev_; }

OpProfiler::Scope::Scope(const ProfileOp& op, double flops, double bytes, const char* precision)
    : p_(g_current) {
  if (p_) p_->begin(op, flops, bytes, precision);
}
OpProfiler::Scope::~Scope() {
  if (p_) p_->end();
}

void OpProfiler::set_roof(const Roof& roof) {
  if (!roof.empty()) roof_ = roof;
}

void OpProfiler::begin(const ProfileOp& op, double flops, double bytes, const char* precision) {
  impl_->stack.push_back({&op, flops, bytes, precision, Clock::now(), 0.0, nullptr});
}

void OpProfiler::end() {
  const Clock::time_point now = Clock::now();
  const Impl::Frame f = impl_->stack.back();
  impl_->stack.pop_back();
  const double elapsed = std::chrono::duration<double>(now - f.start).count();
  Impl::Acc& a = impl_->acc[f.op];
  ++a.calls;
  a.seconds += std::max(0.0, elapsed - f.child_seconds);
  a.flops += f.flops;
  a.bytes += f.bytes;
  if (f.impl) ++a.impls[f.impl];
  if (roof_ && f.precision) {  // no precision: overhead, the roof asks no time for it
    const double r = roof_->seconds(f.flops, f.bytes, f.precision);
    if (r < 0)
      ++a.unbounded;
    else
      a.roof_seconds += r;
  }
  if (!impl_->stack.empty()) impl_->stack.back().child_seconds += elapsed;
}

void OpProfiler::note_impl(const char* impl) {
  if (g_current && !g_current->impl_->stack.empty()) g_current->impl_->stack.back().impl = impl;
}

void OpProfiler::add_step(double seconds) {
  ++steps_;
  step_seconds_ += seconds;
}

std::vector<OpProfiler::Row> OpProfiler::rows() const {
  std::map<std::string, Row> by_name;
  for (const auto& [op, a] : impl_->acc) {
    Row& r = by_name[op->name];
    r.op = op->name;
    r.family = op->family;
    r.phase = op->phase;
    r.calls += a.calls;
    r.seconds += a.seconds;
    r.flops += a.flops;
    r.bytes += a.bytes;
    r.roof_seconds += a.roof_seconds;
    r.unbounded_calls += a.unbounded;
    for (const auto& [name, calls] : a.impls) r.impls[name] += calls;
  }
  std::vector<Row> v;
  for (auto& [name, r] : by_name) v.push_back(std::move(r));
  std::stable_sort(v.begin(), v.end(),
                   [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return v;
}

double OpProfiler::op_seconds() const {
  double s = 0;
  for (const auto& [op, a] : impl_->acc) s += a.seconds;
  return s;
}

ProfileSummary summarize_profile(const OpProfiler& p) {
  RN50_CHECK(p.steps() > 0, "profile: no profiled step was counted");
  ProfileSummary s;
  s.steps = p.steps();
  s.roof = p.roof();
  const double steps = static_cast<double>(p.steps());
  s.step_ms = 1e3 * p.step_seconds() / steps;
  const double step_s = p.step_seconds();
  // Rates and roofline fields of a row or a family from its totals.
  auto rates = [&](auto& o, double flops, double bytes, double seconds, double roof_seconds,
                   int64_t unbounded) {
    if (flops > 0 && seconds > 0) o.gflops = flops / seconds / 1e9;
    if (bytes > 0 && seconds > 0) o.gbps = bytes / seconds / 1e9;
    if (s.roof && unbounded == 0) {
      o.roof_ms = 1e3 * roof_seconds / steps;
      if (roof_seconds > 0 && seconds > 0) o.roof_share = roof_seconds / seconds;
    }
  };
  struct FamTotals {
    double flops = 0, bytes = 0, seconds = 0, roof_seconds = 0;
    int64_t unbounded = 0;
  };
  std::map<std::string, ProfileSummary::Family> fam;
  std::map<std::string, FamTotals> tot;
  double roof_seconds = 0;
  int64_t unbounded = 0;
  for (const OpProfiler::Row& r : p.rows()) {
    ProfileSummary::Op o;
    o.op = r.op;
    o.family = r.family;
    o.phase = r.phase;
    o.calls_per_step = static_cast<double>(r.calls) / steps;
    o.ms_per_step = 1e3 * r.seconds / steps;
    o.share = step_s > 0 ? r.seconds / step_s : 0.0;
    rates(o, r.flops, r.bytes, r.seconds, r.roof_seconds, r.unbounded_calls);
    for (const auto& [name, calls] : r.impls) o.impls[name] = static_cast<double>(calls) / steps;
    s.ops_ms += o.ms_per_step;
    s.ops.push_back(o);
    ProfileSummary::Family& f = fam[r.family];
    f.family = r.family;
    f.ms_per_step += o.ms_per_step;
    f.share += o.share;
    FamTotals& t = tot[r.family];
    t.flops += r.flops;
    t.bytes += r.bytes;
    t.seconds += r.seconds;
    t.roof_seconds += r.roof_seconds;
    t.unbounded += r.unbounded_calls;
    roof_seconds += r.roof_seconds;
    unbounded += r.unbounded_calls;
  }
  for (auto& [name, f] : fam) {
    const FamTotals& t = tot[name];
    rates(f, t.flops, t.bytes, t.seconds, t.roof_seconds, t.unbounded);
    s.families.push_back(f);
  }
  std::stable_sort(s.families.begin(), s.families.end(),
                   [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
  if (s.roof && unbounded == 0) s.roof_ms = 1e3 * roof_seconds / steps;
  return s;
}

namespace {
std::string gf(double g) { return g < 0 ? std::string("-") : fmt::format("{:.1f}", g); }
std::string ms3(double m) { return m < 0 ? std::string("-") : fmt::format("{:.3f}", m); }
std::string pct(double f) { return f < 0 ? std::string("-") : fmt::format("{:.0f}", 100 * f); }
/// "name calls/step, ..." of an op's implementations, the most called first; "-" for none.
std::string impls_cell(const std::map<std::string, double>& impls) {
  if (impls.empty()) return "-";
  std::vector<std::pair<std::string, double>> v(impls.begin(), impls.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [name, calls] : v)
    out += fmt::format("{}{} {:g}", out.empty() ? "" : ", ", name, calls);
  return out;
}
nlohmann::ordered_json num_or_null(double v) {
  return v < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}
}  // namespace

std::string profile_table(const ProfileSummary& s, const std::string& title) {
  const bool roof = s.roof.has_value();
  std::string out = fmt::format(
      "\n{}: {} profiled step(s), step {:.3f} ms, ops {:.3f} ms ({:.1f}% of the step)\n", title,
      s.steps, s.step_ms, s.ops_ms, s.step_ms > 0 ? 100 * s.ops_ms / s.step_ms : 0.0);
  if (roof) {
    std::string peaks;
    for (const auto& [p, g] : s.roof->gflops) peaks += fmt::format("{} {:.0f}, ", p, g);
    const std::string bw =
        s.roof->gbps > 0 ? fmt::format("memory {:.1f} GB/s", s.roof->gbps) : "no memory roof";
    out += s.roof_ms >= 0
               ? fmt::format("roofline: the step needs {:.3f} ms at the machine's limits ({}{}): "
                             "it runs at {:.1f}% of them\n",
                             s.roof_ms, peaks, bw, s.step_ms > 0 ? 100 * s.roof_ms / s.step_ms : 0)
               : fmt::format("roofline ({}{}): some op's precision has no measured peak, so the "
                             "step has no roofline time\n",
                             peaks, bw);
  }
  out += roof ? "\n| op | family | phase | calls/step | ms/step | share % | GFLOP/s | GB/s | "
                "roof ms | % of roof | implementations (calls/step) |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n"
              : "\n| op | family | phase | calls/step | ms/step | share % | GFLOP/s | GB/s | "
                "implementations (calls/step) |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const ProfileSummary::Op& o : s.ops) {
    out += fmt::format("| {} | {} | {} | {:.1f} | {:.3f} | {:.1f} | {} | {} |", o.op, o.family,
                       o.phase, o.calls_per_step, o.ms_per_step, 100 * o.share, gf(o.gflops),
                       gf(o.gbps));
    if (roof) out += fmt::format(" {} | {} |", ms3(o.roof_ms), pct(o.roof_share));
    out += fmt::format(" {} |\n", impls_cell(o.impls));
  }
  const double rest = s.step_ms - s.ops_ms;
  out += fmt::format("| (between ops: host code) | - | - | - | {:.3f} | {:.1f} | - | - |{} - |\n",
                     rest, s.step_ms > 0 ? 100 * rest / s.step_ms : 0.0, roof ? " - | - |" : "");
  out += roof ? "\n| family | ms/step | share % | GFLOP/s | GB/s | roof ms | % of roof |\n"
                "|---|---|---|---|---|---|---|\n"
              : "\n| family | ms/step | share % | GFLOP/s | GB/s |\n|---|---|---|---|---|\n";
  for (const ProfileSummary::Family& f : s.families) {
    out += fmt::format("| {} | {:.3f} | {:.1f} | {} | {} |", f.family, f.ms_per_step,
                       100 * f.share, gf(f.gflops), gf(f.gbps));
    out += roof ? fmt::format(" {} | {} |\n", ms3(f.roof_ms), pct(f.roof_share)) : "\n";
  }
  return out;
}

nlohmann::ordered_json profile_roof_json(const ProfileSummary& s) {
  if (!s.roof) return nullptr;
  nlohmann::ordered_json j;
  j["peak_gflops"] = nlohmann::ordered_json::object();
  for (const auto& [p, g] : s.roof->gflops) j["peak_gflops"][p] = g;
  j["memory_gbps"] = s.roof->gbps > 0 ? nlohmann::ordered_json(s.roof->gbps) : nullptr;
  j["roof_ms_per_step"] = num_or_null(s.roof_ms);
  j["roof_share"] = s.roof_ms >= 0 && s.step_ms > 0 ? nlohmann::ordered_json(s.roof_ms / s.step_ms)
                                                    : nlohmann::ordered_json(nullptr);
  return j;
}

nlohmann::ordered_json profile_ops_json(const ProfileSummary& s) {
  nlohmann::ordered_json v = nlohmann::ordered_json::array();
  for (const ProfileSummary::Op& o : s.ops) {
    nlohmann::ordered_json j;
    j["op"] = o.op;
    j["family"] = o.family;
    j["phase"] = o.phase;
    j["calls_per_step"] = o.calls_per_step;
    j["ms_per_step"] = o.ms_per_step;
    j["share"] = o.share;
    j["gflops"] = num_or_null(o.gflops);
    j["gbps"] = num_or_null(o.gbps);
    if (s.roof) {
      j["roof_ms_per_step"] = num_or_null(o.roof_ms);
      j["roof_share"] = num_or_null(o.roof_share);
    }
    if (!o.impls.empty()) {
      j["impls"] = nlohmann::ordered_json::object();
      for (const auto& [name, calls] : o.impls) j["impls"][name] = calls;
    }
    v.push_back(std::move(j));
  }
  return v;
}

nlohmann::ordered_json profile_families_json(const ProfileSummary& s) {
  nlohmann::ordered_json v = nlohmann::ordered_json::array();
  for (const ProfileSummary::Family& f : s.families) {
    nlohmann::ordered_json j;
    j["family"] = f.family;
    j["ms_per_step"] = f.ms_per_step;
    j["share"] = f.share;
    j["gflops"] = num_or_null(f.gflops);
    j["gbps"] = num_or_null(f.gbps);
    if (s.roof) {
      j["roof_ms_per_step"] = num_or_null(f.roof_ms);
      j["roof_share"] = num_or_null(f.roof_share);
    }
    v.push_back(std::move(j));
  }
  return v;
}

}  // namespace rn50
