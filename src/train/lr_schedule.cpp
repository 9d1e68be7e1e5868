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
  s.steps_per_epoch = static_cast<double>(steps_per_epoch);
  return s;
}

double LrSchedule::at(int64_t step) const {
  const double st = static_cast<double>(step);
  if (st < warmup_steps)
    return warmup_start_lr + (base_lr - warmup_start_lr) * (st + 1.0) / warmup_steps;
  const double span = std::max(1.0, total_steps - warmup_steps);
  const double t = (st - warmup_steps) / span;
  if (policy == "linear") return base_lr * std::max(0.0, 1.0 - t);
  if (policy == "constant") return base_lr;
  if (policy == "step") {
    const double epoch = st / steps_per_epoch;
    double lr = base_lr;
    for (double e : decay_epochs)
      if (epoch >= e) lr *= decay_rate;
    return lr;
  }
  // The same operation order as torch_reference.py's lr_at (the tests compare to the last bit).
  return 0.5 * base_lr * (1.0 + std::cos(std::numbers::pi * (st - warmup_steps) / span));
}

LrSchedule lr_schedule(const Config& cfg, int64_t steps_per_epoch) {
  const int64_t global_batch = static_cast<int64_t>(cfg.batch_size) * cfg.world_size;
  LrSchedule s = LrSchedule::make(cfg.lr, global_batch, cfg.warmup_epochs, cfg.epochs,
                                  steps_per_epoch);
  s.policy = cfg.lr_scheduler;
  s.warmup_start_lr = cfg.warmup_start_lr * static_cast<double>(global_batch) / 256.0;
  s.decay_epochs = cfg.lr_decay_epochs;
  s.decay_rate = cfg.lr_decay_rate;
  return s;
}

}  // namespace rn50
