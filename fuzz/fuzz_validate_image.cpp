// Fuzzes rn50 check-data's check of one image: validate_image_bytes (header, JPEG end-of-image
// marker walk, then the 1/8-scale JPEG or box-reduced PNG decode), with and without decoding.
#include <vector>

#include "data/decode.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_validate_image(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  const std::vector<uint8_t> bytes(data, data + size);
  ScaledRegion region;
  rn50::Image image;
  try {
    validate_image_bytes(bytes, "fuzz", false, region, image);
  } catch (const rn50::Error&) {
  }
  const ImageHeader h = read_image_header(data, size, "fuzz");
  if (int64_t{h.width} * h.height > (int64_t{1} << 24)) return;
  validate_image_bytes(bytes, "fuzz", true, region, image);
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_validate_image)
