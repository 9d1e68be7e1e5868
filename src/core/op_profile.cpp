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
    int64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  /// An op under way: when it started and how long the ops nested in it took.
  struct Frame {
    const ProfileOp* op;
    double flops;
    Clock::time_point start;
    double child_seconds;
  };
  std::unordered_map<const ProfileOp*, Acc> acc;
  std::vector<Frame> stack;
};

OpProfiler::OpProfiler() : impl_(std::make_unique<Impl>()) { impl_->stack.reserve(8); }
OpProfiler::~OpProfiler() = default;

OpProfiler* OpProfiler::current() { return g_current; }

OpProfiler::Activation::Activation(OpProfiler& p) : prev_(g_current) { g_current = &p; }
OpProfiler::Activation::~Activation() { g_current = prev_; }

OpProfiler::Scope::Scope(const ProfileOp& op, double flops) : p_(g_current) {
  if (p_) p_->begin(op, flops);
}
OpProfiler::Scope::~Scope() {
  if (p_) p_->end();
}

void OpProfiler::begin(const ProfileOp& op, double flops) {
  impl_->stack.push_back({&op, flops, Clock::now(), 0.0});
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
  if (!impl_->stack.empty()) impl_->stack.back().child_seconds += elapsed;
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
  const double steps = static_cast<double>(p.steps());
  s.step_ms = 1e3 * p.step_seconds() / steps;
  const double step_s = p.step_seconds();
  std::map<std::string, ProfileSummary::Family> fam;
  std::map<std::string, double> fam_flops, fam_seconds;
  for (const OpProfiler::Row& r : p.rows()) {
    ProfileSummary::Op o;
    o.op = r.op;
    o.family = r.family;
    o.phase = r.phase;
    o.calls_per_step = static_cast<double>(r.calls) / steps;
    o.ms_per_step = 1e3 * r.seconds / steps;
    o.share = step_s > 0 ? r.seconds / step_s : 0.0;
    if (r.flops > 0 && r.seconds > 0) o.gflops = r.flops / r.seconds / 1e9;
    s.ops_ms += o.ms_per_step;
    s.ops.push_back(o);
    ProfileSummary::Family& f = fam[r.family];
    f.family = r.family;
    f.ms_per_step += o.ms_per_step;
    f.share += o.share;
    fam_flops[r.family] += r.flops;
    fam_seconds[r.family] += r.seconds;
  }
  for (auto& [name, f] : fam) {
    if (fam_flops[name] > 0 && fam_seconds[name] > 0)
      f.gflops = fam_flops[name] / fam_seconds[name] / 1e9;
    s.families.push_back(f);
  }
  std::stable_sort(s.families.begin(), s.families.end(),
                   [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
  return s;
}

namespace {
std::string gf(double g) { return g < 0 ? std::string("-") : fmt::format("{:.1f}", g); }
}  // namespace

std::string profile_table(const ProfileSummary& s, const std::string& title) {
  std::string out = fmt::format(
      "\n{}: {} profiled step(s), step {:.3f} ms, ops {:.3f} ms ({:.1f}% of the step)\n\n"
      "| op | family | phase | calls/step | ms/step | share % | GFLOP/s |\n"
      "|---|---|---|---|---|---|---|\n",
      title, s.steps, s.step_ms, s.ops_ms, s.step_ms > 0 ? 100 * s.ops_ms / s.step_ms : 0.0);
  for (const ProfileSummary::Op& o : s.ops)
    out += fmt::format("| {} | {} | {} | {:.1f} | {:.3f} | {:.1f} | {} |\n", o.op, o.family,
                       o.phase, o.calls_per_step, o.ms_per_step, 100 * o.share, gf(o.gflops));
  const double rest = s.step_ms - s.ops_ms;
  out += fmt::format("| (between ops: host code) | - | - | - | {:.3f} | {:.1f} | - |\n", rest,
                     s.step_ms > 0 ? 100 * rest / s.step_ms : 0.0);
  out += "\n| family | ms/step | share % | GFLOP/s |\n|---|---|---|---|\n";
  for (const ProfileSummary::Family& f : s.families)
    out += fmt::format("| {} | {:.3f} | {:.1f} | {} |\n", f.family, f.ms_per_step, 100 * f.share,
                       gf(f.gflops));
  return out;
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
    j["gflops"] = o.gflops < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.gflops);
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
    j["gflops"] = f.gflops < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.gflops);
    v.push_back(std::move(j));
  }
  return v;
}

}  // namespace rn50
