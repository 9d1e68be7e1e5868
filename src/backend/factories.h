// Factory functions of the backends compiled into this build (used by make_backend()).
#pragma once
#include <memory>

#include "rn50/backend.h"

namespace rn50 {
/// Naive reference backend (src/backend/ref): float64 accumulation, NCHW and NHWC, f32 (and f64).
std::unique_ptr<Backend> make_ref_backend();
/// oneDNN CPU backend (src/backend/cpu): primitives cached per shape.
std::unique_ptr<Backend> make_onednn_backend();
#ifdef RN50_HAVE_CUDA
/// CUDA backend (src/backend/cuda) on device opt.device_index. Throws rn50::Error when no such
/// GPU is usable (cuda_unavailable_reason() explains).
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt);
#endif
}  // namespace rn50
