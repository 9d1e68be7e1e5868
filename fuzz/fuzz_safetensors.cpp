// Fuzzes the safetensors reader (checkpoints, weights, optimizer files): load_safetensors on the
// input (u64 header length, JSON header, tensor data).
#include "core/safetensors.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_safetensors(const uint8_t* data, size_t size) {
  const std::string path = rn50::fuzz::write_scratch("fuzz.safetensors", data, size);
  const rn50::SafeTensorsFile f = rn50::load_safetensors(path);
  if (f.order.size() != f.tensors.size())
    fail("fuzz_safetensors: reader returned an inconsistent result");
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_safetensors)
