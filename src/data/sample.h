// rn50 data: one file -> one augmented sample, the work a loader worker does per image.
//
// Two modes (LoaderOptions::exact_decode):
//  * exact: decode the whole image (decode_image: PIL-identical pixels), then the torchvision
//    transform (train_transform / eval_transform): bit-identical to torchvision + PIL.
//  * fast (DALI-style): the crop is decided from the header's size first, then only what it
//    needs is decoded -- JPEG DCT-domain downscaling by 1/2, 1/4 or 1/8 (the smallest scale that
//    still leaves at least `crop` decoded pixels across the crop in both axes, so the final
//    resize never upsamples what a larger scale would have resolved) and region-of-interest
//    decoding (jpeg_crop_scanline / jpeg_skip_scanlines: only the crop's rows and iMCU columns).
//    The resize is the same Pillow-style antialiased bilinear filter, applied to the scaled
//    region with Pillow's `box` (fractional source rectangle). The crop geometry (box, flip) is
//    exactly the exact mode's; pixels differ slightly (the DCT scaling's implicit box filter
//    replaces part of the bilinear antialiasing), as in DALI.
// Images over kMaxFullDecodePixels take the reduced path in both modes (JPEG: DCT scaling; PNG:
// integer box reduction), so memory stays bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/decode.h"
#include "data/rng.h"
#include "data/transforms.h"

namespace rn50::data {

/// The transform applied to every sample of a split.
struct SampleSpec {
  bool train = true;       ///< RandomResizedCrop + flip (train) or Resize + CenterCrop (val)
  int crop = 224;          ///< output size (crop x crop)
  int resize_short = 256;  ///< val: shorter side before the center crop
  bool exact = false;      ///< exact (PIL/torchvision-identical) or fast decoding
  CropRanges ranges;       ///< train: RandomResizedCrop's scale and ratio ranges
};

/// What process_sample did, for tests and statistics.
struct SampleInfo {
  int width = 0, height = 0;  ///< the file's image size
  CropBox box;                ///< train: the RandomResizedCrop box in source pixels
  bool flip = false;          ///< train: mirrored
  int scale_num = 8;          ///< JPEG DCT scale used (/8); 8 for full size
  int reduce = 1;             ///< PNG box-reduction factor used (1 = none)
  bool region = false;        ///< decoded a region (not the whole image)
};

/// Per-thread scratch buffers (capacity reused across samples).
struct SampleScratch {
  Image image;
  ScaledRegion region;
};

/// Decodes the in-memory file `data` (JPEG or PNG by magic bytes; `path` for messages) and writes
/// the crop x crop x 3 uint8 RGB sample (HWC) to dst. Train draws from `rng` in torchvision's
/// order -- RandomResizedCrop's attempts (random_resized_crop_box on the file's full size), then
/// the flip (rng.uniform() < 0.5) -- in both modes; rng is unused for val. Throws rn50::Error
/// naming the path and the reason for anything that cannot be decoded (see decode_image,
/// decode_jpeg_region, decode_png_reduced).
SampleInfo process_sample(const uint8_t* data, size_t size, const std::string& path,
                          const SampleSpec& spec, SampleRng* rng, uint8_t* dst,
                          SampleScratch& scratch);

/// The JPEG DCT scale (numerator over 8: 1, 2, 4 or 8) for a source rectangle of rect_w x rect_h
/// pixels that is resampled to out_w x out_h: the smallest with rect * n / 8 >= out in both axes
/// (8 when even full size is smaller than the output).
int choose_dct_scale(double rect_w, double rect_h, int out_w, int out_h);

}  // namespace rn50::data
