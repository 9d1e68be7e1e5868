// rn50: the epoch loop of `rn50 train` (a driver of train/session.h).
//
// One step: batch (host u8 NHWC) -> Session::run_step (upload into an input slot, on CUDA on a
// side stream while the previous step runs; the TrainStep: normalise, forward, loss, backward,
// SGD with this step's lr, AMP loss scaling; replayed as a CUDA graph on GPUs). The loss of
// each step and its top-1/top-5 hits are written into device buffers and read back only every
// --print-interval steps, so the loop has no per-step host sync. AMP overflow skips are read
// from the device step state at the same boundaries and logged.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/check.h"
#include "core/fileio.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/session.h"
#include "train/trained_model.h"
#include "train/validation.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using Clock = ThroughputMeter::Clock;

/// The steps of one --print-interval: what the step line reports, and the loss slots in use.
struct Interval {
  std::vector<int64_t> sizes;  ///< batch size of each step (its loss slot is its index)
  std::vector<double> lrs;
  double data_s = 0, compute_s = 0;
  Clock::time_point start = Clock::now();
  void reset() {
    sizes.clear();
    lrs.clear();
    data_s = compute_s = 0;
    start = Clock::now();
  }
};

/// One epoch's training, with its step lines; returns its metrics in `sums` and `meter`.
class Epoch {
 public:
  Epoch(Session& s, int epoch, bool first, int& nonfinite_run)
      : s_(s),
        epoch_(epoch),
        meter_(first && s.steps_per_epoch > 1 ? 1 : 0),  // the run's first step builds plans
        nonfinite_run_(nonfinite_run) {}

  void run() {
    Batch b;
    t_epoch_ = Clock::now();
    s_.train->start_epoch(epoch_);
    meter_.start();
    iv_.reset();
    while (true) {
      const auto tw = Clock::now();
      if (!s_.train->next(b)) break;
      const auto td = Clock::now();
      const double lr = s_.sched.at(s_.global_step);
      s_.run_step(b, lr, static_cast<int64_t>(iv_.sizes.size()), /*metrics=*/true);
      ++s_.global_step;
      ++step_in_epoch_;
      iv_.sizes.push_back(b.size);
      iv_.lrs.push_back(lr);
      last_lr_ = lr;
      const bool boundary = static_cast<int64_t>(iv_.sizes.size()) == s_.cfg.print_interval ||
                            step_in_epoch_ == s_.steps_per_epoch;
      if (boundary) s_.backend->synchronize();
      const double data_s = seconds_between(tw, td), compute_s = seconds_between(td, Clock::now());
      meter_.step(b.size, data_s, compute_s);
      iv_.data_s += data_s;
      iv_.compute_s += compute_s;
      if (boundary) flush();
    }
    flush();
    RN50_CHECK(step_in_epoch_ > 0, "epoch {}: the training source yielded no batch", epoch_);
  }

  MetricSums sums;
  const ThroughputMeter& meter() const { return meter_; }
  double last_lr() const { return last_lr_; }
  double seconds() const { return seconds_between(t_epoch_, Clock::now()); }

 private:
  /// Reads the interval's losses and hits back, checks them, writes the step line.
  void flush() {
    const auto& sizes = iv_.sizes;
    if (sizes.empty()) return;
    const int64_t n = static_cast<int64_t>(sizes.size());
    std::vector<float> hits;
    const std::vector<float> losses = s_.read_losses(n, &hits);
    for (int64_t i = 0; i < n; ++i)
      sums.add_topk({static_cast<int64_t>(hits[2 * i]), static_cast<int64_t>(hits[2 * i + 1])},
                    sizes[i]);
    double interval_sum = 0;
    int64_t interval_n = 0;
    s_.comm().heartbeat();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = s_.global_step - (n - i);
      if (!std::isfinite(losses[i])) {
        ++nonfinite_run_;
        RN50_CHECK(nonfinite_run_ < s_.cfg.max_nonfinite_steps,
                   "training diverged: loss is {} for {} steps in a row, the last at global "
                   "step {} (epoch {}, lr {:.6g}; --max-nonfinite-steps {})",
                   losses[i], nonfinite_run_, at, epoch_, iv_.lrs[i], s_.cfg.max_nonfinite_steps);
        s_.log.warn(fmt::format("warning: loss is {} at global step {} (rank {})\n", losses[i], at,
                                s_.proc.rank));
        continue;
      }
      nonfinite_run_ = 0;
      sums.add_loss(losses[i], sizes[i]);
      interval_sum += static_cast<double>(losses[i]) * static_cast<double>(sizes[i]);
      interval_n += sizes[i];
    }
    if (s_.proc.world_size > 1) {  // the loss over the global batch
      std::vector<double> v{interval_sum, static_cast<double>(interval_n)};
      s_.comm().allreduce_sum_host(v);
      interval_sum = v[0];
      interval_n = static_cast<int64_t>(v[1]);
    }
    s_.check_amp_skips(s_.global_step);
    const double el = seconds_between(t_epoch_, Clock::now());
    const int64_t total_steps = static_cast<int64_t>(s_.cfg.epochs) * s_.steps_per_epoch;
    const double eta = el / static_cast<double>(step_in_epoch_) *
                       static_cast<double>(total_steps - s_.global_step);
    const double ips = meter_.measured_steps() ? meter_.ips() * s_.proc.world_size
                                               : static_cast<double>(interval_n) / el;
    s_.log.progress(fmt::format("epoch {} ({}/{}) step {}/{} loss {:.4f} lr {:.6g} img/s {:.1f} "
                                "eta {}",
                                epoch_, epoch_ + 1, s_.cfg.epochs, step_in_epoch_,
                                s_.steps_per_epoch, losses.back(), iv_.lrs.back(), ips,
                                format_duration(eta)));
    const double steps = static_cast<double>(n);
    ReportRecord r("step");
    r.set("epoch", epoch_);
    r.set("step", s_.global_step);
    r.set("iteration", step_in_epoch_);
    r.set("train.loss", losses.back());
    r.set("train.loss_avg", interval_n ? interval_sum / static_cast<double>(interval_n) : NAN);
    r.set("train.lr", iv_.lrs.back());
    r.set("train.ips", ips);
    r.set("train.batch_time", seconds_between(iv_.start, Clock::now()) / steps);
    r.set("train.data_time", iv_.data_s / steps);
    r.set("train.compute_time", iv_.compute_s / steps);
    s_.set_loss_scale_fields(r);
    s_.report.write(r);
    iv_.reset();
  }

  Session& s_;
  const int epoch_;
  ThroughputMeter meter_;
  int& nonfinite_run_;  ///< consecutive steps with an inf/NaN loss, across epochs
  Interval iv_;
  int64_t step_in_epoch_ = 0;
  double last_lr_ = 0;
  Clock::time_point t_epoch_;
};

}  // namespace

void run_training(Session& s) {
  const Config& cfg = s.cfg;
  if (s.start_epoch >= cfg.epochs) {
    s.log.out("nothing to do: the checkpoint already finished epoch {} of --epochs {}\n",
              s.start_epoch - 1, cfg.epochs);
    return;
  }
  // A checkpoint folder that cannot be written fails now, not after the first epoch's compute.
  if (cfg.save_interval > 0 && s.proc.rank == 0)
    check_writable_dir((fs::path(cfg.checkpoint_dir) / cfg.arch).string(), "--checkpoint-dir");
  // Step lines every --print-interval: in place on a terminal, plain lines in a log.
  ProgressLine progress(stdout, 0);
  s.log.attach_progress(&progress);
  struct Detach {
    Logger& log;
    ~Detach() { log.attach_progress(nullptr); }
  } detach{s.log};
  int nonfinite_run = 0;
  for (int epoch = s.start_epoch; epoch < cfg.epochs; ++epoch) {
    Epoch e(s, epoch, epoch == s.start_epoch, nonfinite_run);
    e.run();
    const int64_t bad = s.train->bad_samples();

    const bool last_epoch = epoch == cfg.epochs - 1;
    if (cfg.save_interval > 0 && ((epoch + 1) % cfg.save_interval == 0 || last_epoch)) {
      const std::string dir =
          (fs::path(cfg.checkpoint_dir) / cfg.arch / std::to_string(epoch)).string();
      // Rank 0 writes (every rank holds the same weights); the others wait for it, so that
      // no rank runs ahead of a checkpoint that could be resumed from.
      if (s.proc.rank == 0) {
        save_checkpoint(dir, *s.model, *s.optimizer, s.checkpoint_state(epoch));
        s.log.out("saved checkpoint {}\n", dir);
      }
      s.comm().heartbeat();
      s.comm().barrier();
    }
    const bool do_eval = cfg.run_scope == RunScope::train_eval &&
                         ((epoch + 1) % cfg.eval_interval == 0 || last_epoch);
    EvalResult ev;
    if (do_eval) ev = run_validation(s, 0);

    int64_t bad_all = bad;
    MetricSums& sums = e.sums;
    // Epoch metrics over every rank's samples.
    if (s.proc.world_size > 1) allreduce_metric_sums(s.comm(), sums, bad_all);
    // Images/s of the whole job: every rank runs the same steps in lockstep (allreduce).
    const ThroughputMeter& meter = e.meter();
    const double ips = meter.measured_steps()
                           ? meter.ips() * s.proc.world_size
                           : static_cast<double>(sums.loss_samples) / e.seconds();
    std::string line = fmt::format(
        "epoch {} ({}/{}) done: train loss {:.4f} top1 {:.2f}% top5 {:.2f}% {:.1f} img/s data "
        "{:.3f} s/step compute {:.3f} s/step bad samples {}",
        epoch, epoch + 1, cfg.epochs, sums.loss(), sums.top1_pct(), sums.top5_pct(), ips,
        meter.mean_data_time(), meter.mean_compute_time(), bad_all);
    if (do_eval)
      line += fmt::format(" | val loss {:.4f} top1 {:.2f}% top5 {:.2f}% ({} images, {:.1f} img/s)",
                          ev.loss, ev.top1, ev.top5, ev.images, ev.ips);
    s.log.out("{}\n", line);
    ReportRecord r("epoch");
    r.set("epoch", epoch);
    r.set("step", s.global_step);
    r.set("train.loss", sums.loss());
    r.set("train.top1", sums.top1_pct());
    r.set("train.top5", sums.top5_pct());
    r.set("train.lr", e.last_lr());
    r.set("train.ips", ips);
    r.set("train.data_time", meter.mean_data_time());
    r.set("train.compute_time", meter.mean_compute_time());
    r.set("train.bad_samples", bad_all);
    s.set_loss_scale_fields(r);
    if (do_eval) set_val_fields(r, ev);
    s.report.write(r);
  }
  if (!cfg.inference_dir.empty()) write_inference_dir(s, cfg.inference_dir);
}

}  // namespace rn50
