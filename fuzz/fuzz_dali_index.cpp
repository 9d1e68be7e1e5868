// Fuzzes DALI index files: read_dali_index on the input, then the input as the index of a small
// valid shard (tfrecord_samples with TfrecordOptions::idx_dir), whose samples are all read.
#include <filesystem>
#include <vector>

#include "data/tfrecord.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_dali_index(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  const std::string root = rn50::fuzz::scratch_dir() + "/dali";
  static const bool ready = [&] {
    std::filesystem::create_directories(root + "/shards");
    std::filesystem::create_directories(root + "/idx");
    std::string shard;
    for (int i = 0; i < 3; ++i)
      append_record(shard, encode_example(std::string(5 + i, char(0xFF)), 1 + i, "n0", "x.jpg"));
    std::ofstream(root + "/shards/train-00000-of-00001", std::ios::binary) << shard;
    return true;
  }();
  (void)ready;
  const std::string idx = root + "/idx/train-00000-of-00001.idx";
  {
    std::ofstream f(idx, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    (void)read_dali_index(idx);
  } catch (const rn50::Error&) {
  }
  TfrecordOptions opt;
  opt.idx_dir = root + "/idx";
  const auto samples = tfrecord_samples(root + "/shards", rn50::Split::train, opt);
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < samples->size() && i < 256; ++i) {
    try {
      (void)samples->read(i, bytes);
    } catch (const rn50::Error&) {
    }
  }
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_dali_index)
