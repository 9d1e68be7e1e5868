// rn50: evaluation drivers of a Session (train/session.h), and the one rule that picks the
// forward every evaluation of a run uses — `rn50 eval` and the validation after training
// epochs alike, on every device — so that evaluating a checkpoint repeats the validation its
// training run reported.
#pragma once

#include "train/evaluator.h"
#include "train/session.h"

namespace rn50 {

/// The forward that evaluates a run.
enum class EvalPath {
  /// The oneDNN inference engine of the folded network (BatchNorm folded into the convolutions,
  /// ReLU and residual add fused; rn50/inference.h): the fastest forward computing the trained
  /// function. Runs with the CPU backend in fp32 without --qat.
  folded_engine,
  /// The model's own eval-mode forward (running BatchNorm statistics) in the run's compute
  /// dtype (bf16 under --amp on the CPU; fp16/bf16/tf32 on CUDA), fake-quantized under --qat
  /// exactly as in training: every other run.
  model,
};

/// The rule: EvalPath::folded_engine on the "onednn" backend in Precision::fp32 without
/// --qat, EvalPath::model otherwise.
EvalPath eval_path(const Session& s);

/// One pass over the session's val source with eval_path(s) (epoch `epoch` of the source;
/// every rank's shard, summed exactly over the ranks). print_interval > 0 prints a progress
/// line every that many batches (on ranks that log).
EvalResult run_validation(Session& s, int print_interval, int epoch = 0);

/// `rn50 eval`: run_validation, its summary line and the report's "eval" record.
void run_eval_only(Session& s);

/// `rn50 eval --benchmark` (DLE's inference benchmark): the inference engine of the folded
/// model on the run's device, timed on --batch-size random images (infer_benchmark records).
/// Precision: the engine precision of the run's (engine_precision: fp32, tf32, fp16, bf16), or
/// int8 on the training grid with the learnt ranges under --qat (the CPU engine's; CUDA refuses
/// it).
void run_eval_benchmark(Session& s);

}  // namespace rn50
