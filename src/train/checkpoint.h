// rn50: checkpoints and pretrained weights.
//
// A checkpoint is a folder <checkpoint-dir>/<arch>/<epoch>/ (epoch 0-based, the epoch just
// finished) holding
//   model.safetensors      model.state_dict(): torchvision keys, F32 + I64 num_batches_tracked
//   optimizer.safetensors  SGD momentum buffer of each parameter, keyed by the parameter's name
//   state.json             epoch, global step, lr of the next step, steps per epoch, seed, class
//                          list, the resolved config, rn50 version, and the two file names
// With --model-prefix P (DLE Paddle's flag) the weights are P.safetensors and the optimizer state
// P.optimizer.safetensors; state.json records the names ("model_file", "optimizer_file") and
// loading reads them from there (a state.json without them: the default names above).
// Each file is written atomically (temp file + rename) and state.json last, after removing any
// stale one first: a folder holding state.json is complete.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "model/weights.h"
#include "train/optimizer.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/tensor.h"

namespace rn50 {

/// The resumable training state (state.json).
struct CheckpointState {
  int epoch = -1;               ///< 0-based index of the epoch just finished
  int64_t global_step = 0;      ///< optimiser steps done so far
  double next_lr = 0;           ///< lr of step `global_step` (informational)
  int64_t steps_per_epoch = 0;
  uint64_t seed = 0;
  std::string arch;
  std::vector<std::string> classes;
  nlohmann::ordered_json config;  ///< the resolved Config as JSON
  std::string version;
  /// AMP fp16 dynamic loss scaling at the end of the epoch (0: not an fp16 run); a resumed fp16
  /// run continues from this scale instead of --scale-loss.
  double loss_scale = 0;
  int64_t skipped_steps = 0;  ///< steps skipped for inf/NaN gradients so far
  std::string model_file = "model.safetensors";          ///< weights file in the epoch folder
  std::string optimizer_file = "optimizer.safetensors";  ///< optimizer state file
  /// Size and CRC-32C of each of the two files as written (state.json "files"), checked by
  /// load_checkpoint; empty for checkpoints of rn50 versions that did not record them.
  std::map<std::string, FileDigest> files;

  nlohmann::ordered_json to_json() const;
  /// Throws rn50::Error naming `what` (the file) when a field is missing or has the wrong type.
  static CheckpointState from_json(const nlohmann::json& j, const std::string& what);
};

/// Default names of the files inside an epoch folder (--model-prefix model).
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";

/// The weights and optimizer file names of --model-prefix `prefix`: "model" gives kModelFile and
/// kOptimizerFile, any other P gives P.safetensors and P.optimizer.safetensors.
std::pair<std::string, std::string> checkpoint_file_names(const std::string& prefix);

/// Writes a checkpoint of `model` and `optimizer` (SgdOptimizer::state_dict) into `dir`
/// (created if missing). Throws rn50::Error on I/O errors.
void save_checkpoint(const std::string& dir, ResNet& model, SgdOptimizer& optimizer,
                     const CheckpointState& state);

/// Resolves --from-checkpoint `from` and --last-epoch-of-checkpoint `last_epoch` ("auto" or an
/// integer) to an epoch folder: `from` itself when it holds state.json, else <epochs>/<N>,
/// with "auto" = the largest integer-named sub-folder holding state.json. <epochs> is `from`
/// when it holds epoch folders (<checkpoint-dir>/<arch>), else its sub-folder `arch`, or the
/// only sub-folder holding epoch folders (`from` is the --checkpoint-dir given to training;
/// `arch` empty = whichever it is). Throws naming the flag when nothing matches, or when
/// `from` holds several architectures' checkpoints and `arch` picks none.
/// `none_ok` (a training run's "auto": one command line for the first start and every requeue)
/// returns "" instead of throwing when "auto" finds no complete epoch folder in an existing
/// `from` (a job killed before its first checkpoint); an explicit epoch still throws.
std::string resolve_checkpoint_dir(const std::string& from, const std::string& last_epoch,
                                   const std::string& arch = "", bool none_ok = false);

/// Reads state.json of an epoch folder.
CheckpointState read_checkpoint_state(const std::string& dir);

/// Loads a checkpoint folder into `model` (params, running stats, num_batches_tracked) and
/// `optimizer` (momentum); returns its state. Throws naming the file and key on a missing key
/// or shape mismatch.
CheckpointState load_checkpoint(const std::string& dir, ResNet& model, SgdOptimizer& optimizer);

}  // namespace rn50
