// rn50: input normalisation, u8 NHWC pixels -> f32 in dst's layout, as torchvision's
// ToTensor() + Normalize(mean, std): dst = (src / 255 - mean[c]) / std[c], evaluated in float in
// that order, per channel once for each of the 256 pixel values (a lookup table). A bf16
// destination (CPU AMP) gets that float rounded once to nearest even. A 4-channel destination
// (--image-shape 4,H,W) gets a zero fourth channel.
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"

namespace rn50::onednn {

namespace {

/// The normalisation loops on destination element type T (float, or bf16 bits rounded once
/// from the float result). A pixel value has 256 possible values per channel, so the result is
/// looked up in a 3 x 256 table computed with the formula above (the same bits as evaluating it
/// per pixel, without its two float divisions per value; measured several times faster:
/// bench/results/cpu/2026-11-27-sapphire-rapids/input_normalize_lut.md).
template <class T>
void normalize_loops(const Tensor& src, const std::array<float, 3>& mean,
                     const std::array<float, 3>& std, Tensor& dst) {
  const int64_t N = src.n(), HW = src.h() * src.w(), C = dst.c();  // C: 3, or 4 (zero 4th)
  const uint8_t* s = src.data_as<const uint8_t>();
  T* d = dst.data_as<T>();
  T lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v)
      narrow(lut[c][v], (static_cast<float>(v) / 255.f - mean[c]) / std[c]);
  T zero;
  narrow(zero, 0.f);
  if (dst.layout() == Layout::NHWC) {
    const int64_t total = N * HW;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) {
      const uint8_t* px = s + 3 * i;
      d[C * i] = lut[0][px[0]];
      d[C * i + 1] = lut[1][px[1]];
      d[C * i + 2] = lut[2][px[2]];
      if (C == 4) d[C * i + 3] = zero;
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* sn = s + n * HW * 3;
      T* o = d + n * C * HW;
      for (int64_t i = 0; i < HW; ++i) {
        o[i] = lut[0][sn[3 * i]];
        o[HW + i] = lut[1][sn[3 * i + 1]];
        o[2 * HW + i] = lut[2][sn[3 * i + 2]];
        if (C == 4) o[3 * HW + i] = zero;
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
