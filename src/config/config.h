// rn50: what follows from a resolved configuration (rn50/config.h; the flags themselves:
// config/flags.h): its precision and the loader's options.
#pragma once

#include <nlohmann/json.hpp>

#include "data/stores.h"
#include "rn50/data.h"
#include "rn50/parallel.h"
#include "rn50/precision.h"
#include "rn50/train.h"

namespace rn50 {

/// Where a user without a dataset is sent by the errors about --image-root.
inline constexpr const char* kDataHelp =
    "docs/data.md, section 'Getting the data', says how to download Imagenette or turn the "
    "ImageNet-1k archives into this layout with scripts/prepare-imagenet.sh";

/// The precision of a run of `cfg` on `backend` ("onednn", "ref", "cuda"): pure_fp16 with
/// --use-pure-fp16, amp_fp16 / amp_bf16 with --amp (--amp-dtype), else tf32 on CUDA unless
/// --no-tf32, else fp32.
Precision precision_of(const Config& cfg, const std::string& backend);

/// `cfg` set to train in `precision` on `backend`, the inverse of precision_of: --amp,
/// --amp-dtype, --use-pure-fp16 and --no-tf32 (which exists on CUDA only) set accordingly.
Config with_precision(Config cfg, Precision precision, const std::string& backend);

/// Where the dataset of `cfg` is: --data-format, --image-root, the lists, the shard patterns,
/// --data-idx-dir, --label-offset, --num-of-class.
StoreOptions store_options(const Config& cfg);

/// The loader options of `cfg` for process `proc` (batch, crop, resize, workers, prefetch,
/// seed, RandomResizedCrop ranges, decode mode, worker CPUs, bad-file limit; drop_last for
/// training), with the bad-file list beside the report, else in the checkpoint folder, else in
/// the working directory.
LoaderOptions loader_options(const Config& cfg, const ProcessInfo& proc);

}  // namespace rn50
