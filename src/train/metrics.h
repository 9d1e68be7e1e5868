// rn50: running metric sums over an epoch and a throughput meter (images / wall time after
// warmup; DLE's "ips"). The per-row math on logits is in model/logits.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "model/logits.h"

namespace rn50 {

/// Sums over an epoch (or an eval pass): loss weighted by samples, top-1/top-5 hits.
struct MetricSums {
  double loss_sum = 0;        ///< sum over samples of the per-sample mean loss of its batch
  int64_t loss_samples = 0;   ///< samples whose loss was added
  int64_t top1 = 0, top5 = 0;
  int64_t acc_samples = 0;    ///< samples whose top-1/top-5 were counted

  void add_loss(double batch_mean_loss, int64_t samples) {
    loss_sum += batch_mean_loss * static_cast<double>(samples);
    loss_samples += samples;
  }
  void add_topk(const TopkCounts& c, int64_t samples) {
    top1 += c.top1;
    top5 += c.top5;
    acc_samples += samples;
  }
  double loss() const;  ///< mean loss (NaN when nothing was added)
  double top1_pct() const;  ///< 100 * top1 / acc_samples (NaN when nothing was counted)
  double top5_pct() const;
};

/// Wall-clock throughput with a warmup: the first `warmup_steps` steps are not timed; ips =
/// images of the later steps / wall seconds from the end of the last warmup step to the end of
/// the last step. Also keeps per-step data time (waiting for the batch) and compute time (the
/// rest of the step), as means over all steps.
class ThroughputMeter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ThroughputMeter(int64_t warmup_steps = 0) : warmup_(warmup_steps) {}
  /// Marks the start of the measurement (used when warmup_steps == 0).
  void start();
  /// One step done: `images` processed, `data_s` seconds spent waiting for data, `compute_s` in
  /// the rest of the step. Timestamps the end of the step.
  void step(int64_t images, double data_s, double compute_s);
  int64_t steps() const { return steps_; }
  int64_t measured_steps() const { return steps_ > warmup_ ? steps_ - warmup_ : 0; }
  int64_t measured_images() const { return images_; }
  /// Seconds of the measured steps.
  double measured_seconds() const;
  /// Images per second over the measured steps (0 when none).
  double ips() const;
  double mean_data_time() const { return steps_ ? data_s_ / static_cast<double>(steps_) : 0.0; }
  double mean_compute_time() const {
    return steps_ ? compute_s_ / static_cast<double>(steps_) : 0.0;
  }
  /// Wall seconds of each measured step, from the end of the step before to the end of this one
  /// (their sum is measured_seconds()).
  const std::vector<double>& measured_step_seconds() const { return step_s_; }
  /// Seconds the measured steps waited for data, and computed (as step()'s data_s, compute_s).
  double measured_data_seconds() const { return measured_data_s_; }
  double measured_compute_seconds() const { return measured_compute_s_; }

 private:
  int64_t warmup_;
  int64_t steps_ = 0;
  int64_t images_ = 0;
  double data_s_ = 0, compute_s_ = 0;
  double measured_data_s_ = 0, measured_compute_s_ = 0;
  std::vector<double> step_s_;
  Clock::time_point t0_{}, t_last_{};
  bool started_ = false;
};

/// Seconds between two time points.
inline double seconds_between(ThroughputMeter::Clock::time_point a,
                              ThroughputMeter::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace rn50
