// rn50 data: JPEG decoding through TurboJPEG, pixel-identical to PIL.
#include <turbojpeg.h>

#include <cstring>
#include <string_view>

#include "core/check.h"
#include "data/decode.h"

namespace rn50::data {
namespace {

/// One TurboJPEG decompressor per thread (handles are not thread-safe; creating one per image
/// would allocate libjpeg's state each time). After a failed call the handle is discarded: a
/// TurboJPEG 2.1 handle whose header read hit a fatal error reports the next image as 0x0.
class Decompressor {
 public:
  ~Decompressor() { reset(); }
  tjhandle get() {
    if (h_ == nullptr) h_ = tjInitDecompress();
    RN50_CHECK(h_ != nullptr, "tjInitDecompress failed: {}", tjGetErrorStr2(nullptr));
    return h_;
  }
  void reset() {
    if (h_ != nullptr) tjDestroy(h_);
    h_ = nullptr;
  }

 private:
  tjhandle h_ = nullptr;
};
thread_local Decompressor t_decompressor;

/// True when `msg` is one of libjpeg's warning texts (jerror.h JWRN_*) other than
/// JWRN_JPEG_EOF. TurboJPEG reports a decode that emitted warnings as failed (-1, TJERR_WARNING)
/// with the first warning's text, but a fatal error raised after a warning also reports
/// TJERR_WARNING (the flag is sticky) with the fatal error's text. Matching the text tells the
/// two apart: only a pure-warning decode has written every output row.
bool is_benign_warning(std::string_view msg) {
  for (std::string_view w :
       {"Corrupt JPEG data", "Warning: unknown JFIF revision", "Inconsistent progression sequence",
        "Unknown Adobe color transform", "Invalid SOS parameters for sequential JPEG",
        "Application transferred too many scanlines"}) {
    if (msg.substr(0, w.size()) == w) return true;
  }
  return false;
}

/// Pillow's MULDIV255: a * b / 255 rounded, in integers (libImaging/Convert.c).
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

/// Throws (naming `what` failed) unless a TurboJPEG return code is success or benign warnings.
void check_tj(int rc, tjhandle h, const std::string& path, const char* what) {
  if (rc == 0) return;
  const std::string msg = tjGetErrorStr2(h);
  if (tjGetErrorCode(h) == TJERR_WARNING && is_benign_warning(msg)) return;
  RN50_FAIL("cannot decode JPEG '{}': {}{}", path, what, msg);
}

}  // namespace

void cmyk_to_rgb_pil(const uint8_t* src, size_t n, uint8_t* dst) {
  // PIL loads CMYK JPEGs with raw mode "CMYK;I" (inverted, Adobe convention): C = 255 - c.
  // Its cmyk2rgb then computes R = nk - muldiv255(C, nk) with nk = 255 - K = k.
  for (size_t p = 0; p < n; ++p, src += 4, dst += 3) {
    const int k = src[3];
    for (int c = 0; c < 3; ++c) dst[c] = static_cast<uint8_t>(k - muldiv255(255 - src[c], k));
  }
}

bool jpeg_has_eoi(const uint8_t* d, size_t n) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  size_t i = 2;
  for (;;) {
    // Next marker: libjpeg skips (with a warning) any non-FF bytes, then any FF fill bytes.
    while (i < n && d[i] != 0xFF) ++i;
    while (i < n && d[i] == 0xFF) ++i;
    if (i >= n) return false;
    const uint8_t m = d[i++];
    if (m == 0xD9) return true;                                                     // EOI
    if (m == 0x00 || m == 0x01 || m == 0xD8 || (m >= 0xD0 && m <= 0xD7)) continue;  // no length
    if (i + 2 > n) return false;
    const size_t len = (size_t{d[i]} << 8) | d[i + 1];
    if (len < 2) return false;
    i += len;
    if (m != 0xDA) continue;
    // SOS: entropy-coded data runs until an FF that is not stuffing (FF 00) or a restart marker.
    for (;;) {
      if (i >= n) return false;
      const void* p = std::memchr(d + i, 0xFF, n - i);
      if (p == nullptr) return false;
      i = static_cast<size_t>(static_cast<const uint8_t*>(p) - d);
      size_t j = i + 1;
      while (j < n && d[j] == 0xFF) ++j;
      if (j >= n) return false;
      if (d[j] == 0x00 || (d[j] >= 0xD0 && d[j] <= 0xD7)) {
        i = j + 1;
        continue;
      }
      break;  // a real marker starts at i
    }
  }
}

namespace {

void decode_jpeg_impl(const uint8_t* data, size_t size, const std::string& path, Image& out) {
  tjhandle h = t_decompressor.get();
  int w = 0, ht = 0, subsamp = 0, cs = 0;
  check_tj(tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &w, &ht, &subsamp, &cs),
           h, path, "bad header: ");
  RN50_CHECK(w > 0 && ht > 0, "cannot decode JPEG '{}': invalid size {}x{}", path, w, ht);
  RN50_CHECK(int64_t{w} * ht <= kMaxImagePixels,
             "cannot decode JPEG '{}': {}x{} pixels exceed the limit of {} pixels", path, w, ht,
             kMaxImagePixels);
  // PIL raises "image file is truncated" when the data ends early (LOAD_TRUNCATED_IMAGES=False);
  // libjpeg would instead warn and pad the missing rows with grey.
  RN50_CHECK(jpeg_has_eoi(data, size),
             "cannot decode JPEG '{}': the file is truncated (no end-of-image marker after the "
             "image data, {} bytes)",
             path, size);

  out.width = w;
  out.height = ht;
  out.pixels.resize(static_cast<size_t>(w) * ht * 3);
  if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
    thread_local std::vector<uint8_t> cmyk;
    cmyk.resize(static_cast<size_t>(w) * ht * 4);
    check_tj(tjDecompress2(h, data, static_cast<unsigned long>(size), cmyk.data(), w, w * 4, ht,
                           TJPF_CMYK, 0),
             h, path, "");
    cmyk_to_rgb_pil(cmyk.data(), static_cast<size_t>(w) * ht, out.pixels.data());
    return;
  }
  // YCbCr, RGB and grayscale: libjpeg converts to RGB (gray is replicated, as PIL's L -> RGB).
  check_tj(tjDecompress2(h, data, static_cast<unsigned long>(size), out.pixels.data(), w, w * 3, ht,
                         TJPF_RGB, 0),
           h, path, "");
}

}  // namespace

void decode_jpeg(const uint8_t* data, size_t size, const std::string& path, Image& out) {
  try {
    decode_jpeg_impl(data, size, path, out);
  } catch (...) {
    t_decompressor.reset();  // never reuse a handle that saw an error
    throw;
  }
}

}  // namespace rn50::data
