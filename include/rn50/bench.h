// rn50: the training benchmark sweep (`rn50 bench train`), DLPerf's methodology one command
// away: every (precision, batch size) point run --repeats times as `rn50 train --benchmark`
// (warmup steps untimed), its images/s summarised as median, min and max, with step-time
// percentiles, the share of step time spent waiting for data, peak memory, and the environment.
// Under `mpirun -np N` every rank runs the same sweep and rank 0 writes it, so a scaling study is
// a loop over N (bench/scaling.sh); `rn50 report` (rn50/report.h) turns sweeps into tables.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rn50/precision.h"
#include "rn50/train.h"

namespace rn50 {

struct TrainSweepConfig {
  /// The run of each point: arch, num_classes, device, data_layout, crop_size, data/image_root,
  /// exact_decode, workers, seed, dist_backend, benchmark_steps, benchmark_warmup_steps (the
  /// precision and batch size are set per point).
  Config base;
  std::vector<int> batch_sizes{256};  ///< --batch-sizes (DLPerf: 256 per GPU)
  /// --precisions: names of rn50/precision.h (fp32, tf32, amp_fp16, amp_bf16, pure_fp16; also
  /// with '-' and in any case); empty = fp32, tf32, amp_fp16 and amp_bf16 on CUDA, fp32 on the
  /// CPU.
  std::vector<std::string> precisions;
  int repeats = 5;          ///< --repeats: runs per point (DLPerf: 5 to 7)
  std::string report_file;  ///< --report-file: the sweep JSON (one train_sweep line)
  bool verbose = false;     ///< --verbose: print every run's progress lines too
};

/// The precisions backend `backend` ("onednn", "ref", "cuda") trains in: the CPU backends fp32,
/// and amp_bf16 where oneDNN has bf16 kernels; CUDA every precision (rn50/precision.h).
std::vector<Precision> backend_precisions(const std::string& backend);

/// `base` set up for one point: `precision` (with_precision: --amp, --amp-dtype,
/// --use-pure-fp16, --no-tf32) and `batch_size`, as a --benchmark run. Throws rn50::Error when
/// the device's backend does not train in `precision`, naming it and the precisions it has.
Config sweep_point_config(const Config& base, Precision precision, int batch_size);

/// One point of the sweep's "points" list (docs/report-schema.md, train_sweep) from its runs:
/// ips per run and their median/min/max, step-time mean and percentiles over every measured
/// step of every run (ms), data_wait_share = data seconds / (data + compute seconds), peak
/// memory as the maximum over runs. Throws rn50::Error when `runs` is empty.
nlohmann::ordered_json summarize_sweep_point(Precision precision, int batch_size,
                                             const std::vector<TrainBenchmarkResult>& runs);

/// Runs the sweep: precisions (outer) x batch sizes x repeats, printing one line per run and a
/// table row per point to `out` (rank 0 only), and writes the train_sweep record to
/// cfg.report_file (rank 0). Returns the record. Throws rn50::Error on a bad flag (an empty or
/// non-positive list, repeats < 1, a precision the backend lacks) before running anything.
nlohmann::ordered_json run_train_sweep(const TrainSweepConfig& cfg, std::ostream& out);

}  // namespace rn50
