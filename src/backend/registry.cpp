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

DeviceChoice resolve_device(const std::string& device) {
  if (device == "auto")
    return cuda_device_count() > 0 ? DeviceChoice{"cuda", 0, "cuda:0"}
                                   : DeviceChoice{"onednn", 0, "cpu"};
  if (device == "cpu") return {"onednn", 0, "cpu"};
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    const std::string idx = device.size() > 5 ? device.substr(5) : "0";
    RN50_CHECK(!idx.empty() && idx.size() <= 4 &&
                   idx.find_first_not_of("0123456789") == std::string::npos,
               "--device '{}': expected auto, cpu, cuda or cuda:N", device);
    const int n = cuda_device_count();
    RN50_CHECK(n > 0, "--device {}: {}; use --device cpu", device, cuda_unavailable_reason());
    const int i = std::stoi(idx);
    RN50_CHECK(i < n, "--device {}: this machine has {} GPU(s) (cuda:0 to cuda:{})", device, n,
               n - 1);
    return {"cuda", i, "cuda:" + std::to_string(i)};
  }
  RN50_FAIL("--device '{}': expected auto, cpu, cuda or cuda:N", device);
}

}  // namespace rn50
