// rn50: host-side metrics — top-k accuracy from logits, label-smoothed cross-entropy, running
// sums over an epoch, and a throughput meter (images / wall time after warmup; DLE's "ips").
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace rn50 {

/// Rank of class `label` among `k` logits sorted by decreasing value, ties broken by the lower
/// class index first (a stable descending sort): 0 = the top class. A NaN logit of the label
/// ranks last (k). Used for top-k: the label is in the top k iff rank < k.
int64_t label_rank(const float* logits, int64_t k, int64_t label);

/// Indices of the `top` largest logits, largest first, ties -> lower index first. top <= k.
std::vector<int64_t> topk_indices(const float* logits, int64_t k, int64_t top);

/// Softmax of one row in fp32 (max-subtracted, as torch.softmax), written to probs[0..k).
void softmax_row(const float* logits, int64_t k, float* probs);

/// torch CrossEntropyLoss(label_smoothing=eps) of one row, in double:
///   -(1-eps) * log p[label] - eps/k * sum_j log p[j],  log p = logits - logsumexp(logits).
double smoothed_xent(const float* logits, int64_t k, int64_t label, double eps);

/// Counts of correct predictions over a batch.
struct TopkCounts {
  int64_t top1 = 0;
  int64_t top5 = 0;
};
/// logits (n, k) row-major f32, labels i32 (n). Only the first n rows are used.
TopkCounts topk_correct(const float* logits, int64_t n, int64_t k, const int32_t* labels);

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

 private:
  int64_t warmup_;
  int64_t steps_ = 0;
  int64_t images_ = 0;
  double data_s_ = 0, compute_s_ = 0;
  Clock::time_point t0_{}, t_last_{};
  bool started_ = false;
};

/// Seconds between two time points.
inline double seconds_between(ThroughputMeter::Clock::time_point a,
                              ThroughputMeter::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace rn50
