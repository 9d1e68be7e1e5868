// rn50 reference backend: input normalisation of decoded u8 images, as torchvision's
// ToTensor() followed by Normalize(mean, std):  dst = (src / 255 - mean[c]) / std[c].
// For an F32 destination the arithmetic is done in float32 in torch's order (divide by 255,
// subtract, divide), so results are bit-identical to torchvision; F16/BF16 round that float32
// result once; F64 uses float64.
#include <cstdint>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {
/// T: the arithmetic type (float for F32/F16/BF16 destinations, double for F64); each result is
/// stored with set(), which rounds it to dst's dtype.
template <class T>
void normalize_impl(const Tensor& src, const std::array<float, 3>& mean,
                    const std::array<float, 3>& std, Tensor& dst) {
  const uint8_t* s = src.data_as<const uint8_t>();
  const int64_t N = src.n(), H = src.h(), W = src.w();
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(src.numel()))
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        for (int64_t c = 0; c < 3; ++c) {
          const T v = static_cast<T>(s[src.offset4(n, c, h, w)]) / static_cast<T>(255);
          set(dst, dst.offset4(n, c, h, w),
              (v - static_cast<T>(mean[c])) / static_cast<T>(std[c]));
        }
        if (dst.c() == 4) set(dst, dst.offset4(n, 3, h, w), 0.0);  // the zero fourth channel
      }
}
}  // namespace

void RefBackend::normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                              const std::array<float, 3>& std, Tensor& dst) {
  const char* op = "normalize_u8";
  RN50_CHECK(
      src.defined() && src.is_cpu() && src.dtype() == DType::u8 && src.ndim() == 4 && src.c() == 3,
      "ref {}: src {} must be a U8 (N,3,H,W) host tensor", op, src.str());
  check_float4(op, "dst", dst);
  RN50_CHECK(dst.n() == src.n() && (dst.c() == 3 || dst.c() == 4) && dst.h() == src.h() &&
                 dst.w() == src.w(),
             "ref {}: dst {} must be src {} with 3 or 4 channels", op, dst.str(), src.str());
  for (int c = 0; c < 3; ++c) RN50_CHECK(std[c] != 0.f, "ref {}: std[{}] is zero", op, c);
  if (dst.dtype() == DType::f64)
    normalize_impl<double>(src, mean, std, dst);
  else  // F32 bit-identical to torchvision; F16/BF16 are that value rounded once
    normalize_impl<float>(src, mean, std, dst);
}

}  // namespace rn50::ref
