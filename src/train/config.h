// rn50: helpers of the resolved training configuration (the flags themselves: train/flags.h).
#pragma once

#include <nlohmann/json.hpp>

#include "rn50/train.h"

namespace rn50 {

/// Where a user without a dataset is sent by the errors about --image-root.
inline constexpr const char* kDataHelp =
    "README.md, section 'Getting the data', says how to download Imagenette or turn the "
    "ImageNet-1k archives into this layout with scripts/prepare-imagenet.sh";


/// The model's compute dtype for a config: f32, or f16/bf16 under --amp (--amp-dtype).
DType compute_dtype(const TrainConfig& cfg);

}  // namespace rn50
