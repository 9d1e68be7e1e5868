// rn50 inference: the engines behind make_inference_engine (rn50/inference.h).
#pragma once

#include <functional>
#include <memory>

#include "rn50/inference.h"

namespace rn50 {

/// Called after each op of an fp32 CPU engine's run() with the value it wrote: host f32 NHWC
/// data of `count` elements, valid only during the call (calibration).
using ValueObserver = std::function<void(int value, const float* data, int64_t count)>;

/// oneDNN engine (engine_cpu.cpp); precision "fp32", "bf16" or "int8" (rn50/inference.h).
/// With an observer (fp32 only), every value is handed to it as it is written.
std::unique_ptr<InferenceEngine> make_cpu_engine(InferenceProgram program,
                                                 const std::string& precision,
                                                 ValueObserver observer = {});

}  // namespace rn50
