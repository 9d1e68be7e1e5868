// rn50: describe() — the architecture table expanded into layers, in torchvision's module and
// forward order (torchvision/models/resnet.py: ResNet.__init__, _make_layer, BasicBlock,
// Bottleneck), with the parameter slab layout (decayed parameters first); layer_shapes().
#include <fmt/format.h>

#include <utility>

#include "core/check.h"
#include "rn50/graph.h"

namespace rn50 {

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::input: return "input";
    case LayerKind::conv: return "conv";
    case LayerKind::batchnorm: return "batchnorm";
    case LayerKind::relu: return "relu";
    case LayerKind::add: return "add";
    case LayerKind::maxpool: return "maxpool";
    case LayerKind::global_avgpool: return "global_avgpool";
    case LayerKind::fc: return "fc";
  }
  return "?";
}

namespace {

/// Appends layers, parameters and buffers in torchvision's order.
class Builder {
 public:
  explicit Builder(NetworkDesc& d) : d_(d) {}

  int input(int64_t channels) {
    Layer l;
    l.kind = LayerKind::input;
    l.name = "input";
    l.channels = channels;
    return push(std::move(l));
  }
  int conv(const std::string& name, int in, int64_t c, int64_t k, int kernel, int stride,
           int pad) {
    Layer l;
    l.kind = LayerKind::conv;
    l.name = name;
    l.inputs = {in};
    l.channels = k;
    l.conv = ConvSpec{c, k, kernel, stride, pad};
    l.params = {param(name + ".weight", {k, c, kernel, kernel}, ParamKind::conv_weight)};
    return push(std::move(l));
  }
  int bn(const std::string& name, int in, bool residual_last = false) {
    const int64_t c = d_.layers[in].channels;
    Layer l;
    l.kind = LayerKind::batchnorm;
    l.name = name;
    l.inputs = {in};
    l.channels = c;
    l.residual_last_bn = residual_last;
    // torch registers a BatchNorm2d's parameters (weight, bias), then its buffers.
    l.params = {param(name + ".weight", {c}, ParamKind::bn_weight),
                param(name + ".bias", {c}, ParamKind::bn_bias)};
    l.buffers = {buffer(name + ".running_mean", {c}, DType::f32),
                 buffer(name + ".running_var", {c}, DType::f32),
                 buffer(name + ".num_batches_tracked", {}, DType::i64)};  // 0-d in torch
    return push(std::move(l));
  }
  int simple(LayerKind kind, const std::string& name, std::vector<int> inputs) {
    Layer l;
    l.kind = kind;
    l.name = name;
    l.channels = d_.layers[inputs[0]].channels;
    l.inputs = std::move(inputs);
    return push(std::move(l));
  }
  int maxpool(const std::string& name, int in, PoolSpec p) {
    const int i = simple(LayerKind::maxpool, name, {in});
    d_.layers[i].pool = p;
    return i;
  }
  int fc(int in, int classes) {
    const int64_t c = d_.layers[in].channels;
    Layer l;
    l.kind = LayerKind::fc;
    l.name = "fc";
    l.inputs = {in};
    l.channels = classes;
    l.params = {param("fc.weight", {classes, c}, ParamKind::fc_weight),
                param("fc.bias", {classes}, ParamKind::fc_bias)};
    return push(std::move(l));
  }

 private:
  int push(Layer l) {
    d_.layers.push_back(std::move(l));
    return static_cast<int>(d_.layers.size()) - 1;
  }
  int param(std::string name, std::vector<int64_t> shape, ParamKind kind) {
    d_.params.push_back(ParamInfo{std::move(name), std::move(shape), kind, 0});
    const int i = static_cast<int>(d_.params.size()) - 1;
    d_.state_dict_order.push_back({true, i});
    return i;
  }
  int buffer(std::string name, std::vector<int64_t> shape, DType dt) {
    d_.buffers.push_back(BufferInfo{std::move(name), std::move(shape), dt});
    const int i = static_cast<int>(d_.buffers.size()) - 1;
    d_.state_dict_order.push_back({false, i});
    return i;
  }
  NetworkDesc& d_;
};

}  // namespace

NetworkDesc describe(const ArchSpec& arch, int num_classes, int64_t input_channels) {
  RN50_CHECK(num_classes >= 1, "num_classes must be >= 1, got {}", num_classes);
  RN50_CHECK(input_channels == 3 || input_channels == 4,
             "input channels must be 3 (RGB) or 4 (RGB + a zero channel), got {}", input_channels);
  for (int s = 0; s < 4; ++s)
    RN50_CHECK(arch.layers[s] >= 1, "architecture '{}': stage {} has {} blocks (need >= 1)",
               arch.name, s + 1, arch.layers[s]);
  NetworkDesc d;
  d.arch = arch;
  d.num_classes = num_classes;
  d.input_channels = input_channels;
  Builder b(d);

  // Stem: conv1 7x7/2 pad 3, bn1, relu, maxpool 3x3/2 pad 1.
  int cur = b.input(input_channels);
  cur = b.conv("conv1", cur, input_channels, 64, 7, 2, 3);
  cur = b.bn("bn1", cur);
  cur = b.simple(LayerKind::relu, "relu", {cur});
  cur = b.maxpool("maxpool", cur, PoolSpec{3, 2, 1});
  int64_t inplanes = 64;
  const int exp = arch.expansion();
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = int64_t{64} << s;
    for (int i = 0; i < arch.layers[s]; ++i) {
      const std::string pre = fmt::format("layer{}.{}.", s + 1, i);
      const int stride = i == 0 && s > 0 ? 2 : 1;
      const int block_in = cur;
      int t = block_in;
      int relu_k = 0;
      auto relu = [&](int in) {
        return b.simple(LayerKind::relu, pre + "relu" + std::to_string(++relu_k), {in});
      };
      if (arch.bottleneck) {
        // v1.5: 1x1 reduce, 3x3 with the stride, 1x1 expand (no relu before the add).
        t = relu(b.bn(pre + "bn1", b.conv(pre + "conv1", t, inplanes, planes, 1, 1, 0)));
        t = relu(b.bn(pre + "bn2", b.conv(pre + "conv2", t, planes, planes, 3, stride, 1)));
        t = b.bn(pre + "bn3", b.conv(pre + "conv3", t, planes, planes * exp, 1, 1, 0), true);
      } else {
        t = relu(b.bn(pre + "bn1", b.conv(pre + "conv1", t, inplanes, planes, 3, stride, 1)));
        t = b.bn(pre + "bn2", b.conv(pre + "conv2", t, planes, planes, 3, 1, 1), true);
      }
      int shortcut = block_in;
      if (stride != 1 || inplanes != planes * exp)
        shortcut = b.bn(pre + "downsample.1",
                        b.conv(pre + "downsample.0", block_in, inplanes, planes * exp, 1, stride, 0));
      cur = relu(b.simple(LayerKind::add, pre + "add", {t, shortcut}));
      inplanes = planes * exp;
    }
  }
  cur = b.simple(LayerKind::global_avgpool, "avgpool", {cur});
  d.feature_channels = inplanes;
  b.fc(cur, num_classes);

  // Slab layout: decayed parameters first (torchvision order among them), then the rest.
  int64_t off = 0;
  for (ParamInfo& p : d.params)
    if (is_decayed(p.kind)) p.offset = off, off += p.numel();
  d.decay_count = off;
  for (ParamInfo& p : d.params)
    if (!is_decayed(p.kind)) p.offset = off, off += p.numel();
  d.num_params = off;
  return d;
}

std::vector<std::vector<int>> NetworkDesc::consumers() const {
  std::vector<std::vector<int>> c(layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    for (int in : layers[i].inputs) c[static_cast<size_t>(in)].push_back(static_cast<int>(i));
  return c;
}

int NetworkDesc::layer(const std::string& name) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == name) return static_cast<int>(i);
  RN50_FAIL("{}: no layer named '{}'", arch.name, name);
}

std::vector<std::vector<int64_t>> layer_shapes(const NetworkDesc& d, int64_t n, int64_t h,
                                               int64_t w) {
  RN50_CHECK(n >= 1 && h >= 1 && w >= 1, "{}: input (N,C,H,W) = ({},{},{},{}) must be positive",
             d.arch.name, n, d.input_channels, h, w);
  std::vector<std::vector<int64_t>> s(d.layers.size());
  auto window = [&](const Layer& l, int64_t in, int kernel, int stride, int pad) {
    const int64_t out = (in + 2 * pad - kernel) / stride + 1;
    RN50_CHECK(in + 2 * pad >= kernel && out >= 1,
               "{}: input {}x{} is too small ({} would see {}x{}); use H, W >= 32", d.arch.name,
               h, w, l.name, s[static_cast<size_t>(l.inputs[0])][2],
               s[static_cast<size_t>(l.inputs[0])][3]);
    return out;
  };
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const Layer& l = d.layers[i];
    const std::vector<int64_t>* in = l.inputs.empty() ? nullptr : &s[static_cast<size_t>(l.inputs[0])];
    switch (l.kind) {
      case LayerKind::input: s[i] = {n, l.channels, h, w}; break;
      case LayerKind::conv:
        s[i] = {n, l.channels, window(l, (*in)[2], l.conv.kernel, l.conv.stride, l.conv.pad),
                window(l, (*in)[3], l.conv.kernel, l.conv.stride, l.conv.pad)};
        break;
      case LayerKind::maxpool:
        s[i] = {n, l.channels, window(l, (*in)[2], l.pool.kernel, l.pool.stride, l.pool.pad),
                window(l, (*in)[3], l.pool.kernel, l.pool.stride, l.pool.pad)};
        break;
      case LayerKind::batchnorm:
      case LayerKind::relu: s[i] = *in; break;
      case LayerKind::add:
        RN50_CHECK(s[static_cast<size_t>(l.inputs[0])] == s[static_cast<size_t>(l.inputs[1])],
                   "{}: the inputs of {} differ in shape", d.arch.name, l.name);
        s[i] = *in;
        break;
      case LayerKind::global_avgpool: s[i] = {n, l.channels}; break;
      case LayerKind::fc: s[i] = {n, l.channels}; break;
    }
  }
  return s;
}

double forward_flops(const NetworkDesc& d, int64_t h, int64_t w) {
  const std::vector<std::vector<int64_t>> s = layer_shapes(d, 1, h, w);
  double macs = 0;
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const Layer& l = d.layers[i];
    switch (l.kind) {
      case LayerKind::conv:
        macs += static_cast<double>(l.conv.out_channels) *
                static_cast<double>(l.conv.in_channels) * l.conv.kernel * l.conv.kernel *
                static_cast<double>(s[i][2] * s[i][3]);
        break;
      case LayerKind::fc:
        macs += static_cast<double>(l.channels) * static_cast<double>(d.feature_channels);
        break;
      case LayerKind::input:
      case LayerKind::batchnorm:
      case LayerKind::relu:
      case LayerKind::add:
      case LayerKind::maxpool:
      case LayerKind::global_avgpool:
        break;  // not counted (torchvision's convention)
    }
  }
  return 2 * macs;
}

double train_flops(const NetworkDesc& d, int64_t h, int64_t w) { return 3 * forward_flops(d, h, w); }

}  // namespace rn50
