// rn50: oneDNN backend core: engine/stream, alloc/copy/zero, supports(), shared helpers.
#include "backend/cpu/onednn_backend.h"

#include <cstring>

#include "backend/factories.h"
#include "core/check.h"

namespace rn50 {
namespace onednn {

OnednnBackend::OnednnBackend() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
OnednnBackend::~OnednnBackend() = default;

bool OnednnBackend::supports(Op op, DType dtype, Layout layout) const {
  return dtype == DType::f32 && (layout == Layout::NCHW || layout == Layout::NHWC);
}

Tensor OnednnBackend::alloc(std::vector<int64_t> shape, DType dtype, Layout layout) {
  return Tensor::empty(std::move(shape), dtype, layout);
}

void OnednnBackend::copy(const Tensor& src, Tensor& dst) { RN50_FAIL("onednn copy: not implemented"); }
void OnednnBackend::zero(Tensor& dst) { RN50_FAIL("onednn zero: not implemented"); }
void OnednnBackend::synchronize() { stream_.wait(); }

}  // namespace onednn

std::unique_ptr<Backend> make_onednn_backend() {
  return std::make_unique<onednn::OnednnBackend>();
}

}  // namespace rn50
