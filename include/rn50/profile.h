// rn50: the per-op profile (`rn50 train --benchmark --profile`, `rn50 bench infer --profile`).
//
// An OpProfiler accumulates, per op, the calls, the EXCLUSIVE wall time (a nested op's time is
// taken out of the op around it) and the floating-point operations of the ops run while it is
// active on the calling thread. The ops are timed by
//   * make_profiling_backend(): a Backend decorator that forwards every op to the real backend
//     and times it, synchronising the backend after each op (free on the CPU, where oneDNN runs
//     synchronously; on a GPU it serialises the ops, and the decorator does not record CUDA
//     graphs, so a profiled GPU step runs eagerly and slower than an unprofiled one);
//   * hooks inside the oneDNN backend (src/backend/cpu: the conv weight reorders into and out of
//     oneDNN's blocked layout, activation reorders) and the CPU inference engine (each oneDNN
//     primitive of its plan): a Scope with no profiler active costs one thread-local read.
// Reorders and copies are ops of their own (family "reorder" / "copy"), so that the time spent
// moving data instead of computing shows. Time between ops (host code: the model's walk, the
// optimizer's bookkeeping) is nobody's op: the profile reports it as the step time the ops do
// not cover.
//
// Each op also counts the bytes it must move: every tensor it reads, once, and every tensor it
// writes, once (a tensor read and written counts twice): the compulsory traffic, a lower bound
// (an op that reads its input twice, as a batch norm's statistics and normalisation passes do,
// moves more). Given the machine's roofs (set_roof, from `rn50 bench peak`'s records), each op
// gets its roofline time, max(FLOP / compute peak of its precision, bytes / memory bandwidth),
// and the profile the share of that limit every op and the whole step reach. The bandwidth is
// DRAM's: an op whose tensors stay in the caches (small batches) can beat it, which shows as
// a share over 100%.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rn50/roofline.h"

namespace rn50 {

class Backend;

/// What an op of a profile is: its row name ("conv fwd"), its family ("conv", "batchnorm",
/// "relu", "add", "pool", "linear", "loss", "metrics", "input", "sgd", "amp", "qat", "copy",
/// "reorder", "alloc", "sync") and its phase ("fwd", "bwd_data", "bwd_weights", "bwd",
/// "update", or "-"). Declared once as a static object per op: profilers key their counters by
/// its address and merge rows of equal names.
struct ProfileOp {
  const char* name;
  const char* family;
  const char* phase;
};

/// Accumulates op times; see the file comment. Not thread-safe: ops are timed on the thread
/// that activated the profiler (other threads see no profiler).
class OpProfiler {
 public:
  /// Totals of one op over the profiled steps.
  struct Row {
    std::string op, family, phase;
    int64_t calls = 0;
    double seconds = 0;  ///< exclusive wall seconds
    double flops = 0;    ///< floating-point (int8: integer) operations, 2 per multiply-add
    double bytes = 0;    ///< compulsory bytes read + written (see the file comment)
    double roof_seconds = 0;    ///< the roofline time of its calls (with a roof set)
    int64_t unbounded_calls = 0;  ///< calls the roof had no limit for (no peak of their precision)
    /// Calls per implementation that ran the op, as the backend named it (note_impl; e.g. the
    /// CPU convolution registry's "own_winograd_f43"); empty when the backend names none.
    std::map<std::string, int64_t> impls;
  };

  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  /// The profiler active on this thread, or nullptr.
  static OpProfiler* current();

  /// Makes `p` this thread's active profiler for its lifetime (restoring the previous one).
  class Activation {
   public:
    explicit Activation(OpProfiler& p);
    ~Activation();
    Activation(const Activation&) = delete;
    Activation& operator=(const Activation&) = delete;

   private:
    OpProfiler* prev_;
  };

  /// Times `op` from construction to destruction into the active profiler (nothing when none
  /// is active). `flops`: the op's operations (0 when it has none worth counting); `bytes`: the
  /// bytes it reads and writes (file comment); `precision`: the compute peak its FLOPs are
  /// held against ("fp32", "bf16", "int8", "fp16"; a string that outlives the scope), or
  /// nullptr for overhead that an ideal step would not have (a layout reorder): its bytes
  /// give its GB/s, but its roofline time is 0.
  class Scope {
   public:
    explicit Scope(const ProfileOp& op, double flops = 0, double bytes = 0,
                   const char* precision = "fp32");
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfiler* p_;
  };

  /// Names the implementation that runs the innermost op under way on this thread (a static
  /// string: a registry entry's name, src/backend/cpu/conv_registry.h); the op's row counts
  /// its calls per implementation. Nothing when no profiler is active or no op is under way.
  static void note_impl(const char* impl);

  /// The machine's roofs that each op's roofline time is computed with (before the first
  /// op; without one, the profile has no roofline columns). An empty roof (no peak for this
  /// device) sets none.
  void set_roof(const Roof& roof);
  const std::optional<Roof>& roof() const { return roof_; }

  /// Counts one profiled step of `seconds` wall seconds (the time the ops are compared with).
  void add_step(double seconds);
  int64_t steps() const { return steps_; }
  double step_seconds() const { return step_seconds_; }
  /// Every op seen, rows of the same name merged, the longest first.
  std::vector<Row> rows() const;
  /// Exclusive seconds of every op together.
  double op_seconds() const;

 private:
  void begin(const ProfileOp& op, double flops, double bytes, const char* precision);
  void end();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::optional<Roof> roof_;
  int64_t steps_ = 0;
  double step_seconds_ = 0;
};

/// A profiler's result per step: what the table prints and the report's "profile" record
/// holds. Shares are of the mean step time; GFLOP/s = flops / exclusive seconds / 1e9 (absent
/// for ops without FLOPs), GB/s = bytes / exclusive seconds / 1e9 (absent without bytes). With
/// a roof: roof_ms = the roofline time per step and roof_share = roof_ms / ms_per_step, the
/// share of the machine's limit reached (-1: no roof, or a call had no limit; an op with
/// neither FLOPs nor bytes has roof_ms 0 and no share: the limits ask no time for it).
struct ProfileSummary {
  struct Op {
    std::string op, family, phase;
    double calls_per_step = 0, ms_per_step = 0, share = 0;
    double gflops = -1;  ///< -1: the op has no FLOPs
    double gbps = -1;    ///< -1: the op moves no counted bytes
    double roof_ms = -1, roof_share = -1;
    /// Calls per step of each implementation that ran the op (Row::impls), e.g.
    /// {"onednn_direct": 40, "own_winograd_f43": 13}; empty when the backend names none.
    std::map<std::string, double> impls;
  };
  struct Family {
    std::string family;
    double ms_per_step = 0, share = 0;
    double gflops = -1;  ///< -1: no FLOPs in the family
    double gbps = -1;    ///< -1: no counted bytes in the family
    double roof_ms = -1, roof_share = -1;
  };
  int64_t steps = 0;
  double step_ms = 0;  ///< mean wall milliseconds of a profiled step
  double ops_ms = 0;   ///< the ops' exclusive milliseconds per step, summed
  /// The roofs the profile was taken with (empty: none), and the step's roofline time: the
  /// ops' roof_ms summed (-1 when an op had no limit). roof_ms / step_ms is the step's share
  /// of what the machine could do.
  std::optional<Roof> roof;
  double roof_ms = -1;
  std::vector<Op> ops;            ///< longest first
  std::vector<Family> families;   ///< longest first
};

/// The summary of `p`'s rows and steps. Throws rn50::Error when no step was counted.
ProfileSummary summarize_profile(const OpProfiler& p);

/// The summary as Markdown tables: per op (calls/step, ms/step, share %, GFLOP/s, GB/s; with
/// a roof also roof ms/step and % of roof; last the implementations that ran it with their
/// calls per step, "-" when the backend names none), the step time the ops do not cover as a last row,
/// then per family. `title` heads it.
std::string profile_table(const ProfileSummary& s, const std::string& title);

/// The report's profile record's "roofline" object (docs/report-schema.md): null without a
/// roof, else {"peak_gflops": {precision: GFLOP/s}, "memory_gbps", "roof_ms_per_step" (null
/// when an op had no limit), "roof_share" (roof_ms / step_ms, or null)}.
nlohmann::ordered_json profile_roof_json(const ProfileSummary& s);
/// The "ops" and "families" lists of the report's profile record (docs/report-schema.md).
nlohmann::ordered_json profile_ops_json(const ProfileSummary& s);
nlohmann::ordered_json profile_families_json(const ProfileSummary& s);

/// Wraps `inner` so that each of its ops is timed into the active OpProfiler (see the file
/// comment): ops, their FLOPs (convolutions 2 N K OH OW C R S per direction, linear 2 N K C
/// per product) and bytes (the tensors each reads and writes), the precision of the FLOPs
/// from the data type of the op's input (f32 -> fp32, bf16, f16 -> fp16, u8 -> int8),
/// inner->synchronize() after each op, capture() returning nullptr (no graphs: every op runs
/// eagerly). name(), device(), supports() and the rest are the inner backend's.
std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> inner);

}  // namespace rn50
