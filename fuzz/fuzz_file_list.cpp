// Fuzzes PaddleClas file lists: file_list_samples on the input ("relative/path label" lines)
// with an empty root folder, then every sample's name and read (the files do not exist).
#include <filesystem>
#include <vector>

#include "data/sample_index.h"
#include "fuzz_util.h"

namespace rn50::fuzz {

void fuzz_file_list(const uint8_t* data, size_t size) {
  using namespace rn50::data;
  const std::string root = rn50::fuzz::scratch_dir() + "/filelist_root";
  std::filesystem::create_directories(root);
  const std::string list = rn50::fuzz::write_scratch("train_list.txt", data, size);
  const auto samples = file_list_samples(list, root);
  if (samples->classes().empty())
    fail("fuzz_file_list: reader returned an inconsistent result");
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < samples->size() && i < 16; ++i) {
    (void)samples->name(i);
    try {
      (void)samples->read(i, bytes);
    } catch (const rn50::Error&) {
    }
  }
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_file_list)
