// rn50 data: PNG decoding through libpng, pixel-identical to PIL's convert("RGB").
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "data/decode.h"

namespace rn50::data {
namespace {

/// libpng's read callback state: the in-memory file and the first error message.
struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[256];
};

void png_read_mem(png_structp png, png_bytep dst, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "unexpected end of file (truncated PNG)");
  std::memcpy(dst, src->data + src->pos, n);
  src->pos += n;
}

[[noreturn]] void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->error, sizeof(src->error), "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // PIL ignores ancillary-chunk problems

/// One row of libpng output (after the transformations set in decode_png) to packed RGB, as
/// PIL's convert("RGB"): 16-bit gray ("I") clamped to 0..255, gray (+ alpha) replicated, alpha
/// dropped.
void convert_row(const uint8_t* s, png_uint_32 w, int channels, bool gray16, uint8_t* dst) {
  if (gray16) {  // PIL "I" -> "RGB" (Convert.c i2rgb): clamp the 16-bit value to 0..255
    for (png_uint_32 x = 0; x < w; ++x, dst += 3) {
      const int v = (s[2 * x] << 8) | s[2 * x + 1];
      dst[0] = dst[1] = dst[2] = static_cast<uint8_t>(v > 255 ? 255 : v);
    }
    return;
  }
  for (png_uint_32 x = 0; x < w; ++x, dst += 3, s += channels) {
    if (channels <= 2) {  // gray, gray + alpha: replicate
      dst[0] = dst[1] = dst[2] = s[0];
    } else {  // RGB (+ alpha, dropped)
      dst[0] = s[0];
      dst[1] = s[1];
      dst[2] = s[2];
    }
  }
}

/// The libpng transformations that make its rows match PIL's convert("RGB") input: palette ->
/// its RGB entries (tRNS ignored by convert("RGB")); gray 1/2/4 bit scaled to 0..255 ("1",
/// "L;2", "L;4" raw modes); 16-bit samples keep the high byte ("RGB;16B", "RGBA;16B", "LA;16B")
/// except 16-bit gray, which PIL loads as "I" and clamps (convert_row). Returns whether the image
/// is 16-bit gray.
bool set_pil_transforms(png_structp png, int depth, int type) {
  const bool gray16 = depth == 16 && type == PNG_COLOR_TYPE_GRAY;
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !gray16) png_set_strip_16(png);
  return gray16;
}

/// Adds one packed-RGB row of `w` pixels into `acc`, column x into block x / factor.
void accumulate_row(const uint8_t* s, size_t w, int factor, std::vector<uint32_t>& acc) {
  for (size_t x = 0; x < w; ++x, s += 3) {
    uint32_t* a = &acc[x / static_cast<size_t>(factor) * 3];
    a[0] += s[0];
    a[1] += s[1];
    a[2] += s[2];
  }
}

/// Writes one reduced output row: the rounded mean of each block's sums in `acc` (blocks of
/// `factor` columns, the last one possibly narrower, times `rows` rows), then clears `acc`.
void emit_reduced_row(std::vector<uint32_t>& acc, int width, int factor, int rows, uint8_t* dst) {
  const int ow = static_cast<int>(acc.size() / 3);
  for (int x = 0; x < ow; ++x) {
    const uint32_t cols = static_cast<uint32_t>(std::min(factor, width - x * factor));
    const uint32_t n = cols * static_cast<uint32_t>(rows);
    for (int c = 0; c < 3; ++c) {
      dst[3 * x + c] = static_cast<uint8_t>((acc[3 * static_cast<size_t>(x) + c] + n / 2) / n);
      acc[3 * static_cast<size_t>(x) + c] = 0;
    }
  }
}

}  // namespace

// libpng reports errors by longjmp. Everything with a destructor that must survive a jump lives
// in this frame and is constructed before setjmp; libpng's own frames hold no C++ objects.
void decode_png(const uint8_t* data, size_t size, const std::string& path, Image& out) {
  PngSource src{data, size, 0, {0}};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, &png_on_error, &png_on_warning);
  RN50_CHECK(png != nullptr, "cannot decode PNG '{}': png_create_read_struct failed", path);
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    RN50_FAIL("cannot decode PNG '{}': png_create_info_struct failed", path);
  }
  thread_local std::vector<uint8_t> raw;  // decoded rows before conversion to RGB
  thread_local std::vector<png_bytep> rows;
  // Set inside the protected region, read after a jump: volatile keeps them out of registers.
  volatile int too_big = 0;
  volatile int width = 0, height = 0;

  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    if (too_big) {
      RN50_FAIL("cannot decode PNG '{}': {}x{} pixels exceed the limit of {} pixels", path,
                static_cast<int>(width), static_cast<int>(height), kMaxImagePixels);
    }
    RN50_FAIL("cannot decode PNG '{}': {}", path, src.error);
  }
  png_set_read_fn(png, &src, &png_read_mem);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  const int depth = png_get_bit_depth(png, info);
  const int type = png_get_color_type(png, info);
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  if (uint64_t{w} * h > static_cast<uint64_t>(kMaxImagePixels)) {
    too_big = 1;
    png_error(png, "too big");
  }
  const bool gray16 = set_pil_transforms(png, depth, type);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);

  out.width = static_cast<int>(w);
  out.height = static_cast<int>(h);
  out.pixels.resize(static_cast<size_t>(w) * h * 3);
  const bool direct = channels == 3 && !gray16;  // already RGB8: decode straight into `out`
  uint8_t* base = direct ? out.pixels.data() : nullptr;
  if (!direct) {
    raw.resize(rowbytes * h);
    base = raw.data();
  }
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = base + y * (direct ? size_t{w} * 3 : rowbytes);
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  if (direct) return;

  for (png_uint_32 y = 0; y < h; ++y) {
    convert_row(raw.data() + y * rowbytes, w, channels, gray16,
                out.pixels.data() + size_t{y} * w * 3);
  }
}

void decode_png_reduced(const uint8_t* data, size_t size, const std::string& path, int factor,
                        Image& out) {
  RN50_CHECK(factor >= 1, "decode_png_reduced: factor {} < 1 ('{}')", factor, path);
  if (factor == 1) return decode_png(data, size, path, out);
  PngSource src{data, size, 0, {0}};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, &png_on_error, &png_on_warning);
  RN50_CHECK(png != nullptr, "cannot decode PNG '{}': png_create_read_struct failed", path);
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    RN50_FAIL("cannot decode PNG '{}': png_create_info_struct failed", path);
  }
  thread_local std::vector<uint8_t> row, rgb;
  thread_local std::vector<uint32_t> acc;
  volatile int interlaced = 0, too_big = 0;
  volatile int width = 0, height = 0;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    if (too_big) {
      RN50_FAIL(
          "cannot decode PNG '{}': {}x{} pixels exceed the limit of {} pixels (or 262144 "
          "per side)",
          path, static_cast<int>(width), static_cast<int>(height), kMaxImagePixels);
    }
    if (interlaced) {
      RN50_FAIL(
          "cannot decode PNG '{}': interlaced {}x{} image is too large to decode ({} "
          "pixels at most)",
          path, static_cast<int>(width), static_cast<int>(height), kMaxFullDecodePixels);
    }
    RN50_FAIL("cannot decode PNG '{}': {}", path, src.error);
  }
  png_set_read_fn(png, &src, &png_read_mem);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  const int depth = png_get_bit_depth(png, info);
  const int type = png_get_color_type(png, info);
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  if (uint64_t{w} * h > static_cast<uint64_t>(kMaxImagePixels) || w > (1u << 18) ||
      h > (1u << 18)) {
    too_big = 1;
    png_error(png, "too big");
  }
  if (png_get_interlace_type(png, info) != PNG_INTERLACE_NONE) {
    if (uint64_t{w} * h > static_cast<uint64_t>(kMaxFullDecodePixels)) {
      interlaced = 1;
      png_error(png, "interlaced");
    }
    png_destroy_read_struct(&png, &info, nullptr);
    Image full;
    decode_png(data, size, path, full);
    out.width = (full.width + factor - 1) / factor;
    out.height = (full.height + factor - 1) / factor;
    out.pixels.assign(static_cast<size_t>(out.width) * out.height * 3, 0);
    acc.assign(static_cast<size_t>(out.width) * 3, 0);
    for (int y = 0; y < full.height; ++y) {
      accumulate_row(full.pixels.data() + static_cast<size_t>(y) * full.width * 3,
                     static_cast<size_t>(full.width), factor, acc);
      if ((y + 1) % factor == 0 || y + 1 == full.height) {
        emit_reduced_row(acc, full.width, factor, y % factor + 1,
                         out.pixels.data() + static_cast<size_t>(y / factor) * out.width * 3);
      }
    }
    return;
  }
  const bool gray16 = set_pil_transforms(png, depth, type);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  const int ow = static_cast<int>((w + factor - 1) / factor);
  const int oh = static_cast<int>((h + factor - 1) / factor);
  row.resize(rowbytes);
  rgb.resize(size_t{w} * 3);
  acc.assign(static_cast<size_t>(ow) * 3, 0);
  out.width = ow;
  out.height = oh;
  out.pixels.resize(static_cast<size_t>(ow) * oh * 3);
  for (png_uint_32 y = 0; y < h; ++y) {
    png_read_row(png, row.data(), nullptr);
    convert_row(row.data(), w, channels, gray16, rgb.data());
    accumulate_row(rgb.data(), w, factor, acc);
    if ((y + 1) % static_cast<png_uint_32>(factor) == 0 || y + 1 == h) {
      emit_reduced_row(acc, static_cast<int>(w), factor,
                       static_cast<int>(y % static_cast<png_uint_32>(factor)) + 1,
                       out.pixels.data() + static_cast<size_t>(y / factor) * ow * 3);
    }
  }
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
}

}  // namespace rn50::data
