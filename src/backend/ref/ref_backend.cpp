// rn50 reference backend: capability query, memory functions and the factory.
#include "backend/ref/ref_backend.h"

#include <cstring>

#include "backend/factories.h"
#include "backend/ref/ref_util.h"

namespace rn50 {
namespace ref {

bool RefBackend::supports(Op op, DType dtype, Layout layout) const {
  (void)layout;
  // SGD slabs: f32/f64, or f16 (pure fp16); bf16 weights are never updated in place.
  if (op == Op::sgd) return dtype != DType::bf16 && is_compute_dtype(dtype);
  return is_compute_dtype(dtype);
}

Tensor RefBackend::alloc(std::vector<int64_t> shape, DType dtype, Layout layout) {
  return Tensor::empty(std::move(shape), dtype, layout);
}

namespace {
bool is_float_storage(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
}  // namespace

void RefBackend::copy(const Tensor& src, Tensor& dst) {
  RN50_CHECK(src.defined() && dst.defined(), "ref copy: undefined tensor (src {}, dst {})",
             src.str(), dst.str());
  RN50_CHECK(src.is_cpu() && dst.is_cpu(),
             "ref copy: {} -> {}: the ref backend only copies "
             "host tensors",
             src.str(), dst.str());
  RN50_CHECK(src.same_shape(dst), "ref copy: shape mismatch, src {} dst {}", src.str(), dst.str());
  bool same_order = src.ndim() != 4 || src.layout() == dst.layout();
  if (src.dtype() == dst.dtype()) {
    if (src.data() == dst.data() && same_order) return;
    if (same_order) {
      std::memmove(dst.data(), src.data(), src.nbytes());
    } else {
      Tensor t = src.to_layout(dst.layout());
      std::memcpy(dst.data(), t.data(), t.nbytes());
    }
    return;
  }
  RN50_CHECK(is_float_storage(src.dtype()) && is_float_storage(dst.dtype()),
             "ref copy: unsupported dtype conversion {} -> {} (only between F32, F64, F16 and "
             "BF16)",
             src.str(), dst.str());
  store(load(src, Layout::NCHW), dst, Layout::NCHW);
}

void RefBackend::zero(Tensor& dst) {
  RN50_CHECK(dst.defined() && dst.is_cpu(), "ref zero: {} must be a defined host tensor",
             dst.str());
  std::memset(dst.data(), 0, dst.nbytes());
}

}  // namespace ref

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<ref::RefBackend>(); }

}  // namespace rn50
