// rn50: the DLE learning-rate schedules — linear warmup, then cosine (default), step, linear or
// constant, evaluated for every optimiser step (DLE PyTorch image_classification/training.py
// lr_cosine_policy, lr_step_policy, lr_linear_policy; shared/peers/torch_reference.py lr_at for
// cosine). DLE evaluates its policies per epoch; rn50 per step, with the epoch of a step being
// step / steps_per_epoch as a real number, so cosine and linear decay smoothly within an epoch
// and step decays at the first step of each decay epoch.
#pragma once

#include "rn50/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace rn50 {

/// Parameters of the schedule, in steps.
struct LrSchedule {
  std::string policy = "cosine";  ///< cosine | step | linear | constant (--lr-scheduler)
  double base_lr = 0.256;         ///< peak lr = lr_per_256 * global_batch / 256
  double warmup_steps = 0;        ///< warmup_epochs * steps_per_epoch (may be fractional)
  double total_steps = 1;         ///< epochs * steps_per_epoch
  double steps_per_epoch = 1;
  double warmup_start_lr = 0;        ///< --warmup-start-lr: the lr warmup starts from
  std::vector<double> decay_epochs;  ///< step: --lr-decay-epochs (ascending)
  double decay_rate = 0.1;           ///< step: --lr-decay-rate, the factor at each decay epoch

  /// base_lr = lr_per_256 * global_batch / 256; warmup/total from epochs and steps per epoch.
  static LrSchedule make(double lr_per_256, int64_t global_batch, double warmup_epochs, int epochs,
                         int64_t steps_per_epoch);

  /// lr of global step `step` (0-based), in double. Warmup (step < warm), linear from
  /// warmup_start_lr (0: torch_reference.py's lr_at exactly):
  ///   start + (base - start) * (step + 1) / warm
  /// then, with t = (step - warm) / max(1, total - warm):
  ///   cosine    0.5 * base * (1 + cos(pi * t))
  ///   linear    base * (1 - t)
  ///   constant  base
  ///   step      base * rate^k, k = decay epochs <= step / steps_per_epoch
  double at(int64_t step) const;
};

/// The lr schedule of `cfg` (--lr per 256 images scaled to the global batch --batch-size x
/// world size, --warmup-epochs, --warmup-start-lr, --lr-scheduler and its decay flags) for
/// `steps_per_epoch` steps per epoch.
LrSchedule lr_schedule(const Config& cfg, int64_t steps_per_epoch);

}  // namespace rn50
