// rn50: `rn50 report`: benchmark sweeps, training reports and inference benchmarks turned into
// the tables of the DLPerf and DLE performance reports: throughput per device count and
// precision (median and spread of the repeats), speedup over one device and scaling efficiency,
// AMP over FP32 speedup, time to train 90 epochs of ImageNet-1k, training curves, inference
// latency percentiles, and (with --reference) DLE's published rows beside them. Plots are drawn
// by tools/plot_report.py (matplotlib) from the same tables.
//
// Inputs (any mix, one file per argument): a `rn50 bench train` sweep (train_sweep record), an
// rn50 --report-file in rn50's JSON-lines format or DLLogger's ("DLLL {...}" lines, as
// --report-format dllogger writes), `rn50 bench infer` / `rn50 eval --benchmark` lines,
// `rn50 bench peak` lines (the machine's measured peaks: the throughput and latency tables then
// give each result's share of the peak of its precision, rn50/roofline.h) and --profile records
// (the per-op profile table).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rn50/roofline.h"

namespace rn50 {

/// ImageNet-1k training images (the 90-epoch time-to-train column).
inline constexpr int64_t kImageNet1kTrainImages = 1281167;

/// One measured training-throughput point: a sweep point, or the benchmark line of a training
/// report (one run).
struct ThroughputPoint {
  std::string source;       ///< file it came from
  std::string hardware;     ///< GPU name, else CPU model, else the device ("cpu", "cuda:0")
  std::string arch;         ///< resnet50 ...
  std::string precision;    ///< fp32, tf32, amp_fp16, amp_bf16
  int batch_size = 0;       ///< per process
  int devices = 1;          ///< processes (GPUs) of the job
  std::vector<double> ips;  ///< images/s of the whole job, one per run
  double median = 0, min = 0, max = 0;
  /// GFLOP of one image's training step (the record's gflops_per_image); NaN when the record
  /// has none (results written before the roofline) or merged points disagree.
  double gflops_per_image = std::numeric_limits<double>::quiet_NaN();
  /// The peak the record was set against (peak_gflops), GFLOP/s; NaN when none.
  double peak_gflops = std::numeric_limits<double>::quiet_NaN();
};

/// One epoch of a training curve (NaN where the report has no value, e.g. val.* of an epoch
/// that was not evaluated).
struct CurveRow {
  int epoch = 0;
  double loss = 0, top1 = 0, top5 = 0, lr = 0, ips = 0;
  double val_loss = 0, val_top1 = 0, val_top5 = 0;
};

struct TrainingCurve {
  std::string source;
  std::vector<CurveRow> epochs;
};

/// One batch size of an inference benchmark (infer_benchmark record).
struct LatencyRow {
  std::string source, arch, precision, device;
  int batch_size = 0;
  double ips = 0, avg_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0;
  /// As ThroughputPoint's: the forward GFLOP of one image and the recorded peak (NaN: none).
  double gflops_per_image = std::numeric_limits<double>::quiet_NaN();
  double peak_gflops = std::numeric_limits<double>::quiet_NaN();
};

/// A "profile" record (--profile): the per-op times of one benchmark.
struct ProfileResult {
  std::string file, source, arch, precision, device;
  int batch_size = 0;
  double step_ms = 0, ops_ms = 0;
  /// The step's roofline time, ms (NaN: profiled without a roof, or an op had no peak).
  double roof_ms = std::numeric_limits<double>::quiet_NaN();
  struct Op {
    std::string op, family, phase;
    double ms_per_step = 0, share = 0;
    double gflops = std::numeric_limits<double>::quiet_NaN();  ///< NaN: no FLOPs
    double gbps = std::numeric_limits<double>::quiet_NaN();    ///< NaN: no counted bytes
    /// Its share of its roofline time (NaN: no roof, or overhead the roof asks no time for).
    double roof_share = std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<Op> ops;
};

/// Everything read from the result files.
struct ReportInputs {
  std::vector<ThroughputPoint> throughput;
  std::vector<TrainingCurve> curves;
  std::vector<LatencyRow> latency;
  PeakTable peaks;  ///< measured peaks ("peak" records)
  std::vector<ProfileResult> profiles;
};

/// Reads each file: detects its format per line (a JSON object with "type", or a "DLLL " line).
/// Lines of other record types (config, step, eval, loader) are read and skipped. Throws
/// rn50::Error naming the file (and line) when it cannot be read, a line is not JSON, a record
/// lacks a field the tables need, or a file holds nothing the report uses.
ReportInputs load_report_inputs(const std::vector<std::string>& files);

/// A table: a title, column names and rows of JSON values (numbers, strings, null for "no
/// value"). `digits[i]` is the number of decimals column i is printed with in md/csv.
struct ReportTable {
  std::string name;   ///< machine name: "throughput", "scaling", ...
  std::string title;  ///< heading
  std::vector<std::string> columns;
  std::vector<int> digits;
  std::vector<std::vector<nlohmann::ordered_json>> rows;
  std::string note;  ///< printed under the table (md) / as a comment (csv)
};

/// Throughput table: one row per (hardware, arch, precision, batch) and device count: median
/// images/s and the min-max range of the runs; "GFLOP/s" = median x GFLOP per image, and
/// "% of peak" = its share of the peak of its precision: the one the record was set against
/// (--peak-file), else one of `peaks` (rn50 bench peak lines among the inputs) measured on the
/// same hardware (a benchmark line names only "cpu": then the peaks must be of one machine);
/// "-" where there is none.
ReportTable throughput_table(const std::vector<ThroughputPoint>& points,
                             const PeakTable& peaks = {});

/// Speedup over one device (median(N) / median(1)) and scaling efficiency (speedup / N) per
/// (hardware, arch, precision, batch) with more than one device count, as DLPerf's tables.
/// Throws rn50::Error naming the configuration when it has points for N > 1 devices but none
/// for 1 device.
ReportTable scaling_table(const std::vector<ThroughputPoint>& points);

/// Each precision over fp32 (and over tf32 where measured): median / median at the same
/// hardware, arch, batch and device count ("AMP over FP32" of the DLE tables). Empty when no
/// configuration has fp32 beside another precision.
ReportTable precision_speedup_table(const std::vector<ThroughputPoint>& points);

/// Time to train 90 epochs of ImageNet-1k (1,281,167 images) at each point's median speed,
/// hours (data loading as measured; evaluation not included).
ReportTable time_to_train_table(const std::vector<ThroughputPoint>& points, int epochs = 90);

/// Per epoch: loss, top-1, top-5, lr, images/s, val loss/top-1/top-5.
ReportTable curve_table(const TrainingCurve& curve);

/// Inference throughput and latency avg/p50/p90/p95/p99 per (source, precision, batch), with
/// GFLOP/s and "% of peak" as the throughput table's (CPU peaks apply to device "cpu").
ReportTable latency_table(const std::vector<LatencyRow>& rows, const PeakTable& peaks = {});

/// The measured peaks: op, precision, hardware, GFLOP/s (GOP/s for int8).
ReportTable peak_table(const PeakTable& peaks);

/// The per-op profiles: per record and op, ms/step, share of the step %, GFLOP/s, and the step
/// time the ops do not cover as a row "(between ops: host code)".
ReportTable op_profile_table(const std::vector<ProfileResult>& profiles);

/// The published ResNet-50 v1.5 training rows of NVIDIA DeepLearningExamples' READMEs (PyTorch,
/// PaddlePaddle, MXNet; DGX A100 80GB and DGX-1 V100), each labelled with its hardware,
/// container and source file.
ReportTable reference_table();

/// Every table the inputs allow, in the order printed: throughput, scaling, precision speedup,
/// time to train, the curves, latency, peaks, profiles, then reference when `with_reference`.
std::vector<ReportTable> build_report(const ReportInputs& in, bool with_reference);

/// The tables as Markdown ("md"), CSV ("csv": each table after a "# title" line) or JSON
/// ("json": {name: [{column: value}]}). Throws rn50::Error naming --format otherwise.
std::string render_report(const std::vector<ReportTable>& tables, const std::string& format);

/// Writes the plots (PNG and SVG) of `tables` into `dir` with tools/plot_report.py: the
/// throughput vs devices with the ideal line, the training curves (loss and top-1 per epoch) and
/// the latency percentiles per batch size, whichever the tables hold. `python` is the
/// interpreter (empty: RN50_PYTHON from the environment, else /usr/bin/python3, where Debian
/// installs python3-matplotlib, else python3 from PATH), `script` the plot script (empty:
/// RN50_PLOT_SCRIPT from the environment, else tools/plot_report.py of the source tree rn50 was
/// built from). Writes <dir>/report_tables.json (the tables as --format json) for the script.
/// Returns the files written.
/// Throws rn50::Error when the script is missing, matplotlib is not installed (saying to run
/// scripts/setup.sh or apt-get install python3-matplotlib) or the script fails.
std::vector<std::string> write_report_plots(const std::vector<ReportTable>& tables,
                                            const std::string& dir, const std::string& python = "",
                                            const std::string& script = "");

}  // namespace rn50
