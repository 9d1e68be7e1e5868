// rn50: TrainConfig <-> JSON (the "config" report line and state.json's "config").
#pragma once

#include <nlohmann/json.hpp>

#include "rn50/train.h"

namespace rn50 {

/// Every field of `cfg` keyed by its flag name without dashes-> underscores (e.g. "batch_size",
/// "num_of_class"), enums as their names, layout as "NCHW"/"NHWC".
nlohmann::ordered_json config_to_json(const TrainConfig& cfg);

/// Parses --device: "cpu" -> backend "onednn"; "cuda" / "cuda:N" -> throws "the CUDA backend is
/// not built yet"; anything else throws naming --device and the value.
std::string backend_for_device(const std::string& device);

}  // namespace rn50
