// Fuzzes tar shards: scan_tar on the input, then the input as a WebDataset shard
// (webdataset_samples groups members into samples, reads .cls labels) whose samples are read.
#include <filesystem>
#include <vector>

#include "data/tar.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_tar(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  const std::string dir = rn50::fuzz::scratch_dir() + "/wds/shards";
  std::filesystem::create_directories(dir);
  const std::string shard = dir + "/shard-000000.tar";
  {
    std::ofstream f(shard, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::vector<std::string> problems;
  (void)scan_tar(shard, &problems);
  const auto samples = webdataset_samples({shard}, dir);
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < samples->size() && i < 256; ++i) {
    try {
      const int label = samples->read(i, bytes);
      if (label < 0 || label >= int(samples->classes().size()))
        fail("fuzz_tar: reader returned an inconsistent result");
    } catch (const rn50::Error&) {
    }
    (void)samples->name(i);
  }
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_tar)
