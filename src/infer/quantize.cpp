// rn50 inference: INT8 quantization rules (see quantize.h).
#include "infer/quantize.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace rn50::quant {

std::vector<float> weight_scales(const Tensor& w, float code_max) {
  const int64_t k = w.dim(0), per = w.numel() / k;
  const float* p = w.data_as<const float>();
  std::vector<float> s(static_cast<size_t>(k));
  for (int64_t o = 0; o < k; ++o) {
    float m = 0;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(p[o * per + i]));
    s[static_cast<size_t>(o)] = m > 0 ? m / code_max : 1.f;
  }
  return s;
}

bool int8_sums_saturate() {
  static const bool saturate = [] {
    using dnnl::memory;
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    const memory::desc x({1, 8, 8, 8}, memory::data_type::s8, memory::format_tag::nhwc),
        w({8, 8, 3, 3}, memory::data_type::s8, memory::format_tag::any),
        y({1, 8, 8, 8}, memory::data_type::s8, memory::format_tag::nhwc);
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_direct, x, w, y, {1, 1},
                                            {1, 1}, {1, 1});
    const dnnl::convolution_forward::primitive_desc pd(d, eng);
    return (pd.weights_desc().data.extra.flags & dnnl_memory_extra_flag_scale_adjust) != 0 &&
           pd.weights_desc().data.extra.scale_adjust != 1.f;
  }();
  return saturate;
}

float weight_code_max(bool qat_grid) { return qat_grid || !int8_sums_saturate() ? 127.f : 63.f; }

float activation_scale(float absmax, bool is_unsigned, bool qat_grid) {
  const float a = absmax > 0 && std::isfinite(absmax) ? absmax : 1.f;
  return a / (is_unsigned && !qat_grid ? 255.f : 127.f);
}

dnnl::primitive_attr quantize_attr(const std::vector<float>& scales, int mask) {
  std::vector<float> inv(scales.size());
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = 1.f / scales[i];
  dnnl::primitive_attr attr;
  attr.set_output_scales(mask, inv);
  return attr;
}

std::vector<int32_t> quantize(const Tensor& x, int64_t rows, const std::vector<float>& scales,
                              bool to_unsigned) {
  RN50_CHECK(x.dtype() == DType::f32 && rows >= 1 && x.numel() % rows == 0,
             "quantize: expected f32 data divisible into {} rows", rows);
  const bool per_row = static_cast<int64_t>(scales.size()) == rows && rows > 1;
  RN50_CHECK(per_row || scales.size() == 1, "quantize: {} scales for {} rows", scales.size(), rows);
  using dt = dnnl::memory::data_type;
  const dnnl::memory::dims d{rows, x.numel() / rows};
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  dnnl::memory src({d, dt::f32, dnnl::memory::format_tag::ab}, eng, const_cast<void*>(x.data()));
  dnnl::memory dst({d, to_unsigned ? dt::u8 : dt::s8, dnnl::memory::format_tag::ab}, eng);
  dnnl::reorder::primitive_desc pd(eng, src.get_desc(), eng, dst.get_desc(),
                                   quantize_attr(scales, per_row ? 1 : 0));
  dnnl::reorder(pd).execute(strm, src, dst);
  strm.wait();
  std::vector<int32_t> out(static_cast<size_t>(x.numel()));
  if (to_unsigned)
    std::copy_n(static_cast<const uint8_t*>(dst.get_data_handle()), out.size(), out.begin());
  else
    std::copy_n(static_cast<const int8_t*>(dst.get_data_handle()), out.size(), out.begin());
  return out;
}

}  // namespace rn50::quant
