// Fuzzes TFRecord shards: the input is written as the one shard train-00000-of-00001 of a
// folder, then tfrecord_samples frames it (scan_tfrecord: lengths and their CRCs) and every
// sample is read (the data CRC, the tf.train.Example, its label).
#include <filesystem>
#include <vector>

#include "data/tfrecord.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_tfrecord(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  const std::string dir = rn50::fuzz::scratch_dir() + "/tfrecord/shards";
  std::filesystem::create_directories(dir);
  const std::string shard = dir + "/train-00000-of-00001";
  {
    std::ofstream f(shard, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::vector<std::string> problems;
  (void)scan_tfrecord(shard, &problems);
  const auto samples = tfrecord_samples(dir, rn50::Split::train, TfrecordOptions{});
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < samples->size() && i < 256; ++i) {
    try {
      const int label = samples->read(i, bytes);
      if (label < 0 || label >= int(samples->classes().size()))
        fail("fuzz_tfrecord: reader returned an inconsistent result");
    } catch (const rn50::Error&) {
    }
    (void)samples->name(i);
  }
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_tfrecord)
