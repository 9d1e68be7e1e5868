// rn50: the DLE learning-rate schedule — linear warmup, then cosine decay to 0, evaluated for
// every optimiser step (DLE PyTorch `lr_cosine_policy`; shared/peers/torch_reference.py lr_at).
#pragma once

#include <cstdint>

namespace rn50 {

/// Parameters of the schedule, in steps.
struct LrSchedule {
  double base_lr = 0.256;      ///< peak lr = lr_per_256 * global_batch / 256
  double warmup_steps = 0;     ///< warmup_epochs * steps_per_epoch (may be fractional)
  double total_steps = 1;      ///< epochs * steps_per_epoch

  /// base_lr = lr_per_256 * global_batch / 256; warmup/total from epochs and steps per epoch.
  static LrSchedule make(double lr_per_256, int64_t global_batch, double warmup_epochs,
                         int epochs, int64_t steps_per_epoch);

  /// lr of global step `step` (0-based), exactly torch_reference.py's lr_at, in double:
  ///   step <  warm: base * (step + 1) / warm
  ///   step >= warm: 0.5 * base * (1 + cos(pi * (step - warm) / max(1, total - warm)))
  double at(int64_t step) const;
};

}  // namespace rn50
