// rn50 data: antialiased bilinear resampling, bit-exact with Pillow's
// Image.resize(size, Image.BILINEAR) on 8-bit RGB (what torchvision's Resize/RandomResizedCrop do
// on PIL images).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rn50/data.h"

namespace rn50::data {

/// A read-only view of packed 8-bit RGB pixels: pixel (x, y) channel c is at
/// data[y * stride + 3 * x + c]; stride in bytes. A crop of an image is a view into it.
struct RgbView {
  const uint8_t* data = nullptr;
  int width = 0, height = 0;
  ptrdiff_t stride = 0;
};

/// The whole of `img` as a view.
inline RgbView view_of(const Image& img) {
  return {img.pixels.data(), img.width, img.height, ptrdiff_t{img.width} * 3};
}

/// Pillow's `box` argument of Image.resize: the source rectangle [x0, x1) x [y0, y1), in (float)
/// pixel units, that is mapped onto the output. Unlike a crop, the filter still reads source
/// pixels just outside the box (Pillow clamps its taps to the image, not to the box).
struct ResizeBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// A rectangle of output pixels: columns [x, x + w), rows [y, y + h).
struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

/// Resamples `src` to out_w x out_h exactly as Pillow 9 (libImaging/Resample.c, BILINEAR):
///  * per axis, scale = (in1 - in0) / out (in1 - in0 in float, as Pillow), filterscale =
///    max(scale, 1), support = filterscale (triangle filter support 1, widened when
///    downscaling: this is the antialiasing); output i is centred at in0 + (i + 0.5) * scale and
///    reads source taps [int(center - support + 0.5), int(center + support + 0.5)) clamped to the
///    image, weights tri((tap - center + 0.5) / filterscale) normalised to sum 1, then converted
///    to fixed point with 22 fractional bits (PRECISION_BITS = 32 - 8 - 2), rounding half away
///    from zero;
///  * a horizontal pass (rows needed by the vertical pass only), rounded (+2^21) and clipped to
///    0..255 into an 8-bit intermediate, then a vertical pass with the same arithmetic; a pass
///    is skipped when its axis keeps its size and the box spans the axis (Pillow does the same);
///    all sums are int32, so every bit matches Pillow.
/// `box` (nullptr = the whole source) selects the mapped source rectangle; it must lie inside the
/// source and be non-empty. Only the output pixels in `window` (which must lie inside
/// out_w x out_h) are computed -- each identical to the full resize's -- and written to
/// dst[(y - window.y) * dst_stride + 3 * (x - window.x) + c]. Throws rn50::Error on bad sizes.
void resize_bilinear_aa(const RgbView& src, int out_w, int out_h, const ResizeBox* box,
                        const Rect& window, uint8_t* dst, ptrdiff_t dst_stride);

/// The fast mode's resampler (LoaderOptions::exact_decode = false): the same filter as
/// resize_bilinear_aa (Pillow BILINEAR taps, antialiasing support, `box` semantics) computed with
/// 14-bit weights (each output's weights rounded, then corrected to sum exactly to 2^14) and an
/// SSSE3 horizontal pass, about 3x faster. Results differ from Pillow's by at most a few levels
/// (usually 0 or 1). `box` must lie inside `src` and be non-empty; the whole out_w x out_h result
/// is written to dst (dst_stride bytes per row). Throws rn50::Error on bad sizes.
void resize_bilinear_aa_fast(const RgbView& src, int out_w, int out_h, const ResizeBox& box,
                             uint8_t* dst, ptrdiff_t dst_stride);

/// Convenience form: the full out_w x out_h result as a new Image, optionally with Pillow's box.
Image resize_bilinear_aa(const Image& src, int out_w, int out_h,
                         std::optional<ResizeBox> box = std::nullopt);

}  // namespace rn50::data
