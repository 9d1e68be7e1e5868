// rn50: a Session is everything a training or evaluation run builds once from its
// configuration — the process and its logger, the backend and communicator, the data sources,
// the model (with its pretrained, resumed or pruned weights), the input stage, the optimiser and
// the training step — and the drivers that use it:
//   run_training          the epoch loop (train/train_loop.cpp)
//   run_train_benchmark   rn50 train --benchmark and rn50 bench train (train/train_benchmark.cpp)
//   run_validation, run_eval_only, run_eval_benchmark   evaluation (train/validation.cpp)
// The entry points of include/rn50/train.h (run_train, run_eval, benchmark_train) build a
// Session and call one driver (train/run.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/logger.h"
#include "core/report.h"
#include "model/input_stage.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/parallel.h"
#include "rn50/model.h"
#include "rn50/precision.h"
#include "rn50/train.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace rn50 {

struct CheckpointState;

class Session {
 public:
  /// Builds the run of `cfg` (already validated) for this process: backend and communicator
  /// (--device, --dist-backend; a watchdog with --timeout when several processes run), the data
  /// sources the run scope needs, the model (initialised with --seed, then
  /// --from-pretrained-params or --from-checkpoint), its input stage, optimiser and training
  /// step, the 2:4 masks of --asp, and the report file (rank 0). Prints the run's first line.
  /// Throws rn50::Error naming the flag or file on a bad configuration, dataset or checkpoint.
  Session(const Config& cfg, const ProcessInfo& proc, Logger& log);
  /// The training step's recorded graphs reference the communicator: it goes first.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Config cfg;
  const ProcessInfo proc;
  Logger& log;
  DeviceChoice device;
  Precision precision = Precision::fp32;
  std::unique_ptr<Backend> backend;
  /// Data: train (null for eval-only) and val (null for --benchmark and train_only).
  std::unique_ptr<DataSource> train, val;
  std::vector<std::string> classes;  ///< class folder names (empty for synthetic data)
  int num_classes = 0;               ///< the fc's outputs (--num-of-class, else the folders)
  int64_t steps_per_epoch = 0;
  LrSchedule sched;
  std::unique_ptr<ResNet> model;
  std::unique_ptr<InputStage> input;
  std::unique_ptr<SgdOptimizer> optimizer;
  ReportWriter report;  ///< --report-file (rank 0; a no-op elsewhere)

  // ---- where the weights came from ----
  std::string resumed_from;  ///< the epoch folder of --from-checkpoint, or empty
  int resumed_epoch = -1;    ///< the epoch that checkpoint finished
  int start_epoch = 0;       ///< the first epoch to train
  int64_t global_step = 0;   ///< optimiser steps done (the lr schedule's position)

  // ---- the training step ----
  /// One optimiser step on `b` at learning rate `lr`: uploads the batch, runs the TrainStep
  /// (mixup's weight drawn from (seed, global step, rank)), and queues its loss into
  /// loss slot `slot` (< --print-interval) and, with `metrics`, its top-1/top-5 hits. Does not
  /// wait for the device and does not advance global_step.
  void run_step(const Batch& b, double lr, int64_t slot, bool metrics);
  /// The first `n` queued losses (and, with `hits`, their n top-1/top-5 pairs), on the host
  /// (synchronises the backend).
  std::vector<float> read_losses(int64_t n, std::vector<float>* hits = nullptr);
  /// fp16 loss scaling: reads the step state (synchronises) and warns about steps skipped for
  /// inf/NaN gradients since the last call; keeps loss_scale() and skipped_steps() current.
  void check_amp_skips(int64_t at_step);
  bool loss_scaling() const { return rn50::loss_scaling(precision); }
  float loss_scale() const { return loss_scale_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  /// train.loss_scale and train.skipped_steps into `r` when the loss is scaled.
  void set_loss_scale_fields(ReportRecord& r) const;
  TrainStep& step() { return *step_; }
  /// The overlapped gradient allreduce (null with one process and --dist-backend single).
  GradBucketer* bucketer() { return bucketer_.get(); }
  Communicator& comm() { return *comm_; }

  /// The resumable state after epoch `epoch` (state.json).
  CheckpointState checkpoint_state(int epoch) const;
  /// The run's "config" report line (flags, resolved facts).
  void write_config_line();

 private:
  void setup_backend();
  void setup_data();
  void setup_model();
  void load_weights();
  /// --asp: computes the 2:4 masks (--prune-model) or checks that the checkpoint brought them,
  /// and hands them to the optimiser; refuses an --asp checkpoint resumed without --asp.
  void setup_sparsity();

  Tensor loss_hist_, hits_hist_;
  float loss_scale_ = 1.f;
  int64_t skipped_steps_ = 0;
  std::unique_ptr<TrainStep> step_;
  // Declared last so that they are destroyed first: pending NCCL reductions and bucket buffers
  // reference the backend (and its stream).
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradBucketer> bucketer_;
};

/// Test seam: a function every Session passes its backend through, right after making it (and
/// after --profile's wrapper), before anything else uses it. Tests install a recording decorator
/// (tests/recording_backend.h) to see every backend call of a real run; nothing else sets it.
/// Null (the default): the backend is used as made. Process-wide; set it before building the
/// Session and reset it (to null) after.
using SessionBackendWrapper = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;
void set_session_backend_wrapper(SessionBackendWrapper wrapper);

/// The epoch loop (train/train_loop.cpp): from s.start_epoch to --epochs, a step line every
/// --print-interval steps, checkpoints every --save-interval epochs, validation every
/// --eval-interval epochs (run_validation), an epoch line each, and --inference-dir at the end.
/// Throws rn50::Error on divergence (--max-nonfinite-steps) or a failed step.
void run_training(Session& s);

/// `rn50 train --benchmark` (train/train_benchmark.cpp): --benchmark-warmup-steps untimed and
/// --benchmark-steps timed steps, their images/s, data/compute split, allreduce overlap and
/// memory, as a "benchmark" report record; returns the figures.
TrainBenchmarkResult run_train_benchmark(Session& s);

}  // namespace rn50
