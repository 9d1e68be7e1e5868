// rn50 oneDNN backend: fake quantization for QAT (--qat) as OpenMP loops over f32 or bf16
// (oneDNN 2.6 has no fake-quantization primitive), with the f32 arithmetic of
// src/core/fake_quant.h: bit-identical to the reference backend and to torch's
// fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine.
#include "core/fake_quant.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"

namespace rn50::onednn {

namespace {

/// max |x| over n elements; NaN when any element is NaN.
template <class T>
float absmax(const T* x, int64_t n) {
  float m = 0;
  bool nan = false;
#pragma omp parallel for reduction(max : m) reduction(|| : nan) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(widen(x[i]));
    nan = nan || std::isnan(v);
    m = std::max(m, v);
  }
  return nan ? NAN : m;
}

/// y = g(x) over n elements (serial: the callers parallelise).
template <class T, class U>
void quantize(const fake_quant::Grid<float>& g, const T* x, U* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) narrow(y[i], g(widen(x[i])));
}

/// y = g(x), g the tensor's range, in parallel blocks of 64 Ki elements.
template <class T>
void quantize_tensor(float amax, const T* x, T* y, int64_t n) {
  const fake_quant::Grid<float> g(amax);
  constexpr int64_t kBlock = int64_t{1} << 16;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) quantize(g, x + b, y + b, std::min(kBlock, n - b));
}

void check_pair(const char* op, const char* an, const Tensor& a, const Tensor& y) {
  compute_dtype_of(op, an, a);
  compute_dtype_of(op, "y", y);
  RN50_CHECK(a.same_shape(y) && eff_layout(a) == eff_layout(y),
             "onednn {}: y {} must have {}'s shape and layout ({})", op, y.str(), an, a.str());
}

}  // namespace

void OnednnBackend::fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) {
  const char* op = "fake_quant_act";
  check_pair(op, "x", x, y);
  RN50_CHECK(x.dtype() == y.dtype(), "onednn {}: y {} must have x's dtype ({})", op, y.str(),
             x.str());
  check_tensor(op, "qstate", qstate);
  RN50_CHECK(qstate.numel() == fake_quant::state_size,
             "onednn {}: qstate must hold {} floats, got {}", op,
             static_cast<int>(fake_quant::state_size), qstate.str());
  float* st = qstate.data_as<float>();
  const int64_t n = x.numel();
  const bool f32 = x.dtype() == DType::f32;
  if (update) {
    const float m =
        f32 ? absmax(x.data_as<const float>(), n) : absmax(x.data_as<const uint16_t>(), n);
    st[fake_quant::scratch] = m;
    fake_quant::moving_average_update(st, m);
  }
  if (f32)
    quantize_tensor(st[fake_quant::amax], x.data_as<const float>(), y.data_as<float>(), n);
  else
    quantize_tensor(st[fake_quant::amax], x.data_as<const uint16_t>(), y.data_as<uint16_t>(), n);
}

void OnednnBackend::fake_quant_weight(const Tensor& w, Tensor& y) {
  const char* op = "fake_quant_weight";
  check_pair(op, "w", w, y);
  RN50_CHECK(w.dtype() == DType::f32 && w.ndim() >= 2,
             "onednn {}: w must be an f32 weight (K, ...), got {}", op, w.str());
  const int64_t k = w.dim(0), per = w.numel() / k;
  const float* p = w.data_as<const float>();
  const bool f32 = y.dtype() == DType::f32;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < k; ++o) {
    const float* src = p + o * per;
    const fake_quant::Grid<float> g(fake_quant::absmax_of(src, per));
    if (f32)
      quantize(g, src, y.data_as<float>() + o * per, per);
    else
      quantize(g, src, y.data_as<uint16_t>() + o * per, per);
  }
}

}  // namespace rn50::onednn
