// The network description (rn50/graph.h): layer counts and order, torchvision names, v1.5
// stride placement, inputs of adds, parameters per layer, shapes, the published FLOP count, and
// the training schedule's memory plan derived from it (3 gradient slots, 2 scratch slots).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "rn50/backend.h"
#include "rn50/graph.h"
#include "rn50/model.h"

namespace rn50 {
namespace {

std::map<LayerKind, int> count_kinds(const NetworkDesc& d) {
  std::map<LayerKind, int> c;
  for (const Layer& l : d.layers) ++c[l.kind];
  return c;
}

TEST(NetworkDesc, Resnet50LayersAndNames) {
  const NetworkDesc d = describe(arch_from_name("resnet50"), 1000);
  auto c = count_kinds(d);
  EXPECT_EQ(c[LayerKind::input], 1);
  EXPECT_EQ(c[LayerKind::conv], 53);  // 1 stem + 16 blocks x 3 + 4 downsample
  EXPECT_EQ(c[LayerKind::batchnorm], 53);
  EXPECT_EQ(c[LayerKind::add], 16);
  EXPECT_EQ(c[LayerKind::relu], 1 + 16 * 3);
  EXPECT_EQ(c[LayerKind::maxpool], 1);
  EXPECT_EQ(c[LayerKind::global_avgpool], 1);
  EXPECT_EQ(c[LayerKind::fc], 1);
  EXPECT_EQ(d.layers.front().kind, LayerKind::input);
  EXPECT_EQ(d.layers.back().name, "fc");
  EXPECT_EQ(d.feature_channels, 2048);
  // 25,557,032 parameters (torchvision resnet50), decayed prefix = conv + fc weights.
  EXPECT_EQ(d.num_params, 25557032);
  int64_t decayed = 0;
  for (const ParamInfo& p : d.params)
    if (is_decayed(p.kind)) decayed += p.numel();
  EXPECT_EQ(d.decay_count, decayed);

  // A downsampling bottleneck, in torchvision's forward order, v1.5 stride on conv2.
  const int first = d.layer("layer2.0.conv1");
  const char* expect[] = {"layer2.0.conv1", "layer2.0.bn1", "layer2.0.relu1", "layer2.0.conv2",
                          "layer2.0.bn2", "layer2.0.relu2", "layer2.0.conv3", "layer2.0.bn3",
                          "layer2.0.downsample.0", "layer2.0.downsample.1", "layer2.0.add",
                          "layer2.0.relu3"};
  for (int k = 0; k < 12; ++k) EXPECT_EQ(d.layers[static_cast<size_t>(first + k)].name, expect[k]);
  EXPECT_EQ(d.layers[static_cast<size_t>(d.layer("layer2.0.conv1"))].conv.stride, 1);
  EXPECT_EQ(d.layers[static_cast<size_t>(d.layer("layer2.0.conv2"))].conv.stride, 2);
  EXPECT_EQ(d.layers[static_cast<size_t>(d.layer("layer2.0.downsample.0"))].conv.stride, 2);
  const Layer& add = d.layers[static_cast<size_t>(d.layer("layer2.0.add"))];
  ASSERT_EQ(add.inputs.size(), 2u);
  EXPECT_EQ(d.layers[static_cast<size_t>(add.inputs[0])].name, "layer2.0.bn3");
  EXPECT_EQ(d.layers[static_cast<size_t>(add.inputs[1])].name, "layer2.0.downsample.1");
  EXPECT_TRUE(d.layers[static_cast<size_t>(d.layer("layer2.0.bn3"))].residual_last_bn);
  EXPECT_FALSE(d.layers[static_cast<size_t>(d.layer("layer2.0.bn2"))].residual_last_bn);
  // An identity block: the add reads the block input (the previous block's relu3).
  const Layer& add1 = d.layers[static_cast<size_t>(d.layer("layer2.1.add"))];
  EXPECT_EQ(d.layers[static_cast<size_t>(add1.inputs[1])].name, "layer2.0.relu3");
  // Its input feeds both the branch and the add.
  const auto cons = d.consumers();
  std::set<std::string> readers;
  for (int r : cons[static_cast<size_t>(d.layer("layer2.0.relu3"))])
    readers.insert(d.layers[static_cast<size_t>(r)].name);
  EXPECT_EQ(readers, (std::set<std::string>{"layer2.1.conv1", "layer2.1.add"}));

  // Each parameter belongs to exactly one layer, named after it.
  std::vector<int> owner(d.params.size(), -1);
  for (size_t i = 0; i < d.layers.size(); ++i)
    for (int p : d.layers[i].params) {
      EXPECT_EQ(owner[static_cast<size_t>(p)], -1) << d.params[static_cast<size_t>(p)].name;
      owner[static_cast<size_t>(p)] = static_cast<int>(i);
      EXPECT_EQ(d.params[static_cast<size_t>(p)].name.rfind(d.layers[i].name + ".", 0), 0u);
    }
  for (size_t p = 0; p < owner.size(); ++p) EXPECT_GE(owner[p], 0) << d.params[p].name;
  // 3 buffers per BN, named after it.
  for (const Layer& l : d.layers)
    if (l.kind == LayerKind::batchnorm) {
      ASSERT_EQ(l.buffers.size(), 3u);
      EXPECT_EQ(d.buffers[static_cast<size_t>(l.buffers[2])].name,
                l.name + ".num_batches_tracked");
    }
}

TEST(NetworkDesc, BasicBlockNames) {
  const NetworkDesc d = describe(arch_from_name("resnet18"), 10);
  const int first = d.layer("layer3.0.conv1");
  const char* expect[] = {"layer3.0.conv1", "layer3.0.bn1", "layer3.0.relu1", "layer3.0.conv2",
                          "layer3.0.bn2", "layer3.0.downsample.0", "layer3.0.downsample.1",
                          "layer3.0.add", "layer3.0.relu2"};
  for (int k = 0; k < 9; ++k) EXPECT_EQ(d.layers[static_cast<size_t>(first + k)].name, expect[k]);
  EXPECT_EQ(d.layers[static_cast<size_t>(d.layer("layer3.0.conv1"))].conv.stride, 2);
  EXPECT_EQ(count_kinds(d)[LayerKind::conv], 20);
  EXPECT_EQ(d.num_params, 11181642);  // torchvision resnet18 with a 10-way fc
  EXPECT_THROW(d.layer("layer9.0.conv1"), Error);
}

TEST(NetworkDesc, ShapesAndFlops) {
  const NetworkDesc d = describe(arch_from_name("resnet50"), 1000);
  const auto s = layer_shapes(d, 8, 224, 224);
  EXPECT_EQ(s[static_cast<size_t>(d.layer("conv1"))], (std::vector<int64_t>{8, 64, 112, 112}));
  EXPECT_EQ(s[static_cast<size_t>(d.layer("maxpool"))], (std::vector<int64_t>{8, 64, 56, 56}));
  EXPECT_EQ(s[static_cast<size_t>(d.layer("layer1.2.relu3"))],
            (std::vector<int64_t>{8, 256, 56, 56}));
  EXPECT_EQ(s[static_cast<size_t>(d.layer("layer2.0.conv2"))],
            (std::vector<int64_t>{8, 128, 28, 28}));
  EXPECT_EQ(s[static_cast<size_t>(d.layer("layer4.2.relu3"))],
            (std::vector<int64_t>{8, 2048, 7, 7}));
  EXPECT_EQ(s[static_cast<size_t>(d.layer("avgpool"))], (std::vector<int64_t>{8, 2048}));
  EXPECT_EQ(s.back(), (std::vector<int64_t>{8, 1000}));
  // Odd sizes follow torch's floor rule: 225 -> 113 -> 57 -> ... -> 8.
  const auto o = layer_shapes(d, 1, 225, 161);
  EXPECT_EQ(o[static_cast<size_t>(d.layer("conv1"))], (std::vector<int64_t>{1, 64, 113, 81}));
  EXPECT_EQ(o[static_cast<size_t>(d.layer("layer4.2.relu3"))],
            (std::vector<int64_t>{1, 2048, 8, 6}));
  // torchvision's published resnet50 cost: 4.09 GFLOPS (multiply-adds) at 224x224.
  EXPECT_NEAR(forward_flops(d, 224, 224) / 2, 4.09e9, 0.01e9);
  EXPECT_NEAR(forward_flops(describe(arch_from_name("resnet18"), 1000), 224, 224) / 2, 1.81e9,
              0.01e9);
  // Tiny inputs run as in torch (every window is padded enough): 16x16 ends at 1x1.
  EXPECT_EQ(layer_shapes(d, 1, 16, 16)[static_cast<size_t>(d.layer("layer4.2.relu3"))],
            (std::vector<int64_t>{1, 2048, 1, 1}));
  EXPECT_THROW(layer_shapes(d, 1, 0, 16), Error);
  EXPECT_THROW(describe(arch_from_name("resnet50"), 0), Error);
}

// The input layer carries the description's input channels, and layer_shapes gives them.
TEST(NetworkDesc, InputChannels) {
  const NetworkDesc d3 = describe(arch_from_name("resnet50"), 1000);
  const NetworkDesc d4 = describe(arch_from_name("resnet50"), 1000, 4);
  EXPECT_EQ(d3.layers.front().channels, 3);
  EXPECT_EQ(d4.layers.front().channels, 4);
  EXPECT_EQ(d4.layers[static_cast<size_t>(d4.layer("conv1"))].conv.in_channels, 4);
  EXPECT_EQ(layer_shapes(d3, 2, 64, 48).front(), (std::vector<int64_t>{2, 3, 64, 48}));
  EXPECT_EQ(layer_shapes(d4, 2, 64, 48).front(), (std::vector<int64_t>{2, 4, 64, 48}));
  EXPECT_EQ(layer_shapes(d4, 2, 64, 48).back(), layer_shapes(d3, 2, 64, 48).back());
  // The stem conv's zero channel is counted: 64 x 7 x 7 multiply-adds at each 112 x 112 output.
  EXPECT_DOUBLE_EQ(forward_flops(d4, 224, 224) - forward_flops(d3, 224, 224),
                   2.0 * 64 * 7 * 7 * 112 * 112);
  EXPECT_THROW(describe(arch_from_name("resnet50"), 1000, 5), Error);
}

// The training schedule walked from the description needs 3 gradient slots and 2 scratch slots
// for every architecture (the memory of the hand-written schedule it replaced).
TEST(NetworkDesc, ScheduleMemoryPlan) {
  auto be = make_backend("ref");
  for (const std::string& name : arch_names()) {
    ModelOptions mo;
    mo.num_classes = 10;
    ResNet m(*be, arch_from_name(name), mo);
    const ResNet::MemoryPlan p = m.memory_plan();
    EXPECT_EQ(p.grad_slots, 3) << name;
    EXPECT_EQ(p.scratch_slots, 2) << name;
    EXPECT_EQ(p.activation_bytes, 0) << name << ": nothing planned before the first forward";
    EXPECT_EQ(m.grad_ready_order().size(), m.params().size()) << name;
  }
}

}  // namespace
}  // namespace rn50
