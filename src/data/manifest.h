// rn50 data: the manifest rn50 convert-data writes beside its shards (manifest.json):
//   {"format": "webdataset" | "tfrecord", "classes": [...],
//    "splits": {"train": {"samples": N, "shards": [{"file": F, "samples": n}, ...]}, "val": ...}}
// Readers take the class names from it (a shard holds labels only).
#pragma once

#include <string>
#include <vector>

namespace rn50::data {

inline constexpr const char* kManifestFile = "manifest.json";

/// The class names of the manifest.json in `dir` (or in its parent, for a split folder), or
/// none when there is no manifest. Throws rn50::Error naming the file when it is not a
/// manifest.
std::vector<std::string> manifest_classes(const std::string& dir);

}  // namespace rn50::data
