// rn50 data: RandomResizedCrop / flip / Resize / CenterCrop (see transforms.h).
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "data/resize.h"

namespace rn50::data {

double round_half_even(double x) {
  const double r = std::round(x);  // halves away from zero
  if (std::fabs(x - std::trunc(x)) == 0.5) return 2.0 * std::round(x / 2.0);
  return r;
}

CropBox random_resized_crop_box(int height, int width, SampleRng& rng, double scale_lo,
                                double scale_hi, double ratio_lo, double ratio_hi) {
  RN50_CHECK(height > 0 && width > 0, "RandomResizedCrop: empty image {}x{}", width, height);
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale_lo, scale_hi);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = static_cast<int>(round_half_even(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(round_half_even(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int top = static_cast<int>(rng.randint(0, height - h));
      const int left = static_cast<int>(rng.randint(0, width - w));
      return {top, left, h, w};
    }
  }
  // Fallback to a central crop (torchvision): clamp the aspect ratio into the range.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < std::min(ratio_lo, ratio_hi)) {
    h = static_cast<int>(round_half_even(w / std::min(ratio_lo, ratio_hi)));
  } else if (in_ratio > std::max(ratio_lo, ratio_hi)) {
    w = static_cast<int>(round_half_even(h * std::max(ratio_lo, ratio_hi)));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

void resized_crop(const Image& img, const CropBox& box, int size, bool flip, uint8_t* dst) {
  RN50_CHECK(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 &&
                 box.top + box.height <= img.height && box.left + box.width <= img.width,
             "resized_crop: crop {}x{}+{}+{} outside the {}x{} image", box.width, box.height,
             box.left, box.top, img.width, img.height);
  const ptrdiff_t row = ptrdiff_t{img.width} * 3;
  const RgbView crop{img.pixels.data() + box.top * row + 3 * box.left, box.width, box.height, row};
  resize_bilinear_aa(crop, size, size, nullptr, Rect{0, 0, size, size}, dst, ptrdiff_t{size} * 3);
  if (!flip) return;
  for (int y = 0; y < size; ++y) {  // F.hflip: mirror each row in place
    uint8_t* a = dst + ptrdiff_t{y} * size * 3;
    uint8_t* b = a + ptrdiff_t{size - 1} * 3;
    for (; a < b; a += 3, b -= 3) {
      std::swap(a[0], b[0]);
      std::swap(a[1], b[1]);
      std::swap(a[2], b[2]);
    }
  }
}

TrainAugmentation train_transform(const Image& img, int crop, SampleRng& rng, uint8_t* dst,
                                  const CropRanges& ranges) {
  TrainAugmentation aug;
  aug.box = random_resized_crop_box(img.height, img.width, rng, ranges);
  aug.flip = rng.uniform() < 0.5;
  resized_crop(img, aug.box, crop, aug.flip, dst);
  return aug;
}

std::pair<int, int> resize_shorter_side(int width, int height, int short_side) {
  RN50_CHECK(width > 0 && height > 0 && short_side > 0, "Resize: bad sizes {}x{} -> {}", width,
             height, short_side);
  const int s = std::min(width, height), l = std::max(width, height);
  // Python: int(size * long / short): exact integer product, correctly rounded division.
  const int new_long =
      static_cast<int>(static_cast<double>(int64_t{short_side} * l) / static_cast<double>(s));
  return width <= height ? std::pair{short_side, new_long} : std::pair{new_long, short_side};
}

CropBox center_crop_box(int height, int width, int crop_h, int crop_w) {
  auto offset = [](int size, int crop) {
    if (crop > size) return -((crop - size) / 2);  // zero padding before the image
    return static_cast<int>(round_half_even((size - crop) / 2.0));
  };
  return {offset(height, crop_h), offset(width, crop_w), crop_h, crop_w};
}

void eval_transform(const Image& img, int resize_short, int crop, uint8_t* dst) {
  RN50_CHECK(crop > 0, "CenterCrop: invalid crop size {}", crop);
  const auto [rw, rh] = resize_shorter_side(img.width, img.height, resize_short);
  const CropBox c = center_crop_box(rh, rw, crop, crop);
  // The part of the crop that lies on the resized image; the rest is padding.
  const int x0 = std::max(c.left, 0), x1 = std::min(c.left + crop, rw);
  const int y0 = std::max(c.top, 0), y1 = std::min(c.top + crop, rh);
  const ptrdiff_t stride = ptrdiff_t{crop} * 3;
  if (x0 > c.left || y0 > c.top || x1 < c.left + crop || y1 < c.top + crop) {
    std::memset(dst, 0, static_cast<size_t>(stride) * crop);
  }
  uint8_t* out = dst + (y0 - c.top) * stride + 3 * (x0 - c.left);
  resize_bilinear_aa(view_of(img), rw, rh, nullptr, Rect{x0, y0, x1 - x0, y1 - y0}, out, stride);
}

}  // namespace rn50::data
