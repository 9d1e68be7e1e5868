// rn50 data: image file decoding to 8-bit RGB, pixel-identical to PIL's
// `Image.open(f).convert("RGB")` (what torchvision's ImageFolder loader does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rn50/data.h"

namespace rn50::data {

/// Largest accepted image, in pixels (width * height). Bigger images are rejected with an error
/// rather than allocating gigabytes (a decompression-bomb guard; ImageNet's largest is ~1e7).
inline constexpr int64_t kMaxImagePixels = int64_t(1) << 28;

enum class ImageFormat { unknown, jpeg, png };

/// The format named by the file's leading magic bytes: JPEG = FF D8 FF, PNG = 89 'P' 'N' 'G'
/// 0D 0A 1A 0A. The file extension is never consulted.
ImageFormat sniff_format(const uint8_t* data, size_t size);

/// Reads the whole file `path` into `out` (resized; capacity reused across calls).
/// Throws rn50::Error naming the path when it cannot be opened or read, or is not a regular
/// file (e.g. a folder).
void read_file(const std::string& path, std::vector<uint8_t>& out);

/// Decodes an in-memory JPEG or PNG (chosen by magic bytes) into `out` as row-major H x W x 3 RGB
/// (out.pixels is resized; its capacity is reused). `path` is used in messages only.
/// Throws rn50::Error naming the path and the reason for empty, unknown, corrupt or truncated
/// data, and for images over kMaxImagePixels.
void decode_image(const uint8_t* data, size_t size, const std::string& path, Image& out);

/// read_file + decode_image.
Image decode_image_file(const std::string& path);

/// JPEG via TurboJPEG (libjpeg-turbo, the library PIL links), default flags = accurate integer
/// (ISLOW) IDCT and fancy upsampling, which are PIL's defaults, so pixels match PIL exactly.
/// Colour spaces: YCbCr/RGB -> RGB; grayscale -> RGB by replication (PIL "L" -> "RGB");
/// CMYK/YCCK -> CMYK samples as stored, then PIL's conversion for its "CMYK;I" (Adobe inverted)
/// raw mode: with stored samples (c, m, y, k), R = k - muldiv255(255 - c, k), likewise G, B
/// (Pillow JpegImagePlugin + Convert.c cmyk2rgb, muldiv255(a,b) = (t + (t >> 8)) >> 8 where
/// t = a*b + 128).
/// Corrupt-data policy, matching PIL (LOAD_TRUNCATED_IMAGES = False): a truncated file (no EOI
/// marker after the last scan) and every libjpeg fatal error throw; libjpeg warnings on complete
/// files (e.g. extraneous bytes before a marker) are accepted, as PIL ignores them too.
void decode_jpeg(const uint8_t* data, size_t size, const std::string& path, Image& out);

/// PIL's conversion of a CMYK JPEG (raw mode "CMYK;I", Adobe inverted) to RGB, for `n` pixels:
/// with stored samples (c, m, y, k), R = k - muldiv255(255 - c, k), likewise G, B. `rgb` may
/// not alias `cmyk`.
void cmyk_to_rgb_pil(const uint8_t* cmyk, size_t n, uint8_t* rgb);

/// PNG via libpng: gray (1/2/4/8 bit), gray+alpha, palette (with or without tRNS), RGB, RGBA, and
/// 16-bit variants -> 8-bit RGB, alpha dropped, as PIL's PngImagePlugin + convert("RGB"):
/// low bit depths scale to 0..255, 16-bit samples keep their high byte -- except 16-bit
/// grayscale, which PIL opens as mode "I" and converts by clamping the value to 0..255
/// (reproduced here for bit-exactness). Gamma, sRGB and ICC chunks are ignored, as PIL does.
/// Throws rn50::Error naming the path for corrupt or truncated data (libpng's message).
void decode_png(const uint8_t* data, size_t size, const std::string& path, Image& out);

/// Images with more pixels than this are never decoded at full size by the loader, even in exact
/// mode: JPEGs are decoded at a reduced DCT scale, PNGs with an integer box reduction
/// (decode_png_reduced), so one worker holds at most ~100 MB of decoded pixels.
inline constexpr int64_t kMaxFullDecodePixels = int64_t(1) << 25;

/// libjpeg's memory budget per decode (bytes): bounds the whole-image coefficient buffer of
/// progressive and multi-scan JPEGs; a file needing more is rejected ("backing store").
inline constexpr long kMaxJpegWorkMemory = 256L << 20;

/// Format and size read from a file's header only (JPEG: jpeg_read_header; PNG: the IHDR chunk).
struct ImageHeader {
  ImageFormat format = ImageFormat::unknown;
  int width = 0, height = 0;
};

/// Reads the header of an in-memory JPEG or PNG. Throws rn50::Error naming the path and the
/// reason for empty data, unknown formats (the first bytes are quoted), corrupt headers and
/// zero sizes. Does not validate the image data.
ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& path);

/// A rectangle of a JPEG decoded at a reduced DCT scale (the fast path). pixels holds rows
/// [y0, y0 + image.height) and columns [x0, x0 + image.width) of the image as libjpeg scales it
/// by scale_num / 8: scaled_width = ceil(width * scale_num / 8) (likewise height), and scaled
/// pixel u covers source pixels [u * 8 / scale_num, (u + 1) * 8 / scale_num).
struct ScaledRegion {
  Image image;  ///< the decoded rectangle, packed RGB
  int x0 = 0, y0 = 0;
  int scale_num = 8;
  int width = 0, height = 0;                ///< full-size image
  int scaled_width = 0, scaled_height = 0;  ///< whole image at scale_num / 8
};

/// A JPEG's frame header, as decode_jpeg_region's planner sees it.
struct JpegFrame {
  int width = 0, height = 0;
  /// false when a component's chroma subsampling differs between the axes (4:2:2, 4:4:0,
  /// 4:1:1): libjpeg-turbo 2.1's DCT-scaled decoding misplaces such chroma (mean errors of 5-25
  /// levels against a block average, where 4:2:0 and 4:4:4 stay near 1), so planners should keep
  /// scale 8/8 for them unless memory forces otherwise.
  bool scalable = true;
};

/// What to decode, decided from the image's size once its header has been read.
struct RegionPlan {
  int scale_num = 8;  ///< DCT scale numerator over 8: 1, 2, 4 or 8
  /// Wanted rectangle in scaled coordinates (inside scaled_width x scaled_height).
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// Decodes part of a JPEG at a reduced size through the libjpeg API of libjpeg-turbo:
/// jpeg_read_header, then `plan(frame)` chooses the scale and the rectangle, then
/// DCT-domain scaling (scale_num / 8), jpeg_crop_scanline (columns, widened to the left to an
/// iMCU boundary), jpeg_skip_scanlines (rows above) and reading only rows [y0, y1) (the rows below
/// are never decoded). The same ISLOW IDCT and fancy upsampling as decode_jpeg; the region is
/// decoded one column wider on each side (fancy upsampling alters a cropped row's outermost
/// columns), so at scale 8/8 every pixel of [x0, x1) x [y0, y1) equals decode_jpeg's (PIL's);
/// out.image may hold extra columns on either side (out.x0 <= x0). Colour handling as
/// decode_jpeg (gray replicated; CMYK/YCCK through PIL's inverted-CMYK conversion).
/// Errors as decode_jpeg (truncated files, fatal libjpeg errors, libjpeg memory over
/// kMaxJpegWorkMemory), plus a region or scale outside the image. `plan` may throw.
void decode_jpeg_region(const uint8_t* data, size_t size, const std::string& path,
                        const std::function<RegionPlan(const JpegFrame& frame)>& plan,
                        ScaledRegion& out);

/// Decodes a PNG reduced by an integer factor `factor` >= 1 in each axis, row by row (memory:
/// one source row plus the reduced image): output pixel (X, Y) is the rounded mean of the source
/// pixels [X*f, min(X*f+f, W)) x [Y*f, min(Y*f+f, H)) after the same conversion to RGB as
/// decode_png. Output size ceil(W / f) x ceil(H / f). Interlaced PNGs are decoded whole and
/// reduced afterwards only when they fit in kMaxFullDecodePixels; larger ones throw. Other errors
/// as decode_png.
void decode_png_reduced(const uint8_t* data, size_t size, const std::string& path, int factor,
                        Image& out);

/// True when the JPEG stream `data` is complete: walking its marker segments (and the entropy
/// coded data after each SOS, where FF is followed by 00 stuffing or RSTn) reaches an EOI marker
/// (FF D9) before the end of the buffer. Bytes after the EOI are ignored.
bool jpeg_has_eoi(const uint8_t* data, size_t size);

/// Checks an encoded image as rn50 check-data does: a JPEG or PNG header, a JPEG's
/// end-of-image marker and, with `decode`, every entropy-coded block (JPEG at 1/8 scale) or row
/// (PNG, box-reduced when huge). `region` and `image` are scratch. Throws rn50::Error naming
/// `path` and the reason.
void validate_image_bytes(const std::vector<uint8_t>& bytes, const std::string& path, bool decode,
                          ScaledRegion& region, Image& image);

}  // namespace rn50::data
