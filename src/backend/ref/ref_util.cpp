// rn50 reference backend: helpers (see ref_util.h).
#include "backend/ref/ref_util.h"

#include <bit>

namespace rn50::ref {

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // inf / NaN
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float v = static_cast<float>(man) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf / NaN (NaN stays quiet)
    return sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  int32_t exp = static_cast<int32_t>(absx >> 23) - 127;
  if (exp < -14) {  // result is subnormal (or zero): round absx * 2^24 to an integer
    float a = std::bit_cast<float>(absx);
    // nearbyint under the default rounding mode (round-half-even) via the 2^23 trick.
    float scaled = a * 16777216.0f;  // exact: multiplication by a power of two
    float r = (scaled + 8388608.0f) - 8388608.0f;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t man = absx & 0x7fffffu;
  uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return sign | static_cast<uint16_t>(h);
}

void check_float(const char* op, const char* name, const Tensor& t) {
  RN50_CHECK(t.defined(), "ref {}: tensor {} is undefined", op, name);
  RN50_CHECK(t.is_cpu(), "ref {}: tensor {} ({}) must be on the host", op, name, t.str());
  RN50_CHECK(is_compute_dtype(t.dtype()),
             "ref {}: tensor {} ({}) has unsupported dtype {} (the reference backend computes "
             "on F32, F64, F16 and BF16)",
             op, name, t.str(), dtype_name(t.dtype()));
}

void check_float4(const char* op, const char* name, const Tensor& t) {
  check_float(op, name, t);
  RN50_CHECK(t.ndim() == 4, "ref {}: tensor {} ({}) must be 4-D (N,C,H,W)", op, name, t.str());
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void check_shape(const char* op, const char* name, const Tensor& t,
                 const std::vector<int64_t>& shape) {
  RN50_CHECK(t.shape() == shape, "ref {}: tensor {} is {}, expected shape {}", op, name, t.str(),
             shape_str(shape));
}

namespace {
bool is_float_storage(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

// Calls f(logical_index, memory_offset) for every element, the logical index in `order`.
template <class F>
void for_each_element(const Tensor& t, Layout order, F&& f) {
  if (t.ndim() != 4) {
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) f(i, i);
    return;
  }
  const int64_t N = t.n(), C = t.c(), H = t.h(), W = t.w();
  if (order == Layout::NCHW) {
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(t.numel()))
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) f(((n * C + c) * H + h) * W + w, t.offset4(n, c, h, w));
  } else {
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(t.numel()))
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t c = 0; c < C; ++c) f(((n * H + h) * W + w) * C + c, t.offset4(n, c, h, w));
  }
}
}  // namespace

std::vector<double> load(const Tensor& t, Layout order) {
  RN50_CHECK(t.is_cpu(), "ref: cannot read {} (not on the host)", t.str());
  RN50_CHECK(is_float_storage(t.dtype()), "ref: cannot read {} as floating-point values", t.str());
  std::vector<double> v(static_cast<size_t>(t.numel()));
  // Fast paths for same-order f32/f64 data.
  bool same_order = t.ndim() != 4 || t.layout() == order;
  if (same_order && t.dtype() == DType::f64) {
    std::memcpy(v.data(), t.data(), v.size() * sizeof(double));
    return v;
  }
  if (same_order && t.dtype() == DType::f32) {
    const float* p = t.data_as<const float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
    return v;
  }
  for_each_element(t, order, [&](int64_t li, int64_t off) { v[li] = get(t, off); });
  return v;
}

void store(const std::vector<double>& v, Tensor& t, Layout order) {
  RN50_CHECK(t.is_cpu(), "ref: cannot write {} (not on the host)", t.str());
  RN50_CHECK(is_float_storage(t.dtype()), "ref: cannot write floating-point values into {}",
             t.str());
  RN50_CHECK(static_cast<int64_t>(v.size()) == t.numel(),
             "ref: internal error, storing {} values into {}", v.size(), t.str());
  bool same_order = t.ndim() != 4 || t.layout() == order;
  if (same_order && t.dtype() == DType::f64) {
    std::memcpy(t.data(), v.data(), v.size() * sizeof(double));
    return;
  }
  if (same_order && t.dtype() == DType::f32) {
    float* p = t.data_as<float>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
    return;
  }
  for_each_element(t, order, [&](int64_t li, int64_t off) { set(t, off, v[li]); });
}

}  // namespace rn50::ref
