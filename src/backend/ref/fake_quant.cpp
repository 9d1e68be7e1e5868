// rn50 reference backend: fake quantization for QAT (--qat), elementwise in memory order with
// the f32 arithmetic of src/core/fake_quant.h (the definition itself is f32: torch's
// fake_quantize_* functions compute in float), so every backend can be compared bit for bit.
#include "core/fake_quant.h"

#include <cmath>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {

void check_pair(const char* op, const char* an, const Tensor& a, const Tensor& y) {
  check_float(op, an, a);
  check_float(op, "y", y);
  RN50_CHECK(a.same_shape(y) && (a.ndim() != 4 || a.layout() == y.layout()),
             "ref {}: y {} must have {}'s shape and layout ({})", op, y.str(), an, a.str());
}

}  // namespace

void RefBackend::fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) {
  const char* op = "fake_quant_act";
  check_pair(op, "x", x, y);
  RN50_CHECK(qstate.defined() && qstate.is_cpu() && qstate.dtype() == DType::f32 &&
                 qstate.numel() == fake_quant::state_size,
             "ref {}: qstate must be a host f32 tensor of {} elements, got {}", op,
             static_cast<int>(fake_quant::state_size), qstate.str());
  const int64_t n = x.numel();
  float* st = qstate.data_as<float>();
  if (update) {
    float m = 0;
    for (int64_t i = 0; i < n && !std::isnan(m); ++i) {
      const float v = std::fabs(static_cast<float>(get(x, i)));
      if (!(v <= m)) m = v;  // a NaN sticks (and then leaves the state unchanged)
    }
    st[fake_quant::scratch] = m;
    fake_quant::moving_average_update(st, m);
  }
  const float amax = st[fake_quant::amax];
  if (y.dtype() == DType::f64) {  // float64 golden comparisons: the same formula in double
    const fake_quant::Grid<double> g(amax);
    for (int64_t i = 0; i < n; ++i) set(y, i, g(get(x, i)));
    return;
  }
  const fake_quant::Grid<float> g(amax);
  for (int64_t i = 0; i < n; ++i) set(y, i, g(static_cast<float>(get(x, i))));
}

void RefBackend::fake_quant_weight(const Tensor& w, Tensor& y) {
  const char* op = "fake_quant_weight";
  check_pair(op, "w", w, y);
  RN50_CHECK(w.dtype() == DType::f32 && w.ndim() >= 2,
             "ref {}: w must be an f32 weight (K, ...), got {}", op, w.str());
  const int64_t k = w.dim(0), per = w.numel() / k;
  const float* p = w.data_as<const float>();
  for (int64_t o = 0; o < k; ++o) {
    const float* w_o = p + o * per;
    const float m = fake_quant::absmax_of(w_o, per);
    if (y.dtype() == DType::f64) {
      const fake_quant::Grid<double> g(m);
      for (int64_t i = 0; i < per; ++i) set(y, o * per + i, g(w_o[i]));
    } else {
      const fake_quant::Grid<float> g(m);
      for (int64_t i = 0; i < per; ++i) set(y, o * per + i, g(w_o[i]));
    }
  }
}

}  // namespace rn50::ref
