// Fuzzes exported models: load_inference_model on a folder whose model.json and
// model.safetensors come from the input, split at the first "\n--safetensors--\n" (the JSON
// before it, the safetensors file after it; without it the safetensors file is empty).
#include <filesystem>

#include "fuzz_util.h"
#include "rn50/inference.h"

namespace rn50::fuzz {

void fuzz_model_io(const uint8_t* data, size_t size) {
  const std::string dir = rn50::fuzz::scratch_dir() + "/model";
  std::filesystem::create_directories(dir);
  const auto [json, weights] = rn50::fuzz::split_input(data, size, "\n--safetensors--\n");
  std::ofstream(dir + "/" + rn50::kInferenceJsonFile, std::ios::binary | std::ios::trunc)
      .write(json.data(), static_cast<std::streamsize>(json.size()));
  std::ofstream(dir + "/" + rn50::kInferenceWeightsFile, std::ios::binary | std::ios::trunc)
      .write(weights.data(), static_cast<std::streamsize>(weights.size()));
  (void)rn50::load_inference_model(dir);
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_model_io)
