#include "train/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace rn50 {

double MetricSums::loss() const {
  return loss_samples ? loss_sum / static_cast<double>(loss_samples)
                      : std::numeric_limits<double>::quiet_NaN();
}
double MetricSums::top1_pct() const {
  return acc_samples ? 100.0 * static_cast<double>(top1) / static_cast<double>(acc_samples)
                     : std::numeric_limits<double>::quiet_NaN();
}
double MetricSums::top5_pct() const {
  return acc_samples ? 100.0 * static_cast<double>(top5) / static_cast<double>(acc_samples)
                     : std::numeric_limits<double>::quiet_NaN();
}

void ThroughputMeter::start() {
  t0_ = t_last_ = Clock::now();
  started_ = true;
}

void ThroughputMeter::step(int64_t images, double data_s, double compute_s) {
  const auto now = Clock::now();
  if (!started_) {
    t0_ = t_last_ = now;
    started_ = true;
  }
  ++steps_;
  data_s_ += data_s;
  compute_s_ += compute_s;
  if (steps_ <= warmup_) {
    t0_ = now;  // measurement starts at the end of the last warmup step
  } else {
    images_ += images;
    step_s_.push_back(seconds_between(t_last_, now));
    measured_data_s_ += data_s;
    measured_compute_s_ += compute_s;
  }
  t_last_ = now;
}

double ThroughputMeter::measured_seconds() const {
  return measured_steps() ? seconds_between(t0_, t_last_) : 0.0;
}

double ThroughputMeter::ips() const {
  const double s = measured_seconds();
  return s > 0 ? static_cast<double>(images_) / s : 0.0;
}

}  // namespace rn50
