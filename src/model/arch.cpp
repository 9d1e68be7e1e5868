// rn50: the ResNet family as data (torchvision resnet.py: resnet18/34 use BasicBlock,
// resnet50/101/152 use Bottleneck) and the parameter-kind rules (DLE: weight decay on conv and fc
// weights only).
#include <numeric>

#include "core/check.h"
#include "rn50/graph.h"

namespace rn50 {

ArchSpec arch_from_name(const std::string& name) {
  // Blocks per stage from torchvision.models.resnet (_resnet(...) calls).
  if (name == "resnet18") return {name, false, {2, 2, 2, 2}};
  if (name == "resnet34") return {name, false, {3, 4, 6, 3}};
  if (name == "resnet50") return {name, true, {3, 4, 6, 3}};
  if (name == "resnet101") return {name, true, {3, 4, 23, 3}};
  if (name == "resnet152") return {name, true, {3, 8, 36, 3}};
  RN50_FAIL("unknown architecture '{}' (known: resnet18, resnet34, resnet50, resnet101, "
            "resnet152)",
            name);
}

std::vector<std::string> arch_names() {
  return {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"};
}

bool is_decayed(ParamKind k) { return k == ParamKind::conv_weight || k == ParamKind::fc_weight; }

int64_t ParamInfo::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

}  // namespace rn50
