#include "backend/factories.h"
#include "core/check.h"

namespace rn50 {

std::vector<std::string> available_backends() { return {"ref", "onednn"}; }

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "ref") return make_ref_backend();
  if (name == "onednn" || name == "cpu") return make_onednn_backend();
  if (name == "cuda")
    RN50_FAIL("backend 'cuda' is not built into this binary (the CUDA backend is not implemented "
              "yet; use --device cpu)");
  RN50_FAIL("unknown backend '{}' (available: ref, onednn)", name);
}

}  // namespace rn50
