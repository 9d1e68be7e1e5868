// rn50 inference: make_inference_engine picks the engine for a device and precision.
#include "core/check.h"
#include "infer/engine_impl.h"

namespace rn50 {

std::unique_ptr<InferenceEngine> make_inference_engine(InferenceProgram program,
                                                       const EngineOptions& opt) {
  RN50_CHECK(opt.device == "cpu",
             "inference: --device {}: the inference engine runs on the CPU only so far (the GPU "
             "engine is not built yet); use --device cpu",
             opt.device);
  RN50_CHECK(opt.precision == "fp32" || opt.precision == "bf16" || opt.precision == "int8",
             "inference: --precision {}: the CPU engine computes in fp32, bf16 or int8",
             opt.precision);
  RN50_CHECK(!program.ops.empty(), "inference: the program is empty");
  return make_cpu_engine(std::move(program), opt.precision);
}

}  // namespace rn50
