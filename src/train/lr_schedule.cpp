#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace rn50 {

LrSchedule LrSchedule::make(double lr_per_256, int64_t global_batch, double warmup_epochs,
                            int epochs, int64_t steps_per_epoch) {
  LrSchedule s;
  s.base_lr = lr_per_256 * static_cast<double>(global_batch) / 256.0;
  s.warmup_steps = warmup_epochs * static_cast<double>(steps_per_epoch);
  s.total_steps = static_cast<double>(epochs) * static_cast<double>(steps_per_epoch);
  return s;
}

double LrSchedule::at(int64_t step) const {
  const double st = static_cast<double>(step);
  if (st < warmup_steps) return base_lr * (st + 1.0) / warmup_steps;
  const double span = std::max(1.0, total_steps - warmup_steps);
  return 0.5 * base_lr * (1.0 + std::cos(std::numbers::pi * (st - warmup_steps) / span));
}

}  // namespace rn50
