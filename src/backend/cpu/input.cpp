// rn50: input normalisation, u8 NHWC pixels -> f32 in dst's layout, as torchvision's
// ToTensor() + Normalize(mean, std): dst = (src / 255 - mean[c]) / std[c], evaluated in float in
// that order. Plain OpenMP loops (vectorisable). A bf16 destination (CPU AMP) gets that float
// rounded once to nearest even. A 4-channel destination (--image-shape 4,H,W) gets a zero fourth
// channel.
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"

namespace rn50::onednn {

namespace {

/// The normalisation loops on destination element type T (float, or bf16 bits rounded once
/// from the float result).
template <class T>
void normalize_loops(const Tensor& src, const std::array<float, 3>& mean,
                     const std::array<float, 3>& std, Tensor& dst) {
  const int64_t N = src.n(), HW = src.h() * src.w(), C = dst.c();  // C: 3, or 4 (zero 4th)
  const uint8_t* s = src.data_as<const uint8_t>();
  T* d = dst.data_as<T>();
  const float m0 = mean[0], m1 = mean[1], m2 = mean[2];
  const float s0 = std[0], s1 = std[1], s2 = std[2];
  if (dst.layout() == Layout::NHWC) {
    const int64_t total = N * HW;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) {
      const uint8_t* px = s + 3 * i;
      narrow(d[C * i], (static_cast<float>(px[0]) / 255.f - m0) / s0);
      narrow(d[C * i + 1], (static_cast<float>(px[1]) / 255.f - m1) / s1);
      narrow(d[C * i + 2], (static_cast<float>(px[2]) / 255.f - m2) / s2);
      if (C == 4) narrow(d[C * i + 3], 0.f);
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* sn = s + n * HW * 3;
      T* o = d + n * C * HW;
      for (int64_t i = 0; i < HW; ++i) {
        narrow(o[i], (static_cast<float>(sn[3 * i]) / 255.f - m0) / s0);
        narrow(o[HW + i], (static_cast<float>(sn[3 * i + 1]) / 255.f - m1) / s1);
        narrow(o[2 * HW + i], (static_cast<float>(sn[3 * i + 2]) / 255.f - m2) / s2);
        if (C == 4) narrow(o[3 * HW + i], 0.f);
      }
    }
  }
}

}  // namespace

void OnednnBackend::normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                                 const std::array<float, 3>& std, Tensor& dst) {
  const char* op = "normalize_u8";
  check_tensor(op, "src", src, DType::u8);
  const DType dt = compute_dtype_of(op, "dst", dst);
  RN50_CHECK(src.ndim() == 4 && src.c() == 3 && src.layout() == Layout::NHWC,
             "onednn {}: src must be u8 (N,3,H,W) NHWC, got {}", op, src.str());
  RN50_CHECK(dst.ndim() == 4 && dst.n() == src.n() && (dst.c() == 3 || dst.c() == 4) &&
                 dst.h() == src.h() && dst.w() == src.w(),
             "onednn {}: dst {} must be src {} with 3 or 4 channels", op, dst.str(), src.str());
  for (int c = 0; c < 3; ++c)
    RN50_CHECK(std[c] != 0.f, "onednn {}: std[{}] is zero", op, c);
  if (dt == DType::f32)
    normalize_loops<float>(src, mean, std, dst);
  else
    normalize_loops<uint16_t>(src, mean, std, dst);
}

}  // namespace rn50::onednn
