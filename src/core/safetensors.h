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

#include "rn50/tensor.h"

namespace rn50 {

/// Tensors of a safetensors file, as host tensors (4-D tensors come back in Layout::NCHW, the
/// on-disk row-major order), plus the string metadata.
struct SafeTensorsFile {
  std::map<std::string, Tensor> tensors;
  std::vector<std::string> order;  ///< tensor names in file (offset) order
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` (host tensors of any supported dtype; 4-D NHWC tensors are written in NCHW
/// row-major order, as PyTorch expects) atomically to `path`. Throws rn50::Error on I/O errors
/// or a duplicate name.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file. Supports dtypes F32, F16, BF16, F64, U8, I32, I64. Throws
/// rn50::Error naming the file when it is truncated, its header is not valid JSON, an entry's
/// offsets are out of range, or a dtype is unsupported.
SafeTensorsFile load_safetensors(const std::string& path);

}  // namespace rn50
