// rn50: `rn50 predict`: classify image files with trained weights or an exported model.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "rn50/error.h"

namespace rn50 {

/// `rn50 predict`: classify images with weights from a safetensors file.
struct PredictConfig {
  /// --from-pretrained-params: safetensors with torchvision keys; or
  std::string weights;
  /// --model: an rn50 inference model folder (rn50 export), which also gives the class names
  /// and the resize/crop sizes. Exactly one of the two.
  std::string model_dir;
  /// --arch: architecture; empty = inferred from the file's keys (bottleneck / blocks per stage).
  std::string arch;
  /// --num-of-class: 0 = fc.weight's first dimension in the file.
  int num_classes = 0;
  /// --classes: TSV "index<TAB>synset<TAB>name" with a header line (shared/data/
  /// imagenet1k_classes.tsv); empty = the class list of a state.json next to the weights, if any.
  std::string classes_tsv;
  /// --json: one JSON object per image instead of text.
  bool json = false;
  /// --resize-short / --crop-size: eval transform (resize shorter side, center crop), pixels;
  /// 0 = the model folder's, else 256 / 224.
  int resize_short = 0;
  int crop_size = 0;
  /// --top-k: how many classes per image (default 5).
  int top_k = 5;
  /// --device: as Config::device.
  std::string device = "auto";
  /// --precision: the engine's (EngineOptions::precision); empty = the precision a --model
  /// folder was exported for, else fp32.
  std::string precision;
  /// Image files (positional).
  std::vector<std::string> images;
};

/// Runs predict, writing results to `out` and errors to `err`. An unreadable image is reported
/// on `err` by name and the others are still classified; returns 1 if any image failed or on an
/// rn50::Error, else 0.
int run_predict(const PredictConfig& cfg, std::ostream& out, std::ostream& err);

}  // namespace rn50
