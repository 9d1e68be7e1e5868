// Fuzzes checkpoint state files: read_checkpoint_state on a folder whose state.json is the input.
#include <filesystem>

#include "fuzz_util.h"
#include "train/checkpoint.h"

namespace rn50::fuzz {

void fuzz_checkpoint_state(const uint8_t* data, size_t size) {
  const std::string dir = rn50::fuzz::scratch_dir() + "/epoch";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/state.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  (void)rn50::read_checkpoint_state(dir);
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_checkpoint_state)
