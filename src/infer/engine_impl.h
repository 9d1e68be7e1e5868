// rn50 inference: the engines behind make_inference_engine (rn50/inference.h).
#pragma once

#include <memory>

#include "rn50/inference.h"

namespace rn50 {

/// oneDNN engine (engine_cpu.cpp); precision "fp32" or "bf16".
std::unique_ptr<InferenceEngine> make_cpu_engine(InferenceProgram program,
                                                 const std::string& precision);

}  // namespace rn50
