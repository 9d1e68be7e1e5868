// rn50: the activation quantizers of a QAT ResNet (see qat.h).
#include "model/qat.h"

#include <algorithm>
#include <map>

#include "core/check.h"

namespace rn50::qat {

std::vector<ActQuantizer> activation_quantizers(const NetworkDesc& d) {
  std::vector<ActQuantizer> out;
  std::map<int, size_t> of_layer;  // quantized layer -> index into out
  auto want = [&](int layer, std::string name, bool residual) {
    if (of_layer.count(layer)) return;
    of_layer.emplace(layer, out.size());
    out.push_back({std::move(name), layer, residual});
  };
  for (const Layer& l : d.layers) {
    switch (l.kind) {
      case LayerKind::conv:
      case LayerKind::fc:
      case LayerKind::global_avgpool:
        want(l.inputs.at(0), l.name + "._input_quantizer", false);
        break;
      case LayerKind::add: {
        const int sc = l.inputs.at(1);
        const Layer& s = d.layers.at(static_cast<size_t>(sc));
        if (of_layer.count(sc)) break;  // an identity shortcut: the block input's quantizer
        RN50_CHECK(s.kind == LayerKind::batchnorm,
                   "QAT: the shortcut '{}' of add '{}' is neither a block input nor a conv + "
                   "BatchNorm output",
                   s.name, l.name);
        std::string block = l.name;
        if (block.size() >= 3 && block.compare(block.size() - 3, 3, "add") == 0)
          block.resize(block.size() - 3);
        else
          block += ".";
        want(sc, block + "residual_quantizer", true);
        break;
      }
      case LayerKind::input:
      case LayerKind::batchnorm:
      case LayerKind::relu:
      case LayerKind::maxpool:
        // No quantizer on their inputs: the input layer has none, BN and ReLU run inside the
        // conv's unit, and the max pool's output is quantized instead (max commutes with it).
        break;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ActQuantizer& a, const ActQuantizer& b) { return a.layer < b.layer; });
  return out;
}

bool is_qat_key(const std::string& key) {
  for (const char* suffix : {"_quantizer._amax", "_quantizer._state", "_quantizer._accum"}) {
    const std::string s(suffix);
    if (key.size() > s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

}  // namespace rn50::qat
