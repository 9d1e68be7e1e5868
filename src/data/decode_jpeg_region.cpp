// rn50 data: reduced-size and region-of-interest JPEG decoding through the libjpeg API of
// libjpeg-turbo (DCT scaling, jpeg_crop_scanline, jpeg_skip_scanlines), and header probing.
//
// libjpeg reports fatal errors through error_exit, which must not return: it longjmps back to the
// frame that called setjmp. Those frames (the *_core functions) hold no C++ object with a
// destructor that a jump could skip; their callers own every buffer and do the throwing.
#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "core/check.h"
#include "data/decode.h"

namespace rn50::data {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorManager*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

/// Warnings (level < 0) are accepted as PIL accepts them, except "Premature end of JPEG file"
/// (PIL raises "image file is truncated"); trace messages (level >= 0) are dropped. Nothing is
/// printed.
void on_emit_message(j_common_ptr c, int level) {
  if (level < 0) {
    if (c->err->msg_code == JWRN_JPEG_EOF) on_error_exit(c);
    ++c->err->num_warnings;
  }
}

void on_output_message(j_common_ptr) {}

/// One libjpeg decompressor per thread, created on first use and recreated after an error.
struct Decoder {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool live = false;

  void ensure() {
    if (live) return;
    std::memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = &on_error_exit;
    err.pub.emit_message = &on_emit_message;
    err.pub.output_message = &on_output_message;
    err.message[0] = '\0';
    if (setjmp(err.jump)) {
      RN50_FAIL("jpeg_create_decompress failed: {}", err.message);
    }
    jpeg_create_decompress(&cinfo);
    cinfo.mem->max_memory_to_use = kMaxJpegWorkMemory;
    live = true;
  }
  void destroy() {
    if (live) jpeg_destroy_decompress(&cinfo);
    live = false;
  }
  ~Decoder() { destroy(); }
};
thread_local Decoder t_decoder;

/// Reads the header; returns false (message in d.err.message) on a fatal libjpeg error.
bool read_header_core(Decoder& d, const uint8_t* data, size_t size) {
  jpeg_decompress_struct* c = &d.cinfo;
  if (setjmp(d.err.jump)) return false;
  jpeg_mem_src(c, data, static_cast<unsigned long>(size));
  jpeg_read_header(c, TRUE);
  return true;
}

/// What decode_core needs: the plan, the output buffers (allocated by the caller).
struct CoreArgs {
  RegionPlan plan;
  bool cmyk = false;
  uint8_t* rows = nullptr;  ///< (y1 - y0) rows of row_bytes
  size_t row_bytes = 0;
  JDIMENSION crop_x = 0, crop_w = 0;  ///< in: wanted columns; out: as jpeg_crop_scanline set them
};

/// Starts the decompression at the planned scale and reads the planned rows. Returns false on a
/// fatal libjpeg error. The caller has read the header and set the output colour space.
bool start_core(Decoder& d, CoreArgs& a) {
  jpeg_decompress_struct* c = &d.cinfo;
  if (setjmp(d.err.jump)) return false;
  c->scale_num = static_cast<unsigned>(a.plan.scale_num);
  c->scale_denom = 8;
  c->dct_method = JDCT_ISLOW;
  c->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(c);
  return true;
}

bool read_rows_core(Decoder& d, CoreArgs& a) {
  jpeg_decompress_struct* c = &d.cinfo;
  if (setjmp(d.err.jump)) return false;
  if (a.crop_w < c->output_width) jpeg_crop_scanline(c, &a.crop_x, &a.crop_w);
  const auto y0 = static_cast<JDIMENSION>(a.plan.y0), y1 = static_cast<JDIMENSION>(a.plan.y1);
  if (y0 > 0) jpeg_skip_scanlines(c, y0);
  while (c->output_scanline < y1) {
    JSAMPROW row = a.rows + (c->output_scanline - y0) * a.row_bytes;
    jpeg_read_scanlines(c, &row, 1);
  }
  jpeg_abort_decompress(c);  // the rows below are not needed; resets the object for reuse
  return true;
}

/// Throws the pending libjpeg error of `d` (after discarding the decoder) for `path`.
[[noreturn]] void fail_jpeg(Decoder& d, const std::string& path, const char* what) {
  const std::string msg = d.err.message;
  d.destroy();
  RN50_FAIL("cannot decode JPEG '{}': {}{}", path, what, msg);
}

}  // namespace

ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& path) {
  RN50_CHECK(size > 0, "cannot decode '{}': the file is empty", path);
  ImageHeader h;
  h.format = sniff_format(data, size);
  if (h.format == ImageFormat::png) {
    // Signature (8), IHDR length (4) + "IHDR" (4), width (4), height (4), big endian.
    RN50_CHECK(size >= 24 && std::memcmp(data + 12, "IHDR", 4) == 0,
               "cannot decode PNG '{}': no IHDR chunk after the signature", path);
    auto be32 = [&](size_t o) {
      return (uint32_t{data[o]} << 24) | (uint32_t{data[o + 1]} << 16) |
             (uint32_t{data[o + 2]} << 8) | data[o + 3];
    };
    const uint32_t w = be32(16), ht = be32(20);
    RN50_CHECK(w > 0 && ht > 0 && w <= 0x7fffffffu && ht <= 0x7fffffffu,
               "cannot decode PNG '{}': invalid size {}x{}", path, w, ht);
    h.width = static_cast<int>(w);
    h.height = static_cast<int>(ht);
    return h;
  }
  if (h.format == ImageFormat::jpeg) {
    Decoder& d = t_decoder;
    d.ensure();
    if (!read_header_core(d, data, size)) fail_jpeg(d, path, "bad header: ");
    h.width = static_cast<int>(d.cinfo.image_width);
    h.height = static_cast<int>(d.cinfo.image_height);
    jpeg_abort_decompress(&d.cinfo);
    RN50_CHECK(h.width > 0 && h.height > 0, "cannot decode JPEG '{}': invalid size {}x{}", path,
               h.width, h.height);
    return h;
  }
  std::string head;
  for (size_t i = 0; i < size && i < 8; ++i) head += fmt::format("{:02X} ", data[i]);
  RN50_FAIL("cannot decode '{}': not a JPEG or PNG file (first bytes {})", path, head);
}

void decode_jpeg_region(const uint8_t* data, size_t size, const std::string& path,
                        const std::function<RegionPlan(const JpegFrame& frame)>& plan,
                        ScaledRegion& out) {
  RN50_CHECK(size > 0, "cannot decode '{}': the file is empty", path);
  RN50_CHECK(sniff_format(data, size) == ImageFormat::jpeg, "cannot decode '{}': not a JPEG file",
             path);
  Decoder& d = t_decoder;
  d.ensure();
  jpeg_decompress_struct* c = &d.cinfo;
  thread_local std::vector<uint8_t> cmyk;
  try {
    if (!read_header_core(d, data, size)) fail_jpeg(d, path, "bad header: ");
    const int w = static_cast<int>(c->image_width), h = static_cast<int>(c->image_height);
    RN50_CHECK(w > 0 && h > 0, "cannot decode JPEG '{}': invalid size {}x{}", path, w, h);
    // As decode_jpeg: PIL rejects a file whose data ends before the EOI marker.
    RN50_CHECK(jpeg_has_eoi(data, size),
               "cannot decode JPEG '{}': the file is truncated (no end-of-image marker after the "
               "image data, {} bytes)",
               path, size);
    JpegFrame frame{w, h, true};
    for (int i = 0; i < c->num_components; ++i) {
      const jpeg_component_info& ci = c->comp_info[i];
      if (ci.h_samp_factor <= 0 || ci.v_samp_factor <= 0) continue;  // libjpeg rejects these
      if (c->max_h_samp_factor * ci.v_samp_factor != c->max_v_samp_factor * ci.h_samp_factor) {
        frame.scalable = false;
      }
    }
    CoreArgs a;
    a.plan = plan(frame);
    const RegionPlan& p = a.plan;
    RN50_CHECK(p.scale_num >= 1 && p.scale_num <= 8,
               "decode_jpeg_region: scale {}/8 is outside 1/8 .. 8/8", p.scale_num);
    const int sw = static_cast<int>((int64_t{w} * p.scale_num + 7) / 8);
    const int sh = static_cast<int>((int64_t{h} * p.scale_num + 7) / 8);
    RN50_CHECK(0 <= p.x0 && p.x0 < p.x1 && p.x1 <= sw && 0 <= p.y0 && p.y0 < p.y1 && p.y1 <= sh,
               "decode_jpeg_region: region [{}, {}) x [{}, {}) outside the {}x{} image at scale "
               "{}/8 ('{}')",
               p.x0, p.x1, p.y0, p.y1, sw, sh, p.scale_num, path);
    // Fancy upsampling treats the edges of a cropped row as image edges, which changes the
    // chroma of the outermost column on each side: decode one more column on each side so that
    // every wanted pixel equals the full decode's.
    const int xa = std::max(0, p.x0 - 1), xb = std::min(sw, p.x1 + 1);
    a.crop_x = static_cast<JDIMENSION>(xa);
    a.crop_w = static_cast<JDIMENSION>(xb - xa);
    // jpeg_crop_scanline then moves the left edge down to an iMCU boundary (iMCUs are at most
    // 4 * scale_num columns wide: sampling factors are at most 4), so the final width is known
    // only after the call: read rows with the widest possible stride, then pack them.
    const size_t cols = static_cast<size_t>(std::min(xb, xb - xa + 4 * p.scale_num));
    const size_t nrows = static_cast<size_t>(p.y1 - p.y0);
    RN50_CHECK(static_cast<int64_t>(cols * nrows) <= kMaxFullDecodePixels,
               "cannot decode JPEG '{}': {}x{} pixels at scale {}/8 exceed the limit of {} pixels",
               path, cols, nrows, p.scale_num, kMaxFullDecodePixels);
    a.cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
    c->out_color_space = a.cmyk ? JCS_CMYK : JCS_RGB;  // gray -> RGB replicates, as PIL
    if (!start_core(d, a)) fail_jpeg(d, path, "");
    RN50_CHECK(static_cast<int>(c->output_width) == sw && static_cast<int>(c->output_height) == sh,
               "decode_jpeg_region: libjpeg scaled '{}' to {}x{}, expected {}x{}", path,
               c->output_width, c->output_height, sw, sh);
    const size_t channels = a.cmyk ? 4 : 3;
    a.row_bytes = cols * channels;
    std::vector<uint8_t>& buf = a.cmyk ? cmyk : out.image.pixels;
    buf.resize(a.row_bytes * nrows);
    a.rows = buf.data();
    if (!read_rows_core(d, a)) fail_jpeg(d, path, "");
    const size_t cw = a.crop_w;
    RN50_CHECK(cw * channels <= a.row_bytes && a.crop_x <= static_cast<JDIMENSION>(xa),
               "decode_jpeg_region: unexpected crop {}+{} for [{}, {}) ('{}')", a.crop_x, cw, p.x0,
               p.x1, path);
    if (cw * channels < a.row_bytes) {  // pack rows to the final width (in place, forwards)
      for (size_t y = 1; y < nrows; ++y) {
        std::memmove(buf.data() + y * cw * channels, buf.data() + y * a.row_bytes, cw * channels);
      }
    }
    out.image.width = static_cast<int>(cw);
    out.image.height = static_cast<int>(nrows);
    out.image.pixels.resize(cw * nrows * 3);
    if (a.cmyk) cmyk_to_rgb_pil(cmyk.data(), cw * nrows, out.image.pixels.data());
    out.x0 = static_cast<int>(a.crop_x);
    out.y0 = p.y0;
    out.scale_num = p.scale_num;
    out.width = w;
    out.height = h;
    out.scaled_width = sw;
    out.scaled_height = sh;
  } catch (...) {
    if (d.live) jpeg_abort_decompress(c);
    throw;
  }
}

}  // namespace rn50::data
