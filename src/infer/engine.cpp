// rn50 inference: make_inference_engine picks the engine for a device and precision: the
// oneDNN CPU engine (engine_cpu.cpp) or the compute-backend engine (engine_device.cpp: CUDA,
// or the reference backend for tests).
#include "core/check.h"
#include "infer/engine_impl.h"
#include "rn50/backend.h"
#include "rn50/profile.h"

namespace rn50 {

namespace {
/// The device engine's backend, behind the profiling backend when asked to be profiled.
std::unique_ptr<Backend> engine_backend(std::unique_ptr<Backend> be, const EngineOptions& opt) {
  return opt.profile ? make_profiling_backend(std::move(be)) : std::move(be);
}
}  // namespace

void InferenceEngine::run_device_resident() {
  RN50_FAIL("inference: the {} engine computes on the host; it has no device-resident input "
            "(stage_on_device returned false)",
            precision());
}

std::unique_ptr<InferenceEngine> make_inference_engine(InferenceProgram program,
                                                       const EngineOptions& opt) {
  RN50_CHECK(!program.ops.empty(), "inference: the program is empty");
  const std::string p = opt.precision.empty() ? std::string("fp32") : opt.precision;
  if (opt.device == "ref") {  // the reference backend: the GPU engine's logic, slowly (tests)
    RN50_CHECK(p == "fp32" || p == "fp16" || p == "bf16",
               "inference: --precision {}: the engine on the reference backend computes in "
               "fp32, fp16 or bf16",
               p);
    return make_device_engine(std::move(program), engine_backend(make_backend("ref"), opt), p);
  }
  const DeviceChoice dev = resolve_device(opt.device);  // throws naming --device
  if (dev.backend == "cuda") {
    RN50_CHECK(p != "int8",
               "inference: --precision int8 runs on the CPU engine only (INT8 convolutions on "
               "the GPU need TensorRT or cuDNN's graph API, not built); use --device cpu, or "
               "--precision fp16 on the GPU");
    RN50_CHECK(p == "fp32" || p == "tf32" || p == "fp16" || p == "bf16",
               "inference: --precision {}: the GPU engine computes in fp32, tf32, fp16 or bf16",
               p);
    BackendOptions bo;
    bo.device_index = dev.index;
    bo.allow_tf32 = p == "tf32";  // fp32 means IEEE f32 math, as TensorRT's default
    return make_device_engine(std::move(program), engine_backend(make_backend("cuda", bo), opt),
                              p);
  }
  RN50_CHECK(p == "fp32" || p == "bf16" || p == "int8",
             "inference: --precision {}: the CPU engine computes in fp32, bf16 or int8 (fp16 "
             "and tf32 are the GPU engine's)",
             p);
  return make_cpu_engine(std::move(program), p, {}, opt.batch_invariant,
                         opt.cpu_activations);
}

}  // namespace rn50
