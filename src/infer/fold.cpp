#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/safetensors.h"
#include "model/weights.h"
#include "rn50/inference.h"

namespace rn50 {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("({})", fmt::join(s, ", "));
}

const Tensor& get(const std::map<std::string, Tensor>& sd, const std::string& key,
                  const std::vector<int64_t>& shape) {
  auto it = sd.find(key);
  RN50_CHECK(it != sd.end(), "weights: '{}' is missing", key);
  const Tensor& t = it->second;
  RN50_CHECK(t.dtype() == DType::f32 && t.shape() == shape,
             "weights: '{}' is {} {}, expected f32 {}", key, dtype_name(t.dtype()),
             shape_str(t.shape()), shape_str(shape));
  return t;
}

/// Copies a host f32 tensor.
Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), DType::f32);
  std::copy(t.data_as<const float>(), t.data_as<const float>() + t.numel(), c.data_as<float>());
  return c;
}

}  // namespace

InferenceProgram fold_network(const NetworkDesc& d, const std::map<std::string, Tensor>& sd,
                              double bn_eps) {
  InferenceProgram p;
  p.arch = d.arch.name;
  p.num_classes = d.num_classes;
  p.feature_channels = d.feature_channels;
  const auto consumers = d.consumers();
  const int n = static_cast<int>(d.layers.size());
  p.producer.assign(static_cast<size_t>(n), -1);
  // The single layer reading layer i's output, or -1 when it is read by none or several.
  auto only_consumer = [&](int i) {
    return consumers[static_cast<size_t>(i)].size() == 1 ? consumers[static_cast<size_t>(i)][0]
                                                         : -1;
  };
  auto param = [&](const Layer& l, size_t k) -> const ParamInfo& {
    return d.params[static_cast<size_t>(l.params.at(k))];
  };
  std::vector<bool> absorbed(static_cast<size_t>(n), false);
  // Convs that end in a residual add wait for the add's position (after the shortcut's ops).
  std::map<int, InferOp> waiting_for_add;
  auto emit = [&](InferOp op) {
    p.producer[static_cast<size_t>(op.output)] = static_cast<int>(p.ops.size());
    p.ops.push_back(std::move(op));
  };

  for (int i = 0; i < n; ++i) {
    const Layer& l = d.layers[static_cast<size_t>(i)];
    if (absorbed[static_cast<size_t>(i)]) continue;  // a BN or ReLU fused into its conv
    InferOp op;
    op.name = l.name;
    switch (l.kind) {
      case LayerKind::input: continue;  // value 0
      case LayerKind::add: {
        auto it = waiting_for_add.find(i);
        RN50_CHECK(it != waiting_for_add.end(),
                   "inference: residual add '{}' does not follow a conv + BatchNorm", l.name);
        emit(std::move(it->second));
        waiting_for_add.erase(it);
        continue;
      }
      case LayerKind::conv: {
        op.kind = InferOp::Kind::conv;
        op.input = l.inputs.at(0);
        op.conv = l.conv;
        const ParamInfo& w = param(l, 0);
        op.weight = clone(get(sd, w.name, w.shape));
        op.bias = Tensor::zeros({l.conv.out_channels}, DType::f32);
        int last = i;
        const int bn = only_consumer(i);
        if (bn >= 0 && d.layers[static_cast<size_t>(bn)].kind == LayerKind::batchnorm) {
          const Layer& b = d.layers[static_cast<size_t>(bn)];
          const int64_t k = l.conv.out_channels;
          const float* gamma = get(sd, param(b, 0).name, {k}).data_as<const float>();
          const float* beta = get(sd, param(b, 1).name, {k}).data_as<const float>();
          const BufferInfo& mb = d.buffers[static_cast<size_t>(b.buffers.at(0))];
          const BufferInfo& vb = d.buffers[static_cast<size_t>(b.buffers.at(1))];
          const float* mean = get(sd, mb.name, {k}).data_as<const float>();
          const float* var = get(sd, vb.name, {k}).data_as<const float>();
          const int64_t per = op.weight.numel() / k;
          float* wp = op.weight.data_as<float>();
          float* bp = op.bias.data_as<float>();
          for (int64_t o = 0; o < k; ++o) {
            RN50_CHECK(var[o] >= 0 && std::isfinite(var[o]),
                       "weights: '{}'[{}] = {}: a running variance must be finite and >= 0",
                       vb.name, o, var[o]);
            const double s = double(gamma[o]) / std::sqrt(double(var[o]) + bn_eps);
            for (int64_t j = 0; j < per; ++j)
              wp[o * per + j] = static_cast<float>(double(wp[o * per + j]) * s);
            bp[o] = static_cast<float>(double(beta[o]) - double(mean[o]) * s);
          }
          op.folded_bn = b.name;
          absorbed[static_cast<size_t>(bn)] = true;
          last = bn;
        }
        int next = only_consumer(last);
        int add = -1;
        // The add's first input is the residual branch (graph.h): the branch's last conv takes
        // the add (and the ReLU after it) as post-ops; the shortcut is an ordinary value.
        if (next >= 0 && d.layers[static_cast<size_t>(next)].kind == LayerKind::add &&
            d.layers[static_cast<size_t>(next)].inputs.at(0) == last) {
          const Layer& a = d.layers[static_cast<size_t>(next)];
          op.residual = a.inputs.at(1);
          RN50_CHECK(op.residual != last, "inference: add '{}' adds '{}' to itself", a.name,
                     d.layers[static_cast<size_t>(last)].name);
          add = next;
          last = next;
          next = only_consumer(last);
        }
        if (next >= 0 && d.layers[static_cast<size_t>(next)].kind == LayerKind::relu) {
          op.relu = true;
          absorbed[static_cast<size_t>(next)] = true;
          last = next;
        }
        op.output = last;
        if (add >= 0) {
          waiting_for_add.emplace(add, std::move(op));
          continue;
        }
        break;
      }
      case LayerKind::maxpool:
        op.kind = InferOp::Kind::maxpool;
        op.input = l.inputs.at(0);
        op.pool = l.pool;
        op.output = i;
        break;
      case LayerKind::global_avgpool:
        op.kind = InferOp::Kind::global_avgpool;
        op.input = l.inputs.at(0);
        op.output = i;
        break;
      case LayerKind::fc: {
        op.kind = InferOp::Kind::fc;
        op.input = l.inputs.at(0);
        op.weight = clone(get(sd, param(l, 0).name, param(l, 0).shape));
        op.bias = clone(get(sd, param(l, 1).name, param(l, 1).shape));
        op.output = i;
        break;
      }
      case LayerKind::batchnorm:
        RN50_FAIL(
            "inference: BatchNorm '{}' does not directly follow a conv read only by it; "
            "it cannot be folded",
            l.name);
      case LayerKind::relu:
        RN50_FAIL(
            "inference: ReLU '{}' does not follow a conv (+ BatchNorm [+ add]); it cannot "
            "be fused",
            l.name);
    }
    emit(std::move(op));
  }
  RN50_CHECK(waiting_for_add.empty(), "inference: a residual add was never reached");
  RN50_CHECK(!p.ops.empty() && p.ops.back().kind == InferOp::Kind::fc,
             "inference: the network must end with its fc layer");
  // Every value an op reads must be written by an earlier op (or be the input).
  for (size_t o = 0; o < p.ops.size(); ++o)
    for (int v : {p.ops[o].input, p.ops[o].residual})
      RN50_CHECK(v <= 0 || (p.producer[static_cast<size_t>(v)] >= 0 &&
                            p.producer[static_cast<size_t>(v)] < static_cast<int>(o)),
                 "inference: '{}' reads the output of '{}', which is not computed before it",
                 p.ops[o].name, d.layers[static_cast<size_t>(v)].name);
  return p;
}

InferenceProgram fold_weights_file(const std::string& weights, const std::string& arch,
                                   int num_classes) {
  const std::string path = weights_file(weights, "--from-pretrained-params");
  const SafeTensorsFile file = load_weights_file(path);
  const std::string a = arch.empty() ? infer_arch(file.tensors, path) : arch;
  const int k = classes_of(file, path, num_classes);
  return fold_network(describe(arch_from_name(a), k), state_dict_f32(file, path, k));
}

}  // namespace rn50
