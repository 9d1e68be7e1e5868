// Fuzzes the tf.train.Example wire-format reader (parse_example) on raw record payloads.
#include "data/tfrecord.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_example(const uint8_t* data, size_t size) {
  const rn50::data::ExampleFields f = rn50::data::parse_example(data, size, "fuzz");
  // The views must lie inside the input.
  const auto inside = [&](std::string_view v) {
    return v.empty() || (reinterpret_cast<const uint8_t*>(v.data()) >= data &&
                         reinterpret_cast<const uint8_t*>(v.data()) + v.size() <= data + size);
  };
  if (!inside(f.encoded) || !inside(f.synset))
    fail("fuzz_example: reader returned an inconsistent result");
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_example)
