// rn50 data: `rn50 convert-data` — a dataset of any store (data/stores.h) rewritten as shards:
// WebDataset tar files (<output>/train/train-NNNNNN.tar, <output>/val/val-NNNNNN.tar, members
// <key>.jpg|.png and <key>.cls) or TFRecord files (<output>/train-NNNNN-of-NNNNN,
// <output>/validation-NNNNN-of-NNNNN, Examples as the standard ImageNet conversion writes
// them, labels 1-based; DALI index files in <output>/idx), each shard written atomically, and
// <output>/manifest.json (data/manifest.h) last.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "data/stores.h"

namespace rn50::data {

struct ConvertReport {
  int64_t samples = 0;      ///< written, both splits
  int64_t skipped = 0;      ///< unreadable samples left out (named on the log stream)
  int64_t shards = 0;
  int64_t bytes = 0;        ///< shard bytes written
  double seconds = 0;
};

/// Converts the dataset of `source` into `format` ("webdataset" or "tfrecord") shards of
/// `shard_size` samples under `output` (created). The image bytes are copied as they are
/// (no re-encoding); samples keep their split order. Prints one line per split to `log`.
/// Throws rn50::Error naming the flag or path: an unknown format, a source without any split,
/// an output folder that already holds a manifest (refused rather than mixed), a write error.
ConvertReport convert_data(const StoreOptions& source, const std::string& output,
                           const std::string& format, int shard_size, std::ostream& log);

}  // namespace rn50::data
