// rn50: quantization-aware training (--qat) — which tensors of a ResNet are fake-quantized, and
// the names their ranges carry in state dicts and checkpoints. The arithmetic is in
// src/core/fake_quant.h; the schedule (src/model/schedule.cpp) applies it.
//
// Fake-quantized (8 bits, symmetric; as DLE's QAT recipe on Paddle, whose quantize pass wraps
// every conv2d and the fc, and as NVIDIA pytorch-quantization's QAT ResNet):
//   weights      every conv's and the fc's, per output channel, from the master weights each
//                forward (no state);
//   activations  per tensor with a moving-average range (state below), each distinct value read
//                by a conv, the fc or the global average pool: the network input, the maxpool
//                output, every ReLU output inside a block, every block output (the join's ReLU,
//                read by the next block's conv1 and downsample and by its residual add) and the
//                last block's output (the average pool's input);
//   residuals    the shortcut input of an add that is a downsample's (conv + BN) output
//                (pytorch-quantization's residual_quantizer); an identity shortcut is a block
//                input and shares that value's quantizer.
// A value read by several layers has one quantizer (one range, one quantized copy), named after
// its first reader. So every tensor rn50's INT8 engine stores in 8 bits has a learnt range, and
// `rn50 export --precision int8` takes those ranges instead of calibrating.
#pragma once

#include <string>
#include <vector>

#include "rn50/graph.h"

namespace rn50::qat {

/// One activation quantizer.
struct ActQuantizer {
  /// Key prefix: "<first reader>._input_quantizer" ("conv1._input_quantizer",
  /// "layer1.0.conv1._input_quantizer", "avgpool._input_quantizer", "fc._input_quantizer") or
  /// "<block>.residual_quantizer" ("layer1.0.residual_quantizer").
  std::string name;
  /// The description layer whose output it quantizes (the input layer for the network input):
  /// also the value id of that tensor in the inference program (rn50/inference.h).
  int layer = 0;
  /// A downsample's output before the residual add: quantized in place (nothing else reads it).
  bool residual = false;
};

/// The activation quantizers of `desc`, in the order of the layers they quantize. Throws
/// rn50::Error naming the layer when an add's shortcut is neither a block input nor a
/// conv + BatchNorm output.
std::vector<ActQuantizer> activation_quantizers(const NetworkDesc& desc);

/// The state-dict keys of a quantizer's range, each f32 [1]: the range amax (x is quantized with
/// step amax / 127), then Paddle's moving-average state and accumulator.
inline std::string amax_key(const ActQuantizer& q) { return q.name + "._amax"; }
inline std::string state_key(const ActQuantizer& q) { return q.name + "._state"; }
inline std::string accum_key(const ActQuantizer& q) { return q.name + "._accum"; }

/// Whether `key` names a QAT range ("..._quantizer._amax" / "._state" / "._accum").
bool is_qat_key(const std::string& key);

}  // namespace rn50::qat
