// rn50: the backend registry: names -> factories, and what this build and machine can run.
#include "backend/factories.h"
#include "core/check.h"

namespace rn50 {

std::vector<std::string> compiled_backends() {
#ifdef RN50_HAVE_CUDA
  return {"ref", "onednn", "cuda"};
#else
  return {"ref", "onednn"};
#endif
}

std::vector<std::string> available_backends() {
  std::vector<std::string> v{"ref", "onednn"};
  if (cuda_device_count() > 0) v.push_back("cuda");
  return v;
}

#ifndef RN50_HAVE_CUDA
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
  return "the CUDA backend is not built into this binary (configure with -DRN50_CUDA=ON on a "
         "machine with nvcc, cuDNN 9 and cuBLAS)";
}
#endif

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opt) {
  if (name == "ref") return make_ref_backend();
  if (name == "onednn" || name == "cpu") return make_onednn_backend();
  if (name == "cuda") {
#ifdef RN50_HAVE_CUDA
    return make_cuda_backend(opt);
#else
    RN50_FAIL("backend 'cuda': {}; use --device cpu", cuda_unavailable_reason());
#endif
  }
  std::string known;
  for (const std::string& n : compiled_backends()) known += (known.empty() ? "" : ", ") + n;
  RN50_FAIL("unknown backend '{}' (built: {})", name, known);
}

}  // namespace rn50
