// rn50: weights in torchvision's format (safetensors files keyed by torchvision's state_dict
// names, as `torch.save`d models converted with safetensors.torch.save_file) loaded into a ResNet.
#pragma once

#include <map>
#include <string>

#include "core/safetensors.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/tensor.h"

namespace rn50 {

/// The weights file --from-pretrained-params `path` names (`flag` names it in messages): `path`
/// itself when it is a file; for a folder (an rn50 epoch folder, or where DLE keeps a run's
/// files) the weights file its state.json names (--model-prefix P: P.safetensors), else
/// model.safetensors, else its only *.safetensors that is not an optimizer state; for a path
/// that does not exist, <path>.safetensors (DLE Paddle's path-prefix spelling, <dir>/<prefix>
/// for <prefix>.pdparams). A torch or Paddle file (also <path>.pdparams) is refused with the
/// `rn50 convert-weights` command that converts it. Throws rn50::Error naming the flag, the
/// path and the files expected when there is none.
std::string weights_file(const std::string& path, const std::string& flag);

/// Reads the weights file `file` (weights_file's answer) as load_safetensors does, checking it
/// against the digest rn50 recorded beside it when there is one: an rn50 checkpoint epoch
/// folder's state.json ("files") or an exported model's model.json ("weights_digest"). Throws
/// rn50::Error naming the file when it is damaged (size or CRC-32C differ), or as
/// load_safetensors.
SafeTensorsFile load_weights_file(const std::string& file);

/// Loads torchvision-keyed weights (e.g. resnet50().state_dict() saved as safetensors) into
/// `model`: every parameter and running_mean/var must be present with the model's shape
/// (num_batches_tracked entries are ignored; F64/F16/BF16 are converted to F32; unexpected keys
/// are listed on stderr and ignored). A classifier of another class count (fc.weight [N, F] with
/// the model's F, fc.bias [N]) is not loaded: the model keeps its own initialisation of fc
/// (fine-tuning, as torchvision/timm users replace model.fc and DLE Paddle's load_params skips
/// parameters of another shape), and the answer says so ("fc: 1000 -> 10 classes,
/// re-initialised"; "" when every tensor was loaded). With `strict_classes` (--strict-pretrained;
/// evaluation, where a fresh classifier would measure nothing) that throws instead. Any other
/// shape mismatch throws naming the key, both shapes and, for fc.*, the --num-of-class value
/// that matches the file. `path` may be a folder or a DLE-style path prefix (weights_file).
std::string load_pretrained_params(const std::string& path, ResNet& model,
                                   bool strict_classes = false);
/// The same with the file already read (`path` names it in messages).
std::string load_pretrained_params(const SafeTensorsFile& file, const std::string& path,
                                   ResNet& model, bool strict_classes = false);

/// The class count of a torchvision weights file read from `path`: `num_classes` when > 0,
/// else the rows of its fc.weight. Throws naming the path when fc.weight is missing or not 2-D.
int classes_of(const SafeTensorsFile& file, const std::string& path, int num_classes);

/// The file's tensors as f32 host tensors keyed by torchvision names (num_batches_tracked left
/// out), for fold_network (rn50/inference.h). A 4-channel conv1.weight (--image-shape 4,H,W)
/// comes back with 3 (with_input_channels). Throws naming the file when its fc.weight has
/// another class count than `num_classes`, with the --num-of-class value that matches it.
std::map<std::string, Tensor> state_dict_f32(const SafeTensorsFile& file, const std::string& path,
                                             int num_classes);

/// Host f32 copy of a host tensor of dtype f32/f64/f16/bf16 (names `what` in errors).
Tensor to_f32(const Tensor& t, const std::string& what);

/// Architecture name whose layout matches the keys of a torchvision state dict (bottleneck iff
/// layer1.0.conv3.weight exists; blocks per stage counted from layerS.I.conv1.weight). Throws
/// naming `what` when no known architecture matches.
std::string infer_arch(const std::map<std::string, Tensor>& sd, const std::string& what);

/// The stem conv weight `w` (host f32 [K, 3 or 4, R, S], either layout) with `channels` (3 or 4)
/// input channels, NCHW (OIHW): 3 -> 4 appends a zero fourth slice, 4 -> 3 drops it (exact for
/// the network's output, since the fourth input channel of --image-shape 4,H,W is always zero),
/// equal counts copy. Throws rn50::Error for other shapes.
Tensor with_input_channels(const Tensor& w, int64_t channels);

/// Host copy of a backend tensor.
Tensor to_host(Backend& backend, const Tensor& t);

}  // namespace rn50
