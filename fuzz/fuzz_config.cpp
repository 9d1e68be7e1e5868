// Fuzzes --config files: apply_config_file on the input (TOML/INI through CLI11's parser, or
// JSON: a report's config line, a state.json, an object of flags) for rn50 train and rn50 eval.
#include "config/flags.h"
#include "fuzz_util.h"
#include "rn50/config.h"

namespace rn50::fuzz {

void fuzz_config(const uint8_t* data, size_t size) {
  const std::string path = rn50::fuzz::write_scratch("config.toml", data, size);
  try {
    rn50::Config eval_cfg;
    (void)rn50::apply_config_file(eval_cfg, path, rn50::kEval);
  } catch (const rn50::Error&) {
  }
  rn50::Config cfg;
  (void)rn50::apply_config_file(cfg, path, rn50::kTrain);
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_config)
