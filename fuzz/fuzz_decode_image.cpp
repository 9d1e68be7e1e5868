// Fuzzes whole-image decoding: read_image_header, then decode_image (JPEG via TurboJPEG, PNG via
// libpng, chosen by magic bytes), then the eval and train transforms on the decoded image.
// Images over 2^22 pixels are skipped after the header (they are legal up to kMaxImagePixels but
// only slow the fuzzer down).
#include <vector>

#include "data/decode.h"
#include "data/rng.h"
#include "data/transforms.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_decode_image(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  const ImageHeader h = read_image_header(data, size, "fuzz");
  if (int64_t{h.width} * h.height > (int64_t{1} << 22)) return;
  rn50::Image img;
  decode_image(data, size, "fuzz", img);
  if (img.pixels.size() != size_t(img.width) * img.height * 3)
    fail("fuzz_decode_image: reader returned an inconsistent result");
  std::vector<uint8_t> dst(32 * 32 * 3);
  eval_transform(img, 36, 32, dst.data());
  SampleRng rng(size, 0, 0);
  train_transform(img, 32, rng, dst.data());
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_decode_image)
