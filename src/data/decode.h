// rn50 data: image file decoding to 8-bit RGB, pixel-identical to PIL's
// `Image.open(f).convert("RGB")` (what torchvision's ImageFolder loader does).
#pragma once

#include <cstddef>
#include <cstdint>
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
/// Throws rn50::Error naming the path when it cannot be opened or read.
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

/// PNG via libpng: gray (1/2/4/8 bit), gray+alpha, palette (with or without tRNS), RGB, RGBA, and
/// 16-bit variants -> 8-bit RGB, alpha dropped, as PIL's PngImagePlugin + convert("RGB"):
/// low bit depths scale to 0..255, 16-bit samples keep their high byte -- except 16-bit
/// grayscale, which PIL opens as mode "I" and converts by clamping the value to 0..255
/// (reproduced here for bit-exactness). Gamma, sRGB and ICC chunks are ignored, as PIL does.
/// Throws rn50::Error naming the path for corrupt or truncated data (libpng's message).
void decode_png(const uint8_t* data, size_t size, const std::string& path, Image& out);

/// True when the JPEG stream `data` is complete: walking its marker segments (and the entropy
/// coded data after each SOS, where FF is followed by 00 stuffing or RSTn) reaches an EOI marker
/// (FF D9) before the end of the buffer. Bytes after the EOI are ignored.
bool jpeg_has_eoi(const uint8_t* data, size_t size);

}  // namespace rn50::data
