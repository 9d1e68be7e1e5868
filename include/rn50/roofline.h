// rn50: the machine's own limit and each benchmark's share of it.
//
// `rn50 bench peak` times oneDNN's own large matmul and a large 3x3 convolution on every core in
// fp32, bf16 and int8 (u8 activations x s8 weights, s32 accumulation) and writes one "peak"
// record per (op, precision) to its --report-file. `rn50 train --benchmark`, `rn50 bench train`
// and `rn50 bench infer` record the network's GFLOP per image (forward_flops in rn50/graph.h:
// 2 x the multiply-adds of the convolutions and the fc; training 3 x the forward: forward,
// backward-data and backward-weights), the GFLOP/s they achieved (images/s x GFLOP per image),
// and, with --peak-file FILE (a file holding peak records), the share of the peak of their
// precision: training fp32 -> fp32, amp_bf16 -> bf16; inference fp32, bf16, int8 -> the same.
// The peak of a precision is the better of the matmul and the convolution (the record says
// which). No peak measured for a precision, or a benchmark on another device than the CPU the
// peaks were measured on: no share (never an invented one). A multi-process job's achieved
// GFLOP/s is the whole job's (its images/s), set against one machine's peak: right for the
// processes of one node sharing its cores; across nodes, divide by the nodes.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace rn50 {

class ReportRecord;

/// One measured peak: a "peak" record (docs/report-schema.md).
struct PeakRecord {
  std::string op;         ///< "matmul" or "conv3x3"
  std::string precision;  ///< "fp32", "bf16" or "int8"
  std::string device;     ///< "cpu"
  std::string hardware;   ///< the CPU model ("" when unknown)
  double gflops = 0;      ///< median GFLOP/s (int8: GOP/s) over the timed calls
};

/// The peaks of one machine by precision.
class PeakTable {
 public:
  /// Every "peak" record of `path` (JSON lines, as `rn50 bench peak --report-file` appends;
  /// lines of other types are skipped, skipped measurements too). Throws rn50::Error naming
  /// `what` and the file when it cannot be read, a line is not JSON, or it holds no measured
  /// peak.
  static PeakTable load(const std::string& path, const std::string& what = "--peak-file");
  /// Adds one measured peak (gflops > 0).
  void add(PeakRecord r);
  /// The highest peak measured for `precision` on `device`, or nullptr.
  const PeakRecord* best(const std::string& precision, const std::string& device = "cpu") const;
  bool empty() const { return records_.empty(); }
  const std::vector<PeakRecord>& records() const { return records_; }

 private:
  std::vector<PeakRecord> records_;
};

/// The peak precision a result is compared with: the engine precisions ("fp32", "bf16", "int8",
/// "fp16", "tf32") as they are; training precisions through their compute: fp32 -> "fp32",
/// tf32 -> "tf32", amp_bf16 -> "bf16", amp_fp16 and pure_fp16 -> "fp16".
std::string peak_precision(const std::string& precision);

/// Sets the roofline fields of a benchmark record (benchmark, infer_benchmark):
/// "gflops_per_image", "achieved_gflops" = ips x gflops_per_image, and when `peaks` holds a
/// peak for peak_precision(precision) on `device`: "peak_gflops", "peak_op" and "peak_share"
/// = achieved / peak. Returns that peak (a record of `peaks`; nullptr when there is none) and
/// the share (-1 when there is none).
struct RooflineShare {
  const PeakRecord* peak = nullptr;
  double share = -1;
};
RooflineShare set_roofline_fields(ReportRecord& r, double gflops_per_image, double ips,
                                  const PeakTable* peaks, const std::string& precision,
                                  const std::string& device);

/// One timed peak measurement of `rn50 bench peak`.
struct PeakMeasurement {
  std::string op;         ///< "matmul" or "conv3x3"
  std::string precision;  ///< "fp32", "bf16", "int8"
  std::string shape;      ///< "M=N=K=2048", "N=32 C=K=256 28x28 3x3 pad 1"
  double ops_per_call = 0;         ///< 2 x multiply-adds of one call
  std::vector<double> seconds;     ///< wall seconds of each timed call
  double gflops = 0;               ///< ops_per_call / median seconds / 1e9
  std::string impl;                ///< oneDNN's implementation ("brg:avx512_core_bf16", ...)
  std::string skipped;             ///< why it was not measured (then seconds is empty)
};

/// Times oneDNN's matmul ("matmul": M = N = K = 2048) or 3x3 convolution ("conv3x3": N = 32,
/// C = K = 256, 28 x 28, stride 1, pad 1: a ResNet stage-3 shape, batch 32) in `precision`
/// ("fp32"; "bf16": bf16 inputs, f32 output; "int8": u8 activations x s8 weights -> s32) on
/// every core OpenMP gives oneDNN, forward inference, layouts chosen by oneDNN
/// (format_tag::any) and the data filled in them before timing: `warmup` untimed calls, then
/// `calls` timed ones. A precision the CPU cannot run returns with `skipped` saying why.
/// Throws rn50::Error on another op or precision name, or calls < 1.
PeakMeasurement measure_cpu_peak(const std::string& op, const std::string& precision, int calls,
                                 int warmup);

/// The name of the instruction set oneDNN dispatches to on this CPU ("avx512_core_bf16", ...).
std::string onednn_cpu_isa();

/// `rn50 bench peak`.
struct PeakBenchConfig {
  /// --precisions: fp32, bf16, int8; empty = all three.
  std::vector<std::string> precisions;
  int calls = 10;           ///< --benchmark-steps: timed calls per (op, precision)
  int warmup = 2;           ///< --benchmark-warmup-steps: untimed calls before
  std::string report_file;  ///< --report-file: appends one "peak" record per (op, precision)
};

/// Measures every (op, precision), prints a table and the best peak per precision to `out`,
/// writes the records. Returns the measurements. Throws rn50::Error naming the flag for an
/// unknown precision or calls < 1, or the file when it cannot be written.
std::vector<PeakMeasurement> run_bench_peak(const PeakBenchConfig& cfg, std::ostream& out);

}  // namespace rn50
