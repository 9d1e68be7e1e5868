// rn50: the model of a Session as an inference program and as an exported model: BatchNorm
// folded, the --image-shape 4 zero channel dropped, QAT ranges and class names attached.
#pragma once

#include "rn50/inference.h"
#include "train/session.h"

namespace rn50 {

/// The inference program of the session's current weights (fold_network; rn50/inference.h).
/// With --image-shape 4,H,W the stem's zero-channel weights are dropped (exact: that channel is
/// always zero), so the program takes RGB. Under --qat the learnt activation ranges are attached
/// (apply_qat_ranges: the INT8 engine then runs on the training grid).
InferenceProgram folded_program(Session& s);

/// The session's model for deployment: folded_program, the class names (class_names_for: the
/// folders', then numbered ones up to --num-of-class), the eval preprocessing (--resize-short,
/// --crop-size, --normalize-mean/std) and, under --qat, calibration method "qat".
InferenceModel trained_inference_model(Session& s);

/// --inference-dir: writes trained_inference_model to `dir` (model.json + model.safetensors,
/// and model.onnx in builds with ONNX, QDQ under --qat) and prints where. Rank 0 only.
void write_inference_dir(Session& s, const std::string& dir);

}  // namespace rn50
