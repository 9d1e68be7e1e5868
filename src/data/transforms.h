// rn50 data: the DLE / torchvision ImageNet augmentations on decoded RGB images.
//  train: RandomResizedCrop(crop, scale=(0.08, 1), ratio=(3/4, 4/3), BILINEAR) +
//         RandomHorizontalFlip(0.5)
//  eval:  Resize(resize_short, BILINEAR) + CenterCrop(crop)
// Geometry follows torchvision 0.14 on PIL images; pixels follow Pillow's resize bit-exactly
// (resize.h). Randomness comes from a per-sample SampleRng, not torch's generator, so the draws
// (not the formulas) differ from torchvision's.
#pragma once

#include <cstdint>
#include <utility>

#include "data/rng.h"
#include "rn50/data.h"

namespace rn50::data {

/// A crop rectangle in source pixels: rows [top, top + height), columns [left, left + width).
/// (torchvision's (i, j, h, w).)
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox&) const = default;
};

/// Python's round(): nearest integer, ties to even.
double round_half_even(double x);

/// torchvision 0.14 RandomResizedCrop.get_params for an image of height x width:
/// up to 10 attempts of target_area = U(scale_lo, scale_hi) * H * W, aspect =
/// exp(U(log ratio_lo, log ratio_hi)), w = round(sqrt(area * aspect)), h = round(sqrt(area /
/// aspect)); the first with 0 < w <= W and 0 < h <= H is placed at top = randint(0, H - h),
/// left = randint(0, W - w) (inclusive). Otherwise the fallback central crop: the whole image
/// with its aspect ratio clamped to [ratio_lo, ratio_hi] (the long side shortened to
/// round(short / ratio_lo) or round(short * ratio_hi)), placed at ((H - h) // 2, (W - w) // 2).
/// The result always lies inside the image. Draw order per attempt: area, then aspect; then top,
/// left. Throws rn50::Error for an empty image.
CropBox random_resized_crop_box(int height, int width, SampleRng& rng, double scale_lo = 0.08,
                                double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0,
                                double ratio_hi = 4.0 / 3.0);

/// RandomResizedCrop's ranges: area fraction [scale_lo, scale_hi] and aspect ratio
/// [ratio_lo, ratio_hi] (torchvision's defaults; DLE's --rand-crop-scale / --rand-crop-ratio).
struct CropRanges {
  double scale_lo = 0.08, scale_hi = 1.0, ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
};

/// random_resized_crop_box with `r`'s ranges.
inline CropBox random_resized_crop_box(int height, int width, SampleRng& rng,
                                       const CropRanges& r) {
  return random_resized_crop_box(height, width, rng, r.scale_lo, r.scale_hi, r.ratio_lo,
                                 r.ratio_hi);
}

/// torchvision F.resized_crop(img, top, left, h, w, [size, size], BILINEAR) on a PIL image -- a
/// PIL crop, then Image.resize((size, size), BILINEAR) -- followed by a horizontal flip when
/// `flip`. Writes size x size x 3 bytes (packed RGB rows) to dst. The crop is a view (no copy);
/// the resize reads only inside it, as PIL's crop-then-resize does. `box` must lie inside `img`.
void resized_crop(const Image& img, const CropBox& box, int size, bool flip, uint8_t* dst);

/// What the train transform drew for one sample.
struct TrainAugmentation {
  CropBox box;
  bool flip = false;
};

/// The train transform: box = random_resized_crop_box(H, W, rng, ranges), then flip = rng.uniform() <
/// 0.5 (RandomHorizontalFlip: torch.rand(1) < p), then resized_crop to crop x crop into dst
/// (crop * crop * 3 bytes, NHWC). Returns the drawn parameters.
TrainAugmentation train_transform(const Image& img, int crop, SampleRng& rng, uint8_t* dst,
                                  const CropRanges& ranges = {});

/// torchvision Resize(short_side) output size (width, height) for a width x height image:
/// the shorter side becomes short_side, the longer int(short_side * long / short) (truncated).
std::pair<int, int> resize_shorter_side(int width, int height, int short_side);

/// torchvision 0.14 CenterCrop placement of a crop_h x crop_w crop in a height x width image:
/// top = int(round((height - crop_h) / 2)), left likewise (round half to even). Where the crop
/// is larger than the image, torchvision first zero-pads by ((crop - size) // 2) before and the
/// rest after; that is expressed here as a negative offset (-((crop - size) // 2)).
CropBox center_crop_box(int height, int width, int crop_h, int crop_w);

/// The eval transform: Resize(resize_short) then CenterCrop(crop), written as crop x crop x 3
/// bytes to dst. Only the output pixels inside the crop are resampled (each equal to the full
/// resize's pixel); pixels of the zero padding (crop > resized size) are 0.
void eval_transform(const Image& img, int resize_short, int crop, uint8_t* dst);

}  // namespace rn50::data
