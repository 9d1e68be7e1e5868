// rn50: the training precision, one value with everything that follows from it. Every report
// field, benchmark sweep point, progress line and inference-engine choice takes its name and
// its meaning from here.
#pragma once

#include <string>
#include <vector>

#include "rn50/tensor.h"

namespace rn50 {

/// How a training run computes (DLE's precision modes; train.h's --amp, --amp-dtype,
/// --use-pure-fp16 and --no-tf32 choose it, precision_of() in src/train/config.h):
///   fp32       f32 everywhere, IEEE f32 math (CUDA with --no-tf32; every CPU run);
///   tf32       f32 tensors, convolutions and GEMMs on TF32 tensor cores (CUDA's default);
///   amp_fp16   mixed precision, fp16 compute with f32 master weights and dynamic loss scaling
///              (DLE --amp; CUDA);
///   amp_bf16   mixed precision, bf16 compute with f32 master weights, no loss scaling (CUDA,
///              and the CPU through oneDNN on AVX-512-BF16 CPUs);
///   pure_fp16  DLE Paddle's O2 (--use-pure-fp16): conv/fc weights, gradients and momentum only
///              in fp16, BN and loss f32, loss scaling (CUDA).
enum class Precision { fp32, tf32, amp_fp16, amp_bf16, pure_fp16 };

/// Every precision, in the order above.
const std::vector<Precision>& all_precisions();

/// "fp32", "tf32", "amp_fp16", "amp_bf16", "pure_fp16": the name in reports, sweeps and tables.
const char* precision_name(Precision p);

/// Parses a precision name: the names above, with '-' for '_' and in any case ("AMP-FP16").
/// Throws rn50::Error naming `flag` and the value, and listing the names, otherwise.
Precision parse_precision(const std::string& name, const std::string& flag);

/// The dtype convolutions, the fc and activations compute in: f32 (fp32, tf32), f16 (amp_fp16,
/// pure_fp16), bf16 (amp_bf16).
DType compute_dtype(Precision p);

/// Whether the loss is scaled (fp16's narrow exponent range): amp_fp16 and pure_fp16.
bool loss_scaling(Precision p);

/// The inference engine precision (rn50/inference.h EngineOptions::precision) that computes as
/// this training precision does: "fp32", "tf32", "fp16" (amp_fp16, pure_fp16) or "bf16".
const char* engine_precision(Precision p);

/// A one-line description for progress lines: "fp32", "tf32", "amp fp16, loss scale 128
/// dynamic", "amp bf16", "pure fp16, loss scale 128 static".
std::string describe_precision(Precision p, double loss_scale, bool dynamic_loss_scaling);

}  // namespace rn50
