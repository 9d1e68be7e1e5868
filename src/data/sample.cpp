// rn50 data: file -> sample, exact or fast (see sample.h).
#include "data/sample.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/check.h"
#include "data/resize.h"

namespace rn50::data {
namespace {

/// PNG box-reduction target: a reduced huge PNG holds at most this many pixels (~24 MB).
constexpr int64_t kReducedPngPixels = kMaxFullDecodePixels / 4;

/// F.hflip on a packed size x size RGB image, in place.
void hflip(uint8_t* img, int size) {
  for (int y = 0; y < size; ++y) {
    uint8_t* a = img + ptrdiff_t{y} * size * 3;
    uint8_t* b = a + ptrdiff_t{size - 1} * 3;
    for (; a < b; a += 3, b -= 3) {
      std::swap(a[0], b[0]);
      std::swap(a[1], b[1]);
      std::swap(a[2], b[2]);
    }
  }
}

/// A source rectangle in full-size image coordinates: [x0, x1) x [y0, y1).
struct SourceRect {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// Resamples `r` (full-size source coordinates) onto crop x crop at dst. `img` holds the source
/// scaled by `scale` (img pixel u covers source [(u + ox) / scale, (u + ox + 1) / scale)), its
/// pixel (0, 0) being scaled pixel (ox, oy). clamp_to_rect: the filter reads only the pixels the
/// rectangle touches (torchvision crops before resizing); otherwise it may read around it, as a
/// full-image resize followed by a crop does.
void resample(const Image& img, int ox, int oy, double scale, const SourceRect& r,
              bool clamp_to_rect, int crop, uint8_t* dst) {
  double fx0 = std::clamp(r.x0 * scale - ox, 0.0, double(img.width));
  double fx1 = std::clamp(r.x1 * scale - ox, 0.0, double(img.width));
  double fy0 = std::clamp(r.y0 * scale - oy, 0.0, double(img.height));
  double fy1 = std::clamp(r.y1 * scale - oy, 0.0, double(img.height));
  RgbView v = view_of(img);
  if (clamp_to_rect) {
    const int vx0 = std::min(static_cast<int>(std::floor(fx0)), img.width - 1);
    const int vy0 = std::min(static_cast<int>(std::floor(fy0)), img.height - 1);
    const int vx1 = std::clamp(static_cast<int>(std::ceil(fx1)), vx0 + 1, img.width);
    const int vy1 = std::clamp(static_cast<int>(std::ceil(fy1)), vy0 + 1, img.height);
    v.data += vy0 * v.stride + 3 * vx0;
    v.width = vx1 - vx0;
    v.height = vy1 - vy0;
    fx0 -= vx0;
    fx1 -= vx0;
    fy0 -= vy0;
    fy1 -= vy0;
  }
  ResizeBox b{static_cast<float>(fx0), static_cast<float>(fy0), static_cast<float>(fx1),
              static_cast<float>(fy1)};
  // Float rounding may push an edge just outside the view or make the box empty.
  b.x1 = std::min(b.x1, static_cast<float>(v.width));
  b.y1 = std::min(b.y1, static_cast<float>(v.height));
  b.x0 = std::clamp(b.x0, 0.f, std::nextafter(b.x1, 0.f));
  b.y0 = std::clamp(b.y0, 0.f, std::nextafter(b.y1, 0.f));
  resize_bilinear_aa_fast(v, crop, crop, b, dst, ptrdiff_t{crop} * 3);
}

/// The eval transform as a source rectangle: Resize(resize_short) maps the w x h image onto
/// rw x rh, CenterCrop(crop) takes [left, left + crop) of that, i.e. [left * w / rw,
/// (left + crop) * w / rw) of the source (likewise rows), resampled with scale w / rw -- the
/// same filter positions and widths as the full resize. Returns false when the crop is larger
/// than the resized image (padding: only the exact path handles it).
bool eval_rect(int w, int h, int resize_short, int crop, SourceRect& r, int& rw, int& rh) {
  std::tie(rw, rh) = resize_shorter_side(w, h, resize_short);
  const CropBox c = center_crop_box(rh, rw, crop, crop);
  if (c.left < 0 || c.top < 0) return false;
  const double sx = double(w) / rw, sy = double(h) / rh;
  r = {c.left * sx, c.top * sy, (c.left + crop) * sx, (c.top + crop) * sy};
  return true;
}

/// Rows/columns of the scaled image to decode for `r` at scale n/8, with `margin` scaled pixels
/// on each side, clamped to the scaled image sw x sh.
RegionPlan plan_region(const SourceRect& r, int n, double margin_x, double margin_y, int sw,
                       int sh) {
  const double s = n / 8.0;
  RegionPlan p;
  p.scale_num = n;
  p.x0 = std::clamp(static_cast<int>(std::floor(r.x0 * s - margin_x)), 0, sw - 1);
  p.y0 = std::clamp(static_cast<int>(std::floor(r.y0 * s - margin_y)), 0, sh - 1);
  p.x1 = std::clamp(static_cast<int>(std::ceil(r.x1 * s + margin_x)), p.x0 + 1, sw);
  p.y1 = std::clamp(static_cast<int>(std::ceil(r.y1 * s + margin_y)), p.y0 + 1, sh);
  return p;
}

int scaled_size(int size, int n) { return static_cast<int>((int64_t{size} * n + 7) / 8); }

/// The fast JPEG path (also used by the exact mode for images over kMaxFullDecodePixels).
SampleInfo jpeg_fast(const uint8_t* data, size_t size, const std::string& path,
                     const SampleSpec& spec, SampleRng* rng, uint8_t* dst, SampleScratch& scratch) {
  SampleInfo info;
  SourceRect rect;
  bool pad_fallback = false;
  auto plan = [&](const JpegFrame& frame) {
    const int w = frame.width, h = frame.height;
    info.width = w;
    info.height = h;
    int n = 8;
    double margin_x = 0, margin_y = 0;
    if (spec.train) {
      info.box = random_resized_crop_box(h, w, *rng, spec.ranges);
      info.flip = rng->uniform() < 0.5;
      const CropBox& b = info.box;
      rect = {double(b.left), double(b.top), double(b.left + b.width), double(b.top + b.height)};
      n = choose_dct_scale(b.width, b.height, spec.crop, spec.crop);
    } else {
      int rw = 0, rh = 0;
      if (!eval_rect(w, h, spec.resize_short, spec.crop, rect, rw, rh)) {
        pad_fallback = true;  // decode everything at full size; eval_transform pads
        rect = {0, 0, double(w), double(h)};
      } else {
        n = choose_dct_scale(w, h, rw, rh);
        // The full resize's filter reads up to `support` scaled pixels around the crop.
        margin_x = std::max(1.0, double(w) / rw * n / 8.0) + 1.0;
        margin_y = std::max(1.0, double(h) / rh * n / 8.0) + 1.0;
      }
    }
    if (!frame.scalable) n = 8;  // see JpegFrame::scalable
    RegionPlan p;
    for (;; n /= 2) {  // coarser scales while the region would exceed the pixel budget
      p = plan_region(rect, n, margin_x, margin_y, scaled_size(w, n), scaled_size(h, n));
      // (decode_jpeg_region's buffer: the region, one extra column each side, iMCU alignment)
      const int64_t cols = p.x1 - p.x0 + 2 + 4 * n;
      if (n == 1 || cols * (p.y1 - p.y0) <= kMaxFullDecodePixels) break;
    }
    RN50_CHECK(
        !pad_fallback || p.scale_num == 8,
        "cannot decode '{}': its center crop needs padding, and it is too large to decode at "
        "full size",
        path);
    return p;
  };
  ScaledRegion& reg = scratch.region;
  decode_jpeg_region(data, size, path, plan, reg);
  info.scale_num = reg.scale_num;
  info.region = reg.image.width < reg.scaled_width || reg.image.height < reg.scaled_height;
  if (pad_fallback) {
    eval_transform(reg.image, spec.resize_short, spec.crop, dst);
    return info;
  }
  resample(reg.image, reg.x0, reg.y0, reg.scale_num / 8.0, rect, spec.train, spec.crop, dst);
  if (info.flip) hflip(dst, spec.crop);
  return info;
}

/// A PNG over kMaxFullDecodePixels: box-reduced row by row, then resampled like jpeg_fast.
SampleInfo png_reduced(const uint8_t* data, size_t size, const std::string& path,
                       const ImageHeader& hdr, const SampleSpec& spec, SampleRng* rng, uint8_t* dst,
                       SampleScratch& scratch) {
  SampleInfo info;
  info.width = hdr.width;
  info.height = hdr.height;
  int f = 2;
  while ((int64_t{hdr.width} + f - 1) / f * ((int64_t{hdr.height} + f - 1) / f) >
         kReducedPngPixels) {
    ++f;
  }
  info.reduce = f;
  SourceRect rect;
  if (spec.train) {
    info.box = random_resized_crop_box(hdr.height, hdr.width, *rng, spec.ranges);
    info.flip = rng->uniform() < 0.5;
    const CropBox& b = info.box;
    rect = {double(b.left), double(b.top), double(b.left + b.width), double(b.top + b.height)};
  } else {
    int rw = 0, rh = 0;
    RN50_CHECK(eval_rect(hdr.width, hdr.height, spec.resize_short, spec.crop, rect, rw, rh),
               "'{}': crop {} larger than the resized image", path, spec.crop);
  }
  decode_png_reduced(data, size, path, f, scratch.image);
  resample(scratch.image, 0, 0, 1.0 / f, rect, spec.train, spec.crop, dst);
  if (info.flip) hflip(dst, spec.crop);
  return info;
}

}  // namespace

int choose_dct_scale(double rect_w, double rect_h, int out_w, int out_h) {
  for (int n : {1, 2, 4}) {
    if (rect_w * n >= 8.0 * out_w && rect_h * n >= 8.0 * out_h) return n;
  }
  return 8;
}

SampleInfo process_sample(const uint8_t* data, size_t size, const std::string& path,
                          const SampleSpec& spec, SampleRng* rng, uint8_t* dst,
                          SampleScratch& scratch) {
  RN50_CHECK(!spec.train || rng != nullptr, "process_sample: train needs an rng");
  const ImageFormat fmt = size > 0 ? sniff_format(data, size) : ImageFormat::unknown;
  if (fmt == ImageFormat::jpeg && !spec.exact) {
    return jpeg_fast(data, size, path, spec, rng, dst, scratch);
  }
  const ImageHeader hdr = read_image_header(data, size, path);  // throws for unknown formats
  if (int64_t{hdr.width} * hdr.height > kMaxFullDecodePixels) {
    if (hdr.format == ImageFormat::jpeg)
      return jpeg_fast(data, size, path, spec, rng, dst, scratch);
    return png_reduced(data, size, path, hdr, spec, rng, dst, scratch);
  }
  decode_image(data, size, path, scratch.image);
  SampleInfo info;
  info.width = scratch.image.width;
  info.height = scratch.image.height;
  if (spec.train) {
    const TrainAugmentation aug = train_transform(scratch.image, spec.crop, *rng, dst, spec.ranges);
    info.box = aug.box;
    info.flip = aug.flip;
  } else {
    eval_transform(scratch.image, spec.resize_short, spec.crop, dst);
  }
  return info;
}

}  // namespace rn50::data
