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

const char* engine_precision_name(EnginePrecision p) {
  switch (p) {
    case EnginePrecision::fp32: return "fp32";
    case EnginePrecision::tf32: return "tf32";
    case EnginePrecision::fp16: return "fp16";
    case EnginePrecision::bf16: return "bf16";
    case EnginePrecision::int8: return "int8";
  }
  return "?";
}

EnginePrecision parse_engine_precision(const std::string& name) {
  if (name.empty()) return EnginePrecision::fp32;
  for (EnginePrecision p : {EnginePrecision::fp32, EnginePrecision::tf32, EnginePrecision::fp16,
                            EnginePrecision::bf16, EnginePrecision::int8})
    if (name == engine_precision_name(p)) return p;
  RN50_FAIL("inference: --precision {}: not a precision; use fp32, bf16 or int8 (CPU), or "
            "fp32, tf32, fp16 or bf16 (GPU)",
            name);
}

std::unique_ptr<InferenceEngine> make_inference_engine(InferenceProgram program,
                                                       const EngineOptions& opt) {
  RN50_CHECK(!program.ops.empty(), "inference: the program is empty");
  const EnginePrecision p = parse_engine_precision(opt.precision);
  using P = EnginePrecision;
  if (opt.device == "ref") {  // the reference backend: the GPU engine's logic, slowly (tests)
    RN50_CHECK(p == P::fp32 || p == P::fp16 || p == P::bf16,
               "inference: --precision {}: the engine on the reference backend computes in "
               "fp32, fp16 or bf16",
               engine_precision_name(p));
    return make_device_engine(std::move(program), engine_backend(make_backend("ref"), opt), p);
  }
  const DeviceChoice dev = resolve_device(opt.device);  // throws naming --device
  if (dev.backend == "cuda") {
    RN50_CHECK(p != P::int8,
               "inference: --precision int8 runs on the CPU engine only (INT8 convolutions on "
               "the GPU need TensorRT or cuDNN's graph API, not built); use --device cpu, or "
               "--precision fp16 on the GPU");
    BackendOptions bo;
    bo.device_index = dev.index;
    bo.allow_tf32 = p == P::tf32;  // fp32 means IEEE f32 math, as TensorRT's default
    return make_device_engine(std::move(program), engine_backend(make_backend("cuda", bo), opt),
                              p);
  }
  return make_cpu_engine(std::move(program), p, {}, opt.batch_invariant, opt.cpu_activations);
}

}  // namespace rn50
