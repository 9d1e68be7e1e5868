// rn50: weights from other frameworks' files (torchvision .pth, DLE PyTorch checkpoints, DLE
// Paddle .pdparams) converted to rn50's format, a safetensors file with torchvision's keys.
#pragma once

#include <ostream>
#include <string>

namespace rn50 {

/// What `rn50 convert-weights` reads and writes.
struct ConvertWeightsOptions {
  std::string source;   ///< the file to convert (.pth, .pth.tar, .pdparams)
  std::string output;   ///< the safetensors file to write (written atomically)
  std::string from = "auto";  ///< auto | torchvision | dle-pytorch | paddle
  std::string arch = "auto";  ///< auto (from the block counts) or resnet18..resnet152
  bool ema = false;  ///< DLE PyTorch: the checkpoint's state_dict_ema instead of its state_dict
  /// The stem's input channels to write (--image-shape C,H,W): 3 drops a 4-channel stem's fourth
  /// channel (DLE Paddle's default --image-shape 4,224,224; exact, its fourth input channel is
  /// zero), 4 keeps it (a 3-channel stem gets a zero fourth channel).
  int input_channels = 3;
};

/// Converts `o.source` to `o.output` with tools/convert_weights.py: Python's pickle is the
/// well-kept reader of these formats (torch.load(weights_only=True) for torch files, a restricted
/// unpickler with numpy for Paddle's). The interpreter is $RN50_PYTHON, else /usr/bin/python3
/// (Debian's python3-torch and python3-numpy), else python3; the script is $RN50_CONVERT_SCRIPT,
/// else tools/convert_weights.py of the source tree rn50 was built from. The script's summary
/// line goes to `log`. Throws rn50::Error with the script's own message (missing, extra and
/// wrong-shape keys named) when it fails, and when the script or the interpreter is missing.
void convert_weights(const ConvertWeightsOptions& o, std::ostream& log);

/// When `path` holds a PyTorch zip/pickle file or a Paddle .pdparams rather than safetensors:
/// the message telling which command converts it (else ""). `flag` names the flag in it.
std::string foreign_weights_hint(const std::string& path, const std::string& flag);

}  // namespace rn50
