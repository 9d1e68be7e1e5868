// rn50: the network description — the ResNet architecture table expanded into an ordered list of
// layers (conv, batchnorm, relu, add, maxpool, global average pool, fc) with torchvision's names,
// their inputs, attributes, parameters and running buffers.
//
// It is the one place the topology lives. Everything that needs the network walks it:
//   training        src/model/schedule.cpp fuses conv+bn(+relu) and add+relu, and derives the
//                   forward order, the activation and gradient memory plan, the backward order
//                   and the gradient-ready order from it;
//   initialisation  src/model/resnet_init.cpp (kaiming per conv, zero-init of residual BNs);
//   state dicts     parameter and buffer names, shapes and torchvision's state_dict order;
//   and, as they are built, inference (BN folding), ONNX export, fake quantisation and 2:4
//   sparsity masks. A new layer kind is added here (LayerKind, describe()), then taught to each
//   walker (docs/architecture.md lists them): each switches over every kind, with no default,
//   and the build's -Werror=switch fails at any walker that does not list the new one.
//
// Architecture (torchvision/models/resnet.py, DLE resnet.py): stem conv 7x7/2 + BN + ReLU +
// maxpool 3x3/2; four stages of blocks (widths 64, 128, 256, 512; BasicBlock expansion 1,
// Bottleneck 4) with stride 2 on the first block of stages 2-4 — v1.5: on the Bottleneck's 3x3
// conv (conv2), not its first 1x1; a downsample (1x1 conv + BN) on the shortcut when the shape
// changes; global average pool; fc.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rn50/tensor.h"

namespace rn50 {

/// Architecture as data (torchvision resnet.py / DLE resnet.py): block type, blocks per stage.
/// Stage widths are 64,128,256,512; bottleneck expansion 4, basic 1. v1.5: the stride-2 of a
/// downsampling bottleneck sits on its 3x3 conv (conv2), as torchvision.
struct ArchSpec {
  std::string name;          ///< "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"
  bool bottleneck = true;    ///< false: BasicBlock (two 3x3 convs)
  std::array<int, 4> layers{3, 4, 6, 3};
  int expansion() const { return bottleneck ? 4 : 1; }
};
/// Looks up an architecture by name; throws rn50::Error listing the known names.
ArchSpec arch_from_name(const std::string& name);
/// The names arch_from_name knows, in order of depth.
std::vector<std::string> arch_names();

/// What a parameter is: decides weight decay (conv and fc weights only, DLE) and init.
enum class ParamKind : uint8_t { conv_weight, bn_weight, bn_bias, fc_weight, fc_bias };
/// Whether SGD applies weight decay to a parameter of this kind (DLE: conv and fc weights only;
/// not BN gamma/beta, not biases).
bool is_decayed(ParamKind k);

/// One named parameter. name: torchvision's state_dict key; shape: torchvision's (conv weights
/// (K,C,R,S) = OIHW, fc weight (classes, C), BN and fc bias vectors); f32.
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  ParamKind kind;
  /// Elements from the start of the parameter slab: every decayed parameter first (torchvision
  /// order among them), then the others, so weight decay covers the prefix [0, decay_count).
  int64_t offset = 0;
  int64_t numel() const;
};

/// One running-statistics buffer: running_mean / running_var f32 (C), num_batches_tracked i64
/// 0-d, as torch.nn.BatchNorm2d.
struct BufferInfo {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
};

enum class LayerKind : uint8_t { input, conv, batchnorm, relu, add, maxpool, global_avgpool, fc };
/// "input", "conv", "batchnorm", "relu", "add", "maxpool", "global_avgpool", "fc".
const char* layer_kind_name(LayerKind k);

/// nn.Conv2d without bias, groups 1, dilation 1 (every ResNet conv).
struct ConvSpec {
  int64_t in_channels = 0, out_channels = 0;
  int kernel = 1, stride = 1, pad = 0;
};

/// nn.MaxPool2d (ResNet's stem: kernel 3, stride 2, pad 1).
struct PoolSpec {
  int kernel = 1, stride = 1, pad = 0;
};

/// One layer. Its output is a single tensor, referred to by the layer's index.
struct Layer {
  LayerKind kind = LayerKind::input;
  /// Module name: torchvision's for modules with parameters ("conv1", "layer1.0.bn2",
  /// "layer2.0.downsample.0", "fc") and for "maxpool", "avgpool", "relu" (the stem's). A block's
  /// ReLUs are "<block>.reluK", K = the K-th use of the block's relu module in torchvision's
  /// forward (Bottleneck: relu1 after bn1, relu2 after bn2, relu3 after the add; BasicBlock:
  /// relu1 after bn1, relu2 after the add); its residual add is "<block>.add"; the input
  /// "input".
  std::string name;
  /// Indices of the layers whose outputs this layer reads: none for input; add: (branch,
  /// shortcut); one for every other kind.
  std::vector<int> inputs;
  int64_t channels = 0;  ///< output channels (fc: classes; input: NetworkDesc::input_channels)
  ConvSpec conv;         ///< kind == conv
  PoolSpec pool;         ///< kind == maxpool
  /// Indices into NetworkDesc::params: conv {weight}; batchnorm {weight (gamma), bias (beta)};
  /// fc {weight, bias}; none otherwise.
  std::vector<int> params;
  /// batchnorm: indices into NetworkDesc::buffers {running_mean, running_var,
  /// num_batches_tracked}; none otherwise.
  std::vector<int> buffers;
  /// batchnorm: the last BN of a residual branch (bn3 / BasicBlock bn2): the one that
  /// --zero-init-residual initialises with gamma = 0.
  bool residual_last_bn = false;
};

/// A state_dict entry in torchvision order: a parameter or a buffer, by index.
struct StateDictEntry {
  bool is_param;
  int index;
};

/// The whole network.
struct NetworkDesc {
  ArchSpec arch;
  int num_classes = 0;
  int64_t input_channels = 3;    ///< channels of the network input and of its layer (layers[0])
  int64_t feature_channels = 0;  ///< channels into the fc (2048 for ResNet-50)
  /// Topological order = torchvision's forward order: layers[0] is the input, the last is fc.
  /// A Bottleneck's layers: conv1 bn1 relu1 conv2 bn2 relu2 conv3 bn3 [downsample.0 .1] add relu3.
  std::vector<Layer> layers;
  std::vector<ParamInfo> params;    ///< torchvision named_parameters() order
  std::vector<BufferInfo> buffers;  ///< torchvision named_buffers() order
  std::vector<StateDictEntry> state_dict_order;  ///< torchvision state_dict() order
  int64_t num_params = 0;   ///< elements of the parameter slab
  int64_t decay_count = 0;  ///< elements of its decayed prefix

  /// For each layer, the layers that read its output, in order.
  std::vector<std::vector<int>> consumers() const;
  /// Index of the layer named `name`; throws rn50::Error naming it when there is none.
  int layer(const std::string& name) const;
};

/// Expands `arch` with a `num_classes`-way fc into its description. Throws rn50::Error when
/// num_classes < 1 or a stage has no blocks.
/// input_channels: 3 (RGB), or 4 (DLE --image-shape 4,H,W: RGB plus a zero fourth channel, the
/// NHWC alignment of DLE's Paddle/MXNet inputs): the input layer's channels and the stem conv's
/// input channels.
NetworkDesc describe(const ArchSpec& arch, int num_classes, int64_t input_channels = 3);

/// The output shape of every layer (indexed as desc.layers) for an (n, desc.input_channels, h, w)
/// input, which is the input layer's shape: (N, C, H, W) up to the last block, (N, C) for the
/// global average pool and the fc. Output sizes follow torch: (in + 2 pad - kernel) / stride + 1.
/// Throws rn50::Error naming the architecture when the input is too small for a layer.
std::vector<std::vector<int64_t>> layer_shapes(const NetworkDesc& desc, int64_t n, int64_t h,
                                               int64_t w);

/// Floating-point operations of one forward pass of one (desc.input_channels, h, w) image: 2 x
/// the multiply-adds of every conv and the fc (BN, ReLU, add and pooling are not counted, as in
/// torchvision's published "GFLOPS", which are multiply-adds: 4.09 G for resnet50 at 224). With
/// 4 input channels the stem conv's zero channel is counted (the 4-channel conv computes it).
/// Training costs about 3x this (forward, backward-data, backward-weights).
/// The count comes from the description, so it holds for every architecture, input size and
/// class count (tests/test_model_flops.cpp checks it against torchvision's modules counted by
/// forward hooks). Throws rn50::Error as layer_shapes() when the input is too small.
double forward_flops(const NetworkDesc& desc, int64_t h, int64_t w);

/// Floating-point operations of one training step of one image: 3 x forward_flops (the
/// forward, and each convolution and fc again for the gradient of its input and of its weights:
/// the usual convention; the stem conv's input gradient, which rn50 does not compute, is
/// counted too, 1% of a ResNet-50 step).
/// The roofline's GFLOP per image of the training benchmarks (rn50/roofline.h).
double train_flops(const NetworkDesc& desc, int64_t h, int64_t w);

}  // namespace rn50
