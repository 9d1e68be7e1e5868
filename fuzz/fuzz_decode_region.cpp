// Fuzzes the reduced decoders: decode_jpeg_region (DCT-scaled, cropped) with a plan drawn from
// the input's last bytes (scale 1/2/4/8 over 8, a rectangle that may fall outside the image), and
// decode_png_reduced with a box factor of 1..8, then a resized crop of the result.
#include <algorithm>
#include <vector>

#include "data/decode.h"
#include "data/transforms.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_decode_region(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  if (size < 4) return;
  // The last 4 bytes choose the plan; the image is the rest.
  const uint8_t* knobs = data + size - 4;
  size -= 4;
  const ImageHeader h = read_image_header(data, size, "fuzz");
  if (int64_t{h.width} * h.height > (int64_t{1} << 22)) return;
  rn50::Image out;
  if (h.format == ImageFormat::jpeg) {
    ScaledRegion region;
    decode_jpeg_region(
        data, size, "fuzz",
        [&](const JpegFrame& f) {
          RegionPlan p;
          p.scale_num = 1 << (knobs[0] & 3);
          const int sw = (f.width * p.scale_num + 7) / 8, sh = (f.height * p.scale_num + 7) / 8;
          // Mostly inside the scaled image; knobs[3] bit 7 tries a rectangle past its edge.
          const int slack = (knobs[3] & 0x80) ? 3 : 0;
          p.x0 = sw * (knobs[1] & 15) / 16;
          p.y0 = sh * (knobs[2] & 15) / 16;
          p.x1 = std::max(p.x0 + 1, sw - sw * (knobs[1] >> 4) / 16) + slack;
          p.y1 = std::max(p.y0 + 1, sh - sh * (knobs[2] >> 4) / 16) + slack;
          return p;
        },
        region);
    out = std::move(region.image);
  } else {
    decode_png_reduced(data, size, "fuzz", 1 + (knobs[0] & 7), out);
  }
  if (out.pixels.size() != size_t(out.width) * out.height * 3)
    fail("fuzz_decode_region: reader returned an inconsistent result");
  if (out.width > 0 && out.height > 0) {
    std::vector<uint8_t> dst(16 * 16 * 3);
    CropBox box;
    box.width = 1 + (out.width - 1) * (knobs[3] & 15) / 15;
    box.height = 1 + (out.height - 1) * (knobs[3] & 15) / 15;
    box.left = out.width - box.width;
    box.top = out.height - box.height;
    resized_crop(out, box, 16, knobs[3] & 0x40, dst.data());
  }
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_decode_region)
