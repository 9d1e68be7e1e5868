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
//
// `rn50 bench peak` also measures the memory roof: STREAM's copy and triad kernels (McCalpin,
// "Memory Bandwidth and Machine Balance", 1995) on arrays far larger than the caches, all
// cores, written as "peak" records of precision "memory" with "gbps". With both roofs, the
// per-op profile (rn50/profile.h) gives every op the least time the machine needs for it,
// max(FLOP / compute peak, bytes / bandwidth) (Williams, Waterman, Patterson, "Roofline: an
// insightful visual performance model", CACM 52(4), 2009), and the step its share of that.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace rn50 {

class ReportRecord;

/// One measured peak: a "peak" record (docs/report-schema.md).
struct PeakRecord {
  std::string op;         ///< "matmul" or "conv3x3"; memory: "copy" or "triad"
  std::string precision;  ///< "fp32", "bf16" or "int8"; "memory" for the bandwidth roof
  std::string device;     ///< "cpu"
  std::string hardware;   ///< the CPU model ("" when unknown)
  double gflops = 0;      ///< median GFLOP/s (int8: GOP/s) over the timed calls; 0 for memory
  double gbps = 0;        ///< memory: median GB/s (1e9 bytes/s, STREAM's counting); else 0
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
  /// The highest memory bandwidth (a record of precision "memory") measured on `device`, or
  /// nullptr (peak files written before rn50 measured it have none).
  const PeakRecord* best_bandwidth(const std::string& device = "cpu") const;
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

/// The machine's two roofs as the per-op profile uses them.
struct Roof {
  std::map<std::string, double> gflops;  ///< compute peak by precision ("fp32", "bf16", "int8")
  double gbps = 0;                       ///< memory bandwidth, GB/s; 0 when not measured

  /// The best peak of every precision and the best bandwidth that `t` holds for `device`.
  static Roof from(const PeakTable& t, const std::string& device = "cpu");
  bool empty() const { return gflops.empty() && gbps <= 0; }
  /// The least seconds this machine needs for an op of `flops` operations computed in
  /// `precision` that moves `bytes` to or from memory: max(flops / peak, bytes / bandwidth)
  /// (the roofline model, see the file comment). Returns -1 when a limit it needs is unknown:
  /// flops > 0 without a peak for `precision`, or bytes > 0 without a bandwidth.
  double seconds(double flops, double bytes, const std::string& precision) const;
};

/// One timed peak measurement of `rn50 bench peak`.
struct PeakMeasurement {
  std::string op;         ///< "matmul" or "conv3x3"; "copy" or "triad" (memory)
  std::string precision;  ///< "fp32", "bf16", "int8"; "memory"
  std::string shape;      ///< "M=N=K=2048", "N=32 C=K=256 28x28 3x3 pad 1", "3 x 256 MiB f32"
  double ops_per_call = 0;         ///< 2 x multiply-adds of one call (memory: 0)
  double bytes_per_call = 0;       ///< memory: bytes read + written by one call (else 0)
  std::vector<double> seconds;     ///< wall seconds of each timed call
  double gflops = 0;               ///< ops_per_call / median seconds / 1e9
  double gbps = 0;                 ///< memory: bytes_per_call / median seconds / 1e9
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

/// Times STREAM's `kernel` on every OpenMP thread, static schedule, each thread touching first
/// the part of the arrays it streams: "copy" c[i] = a[i] (2 arrays), "triad" a[i] = b[i] +
/// s * c[i] (3 arrays), each array `elements` floats (f32). Bytes are counted as STREAM counts
/// them: each array read or written once per call, no write-allocate traffic. `warmup` untimed
/// calls, then `calls` timed ones; gbps from the median. The arrays must dwarf the last-level
/// cache for a memory (not cache) bandwidth: `rn50 bench peak` uses 64 Mi elements (256 MiB).
/// Throws rn50::Error on another kernel, elements < 1 or calls < 1.
PeakMeasurement measure_cpu_bandwidth(const std::string& kernel, int64_t elements, int calls,
                                      int warmup);

/// The name of the instruction set oneDNN dispatches to on this CPU ("avx512_core_bf16", ...).
std::string onednn_cpu_isa();

/// `rn50 bench peak`.
struct PeakBenchConfig {
  /// --precisions: fp32, bf16, int8, memory (the bandwidth roof); empty = all four.
  std::vector<std::string> precisions;
  int calls = 10;           ///< --benchmark-steps: timed calls per (op, precision)
  int warmup = 2;           ///< --benchmark-warmup-steps: untimed calls before
  std::string report_file;  ///< --report-file: appends one "peak" record per (op, precision)
  /// Floats per STREAM array (measure_cpu_bandwidth): 64 Mi = 256 MiB, far beyond any cache.
  int64_t stream_elements = int64_t{64} << 20;
};

/// Measures every (op, precision), prints a table and the best peak per precision to `out`,
/// writes the records. Returns the measurements. Throws rn50::Error naming the flag for an
/// unknown precision or calls < 1, or the file when it cannot be written.
std::vector<PeakMeasurement> run_bench_peak(const PeakBenchConfig& cfg, std::ostream& out);

}  // namespace rn50
