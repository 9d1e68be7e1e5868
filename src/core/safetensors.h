// rn50: safetensors reader/writer (the format of Hugging Face safetensors):
//   8-byte little-endian u64 header length L | L bytes of JSON header | raw little-endian data.
//   header: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"key": "string value"}}; offsets are relative to the data section.
// Used for checkpoints (torchvision state_dict keys) and for weights written by PyTorch.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rn50/tensor.h"

namespace rn50 {

/// Size and CRC-32C (core/crc32c.h) of a file's bytes as rn50 wrote it. safetensors carries no
/// checksum, so the file that references a tensor file records its digest (state.json "files",
/// model.json "weights_digest") and the reader checks it: a truncated or bit-flipped file is
/// named as damaged instead of loading wrong weights.
struct FileDigest {
  int64_t bytes = -1;  ///< -1: nothing recorded (files from elsewhere, older rn50 versions)
  uint32_t crc32c = 0;
  bool known() const { return bytes >= 0; }
  /// {"bytes": N, "crc32c": "8 hex digits"}.
  nlohmann::json to_json() const;
  /// The inverse of to_json; throws rn50::Error naming `what` for a malformed entry.
  static FileDigest from_json(const nlohmann::json& j, const std::string& what);
};

/// Tensors of a safetensors file, as host tensors (4-D tensors come back in Layout::NCHW, the
/// on-disk row-major order), plus the string metadata.
struct SafeTensorsFile {
  std::map<std::string, Tensor> tensors;
  std::vector<std::string> order;  ///< tensor names in file (offset) order
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` (host tensors of any supported dtype; 4-D NHWC tensors are written in NCHW
/// row-major order, as PyTorch expects) atomically to `path` and returns the digest of the
/// bytes written. Throws rn50::Error on I/O errors (a full disk: the path and the reason; no
/// partial file is left) or a duplicate name.
FileDigest save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file. Supports dtypes F32, F16, BF16, F64, U8, I32, I64. Throws
/// rn50::Error naming the file when it is truncated, its header is not valid JSON, an entry's
/// offsets are out of range, or a dtype is unsupported; and, when `expected` is known, when
/// the file's size or CRC-32C differs from it (`recorded_in` names the file that recorded it).
SafeTensorsFile load_safetensors(const std::string& path, const FileDigest& expected = {},
                                 const std::string& recorded_in = "");

}  // namespace rn50
