// rn50: the JSON-lines report (--report-file): one JSON object per line, flushed after each, so
// a crashed or running job leaves a readable log. Epochs are 0-based (the checkpoint folder
// names); "step" counts optimiser steps done (global, 1-based after the first step); losses are
// label-smoothed cross-entropy; top1/top5 in percent; ips = images / wall seconds; times in s.
//   {"type":"config", every TrainConfig field (flag names with '_'), "num_of_class" (resolved),
//    "classes", "global_batch_size", "base_lr", "steps_per_epoch", "backend", "train.samples",
//    "val.samples", "params", "world_size", "version"[, "resumed_from", "start_epoch",
//    "start_step"]}                                                       first line
//   {"type":"step","epoch","step","train.loss" (this step), "train.loss_avg" (mean since the
//    previous step line), "train.lr" (this step), "train.ips"}        every --print-interval
//   {"type":"epoch","epoch","step","train.loss","train.top1","train.top5","train.lr" (last
//    step),"train.ips" (first step of the run excluded),"train.data_time","train.compute_time"
//    (mean seconds per step),"train.bad_samples"[,"val.loss","val.top1","val.top5","val.ips",
//    "val.images","val.bad_samples"]}                                    per epoch
//   {"type":"eval","epoch" (of the checkpoint, or null),"val.*"}        --run-scope eval_only
//   {"type":"benchmark","train.ips" (measured steps only),"train.data_time",
//    "train.compute_time","train.loss","steps","warmup_steps","batch_size","images","seconds",
//    "arch","crop_size","data_layout","backend"}                         --benchmark
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace rn50 {

class ReportWriter {
 public:
  /// Empty path: every write is a no-op. Otherwise truncates/creates `path` (and its parent
  /// directories); throws rn50::Error naming the path when it cannot be opened.
  explicit ReportWriter(const std::string& path);
  ~ReportWriter();
  ReportWriter(const ReportWriter&) = delete;
  ReportWriter& operator=(const ReportWriter&) = delete;

  bool enabled() const { return f_ != nullptr; }
  /// Writes `line` (an object) as one line and flushes. NaN/inf numbers are written as null.
  void write(const nlohmann::ordered_json& line);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

/// A double as JSON: null when NaN or infinite (JSON has no NaN).
nlohmann::ordered_json json_number(double v);

}  // namespace rn50
