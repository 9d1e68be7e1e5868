// rn50 inference: the engines behind make_inference_engine (rn50/inference.h).
#pragma once

#include <memory>

#include "rn50/inference.h"

namespace rn50 {

/// oneDNN fp32 engine (engine_cpu.cpp).
std::unique_ptr<InferenceEngine> make_cpu_engine(InferenceProgram program);

}  // namespace rn50
