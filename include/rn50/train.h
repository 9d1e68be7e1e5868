// rn50: the trainer's public API — the entry points behind `rn50 train`, `rn50 eval` and
// `rn50 train --benchmark`, on a Config (rn50/config.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rn50/config.h"
#include "rn50/data.h"
#include "rn50/tensor.h"

namespace rn50 {

/// Trains (and/or evaluates) per cfg.run_scope; prints progress to stdout, errors to stderr.
/// Returns the process exit code (0 ok, 1 on an rn50::Error, whose message is printed).
int run_train(const Config& cfg);
/// run_train with run_scope = eval_only.
int run_eval(Config cfg);

/// The figures of one `rn50 train --benchmark` run (its "benchmark" report line), plus the
/// per-step times and memory a benchmark sweep (`rn50 bench train`) summarises.
struct TrainBenchmarkResult {
  double ips = 0;           ///< images/s of the whole job over the measured steps
  double ips_per_rank = 0;  ///< images/s of rank 0
  int world_size = 1;
  /// Rank 0's wall seconds of each measured step. On the CPU each step ends when its compute
  /// does; on a GPU steps are queued asynchronously and a step's time is the host's view.
  std::vector<double> step_seconds;
  double data_seconds = 0;     ///< rank 0's seconds waiting for batches, measured steps summed
  double compute_seconds = 0;  ///< rank 0's seconds in the rest of the measured steps
  int64_t images = 0;          ///< images of the measured steps, rank 0
  /// Peak resident host memory of rank 0's process during the run (VmHWM after a reset at the
  /// start), bytes; -1 when the kernel does not report it.
  int64_t peak_host_rss_bytes = -1;
  /// Device memory in use at the end (CUDA: total - free), bytes; -1 on the CPU.
  int64_t gpu_memory_used_bytes = -1;
  std::string backend;    ///< "onednn", "cuda", "ref"
  std::string device;     ///< "cpu", "cuda:0"
  std::string precision;  ///< fp32, tf32, amp_fp16 or amp_bf16
  std::string communicator;
  float last_loss = 0;
  /// The backend's and the communication libraries' versions and device names
  /// (Backend::environment, communicator_libraries).
  std::vector<std::pair<std::string, std::string>> environment;
  /// GFLOP of one image's training step: 3 x forward_flops (rn50/graph.h) at the run's input.
  double gflops_per_image = 0;
  /// The measured peak of the run's precision from --peak-file (rn50/roofline.h), GFLOP/s, and
  /// the op that gave it; -1 and empty without one.
  double peak_gflops = -1;
  std::string peak_op;
};

/// Runs `cfg` as `rn50 train --benchmark` does (cfg.benchmark is set here) and returns its
/// figures; with `verbose` it prints the run's progress lines as rn50 train does, else nothing.
/// Writes cfg.report_file when set. Throws rn50::Error on a bad configuration or a failed run
/// (in a multi-process job the failing rank stops every rank first).
TrainBenchmarkResult benchmark_train(Config cfg, bool verbose);

}  // namespace rn50
