// rn50: quantization-aware training state of a ResNet (ModelOptions::qat; see src/model/qat.h):
// the quantizers mapped onto the training schedule's steps, their ranges on the backend, the
// fake-quantized weight slab, and the ranges in state dicts.
#include <map>

#include "core/check.h"
#include "core/fake_quant.h"
#include "model/resnet_impl.h"

namespace rn50 {

using model_detail::kInputValue;
using model_detail::Step;
using model_detail::StepKind;

void ResNet::Impl::build_qat() {
  quantizers = qat::activation_quantizers(desc);
  std::map<int, int> of_layer;
  for (size_t q = 0; q < quantizers.size(); ++q)
    of_layer[quantizers[q].layer] = static_cast<int>(q);
  int input_layer = -1;
  for (size_t li = 0; li < desc.layers.size(); ++li)
    if (desc.layers[li].kind == LayerKind::input) input_layer = static_cast<int>(li);
  auto find = [&](int layer) {
    auto it = of_layer.find(layer);
    return it == of_layer.end() ? -1 : it->second;
  };
  input_quant = find(input_layer);
  quant_of_step.assign(steps.size(), -1);
  std::vector<bool> placed(quantizers.size(), false);
  if (input_quant >= 0) placed[static_cast<size_t>(input_quant)] = true;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int q = find(steps[i].layer);
    quant_of_step[i] = q;
    if (q >= 0) placed[static_cast<size_t>(q)] = true;
  }
  for (size_t q = 0; q < quantizers.size(); ++q)
    RN50_CHECK(placed[q], "{}: QAT quantizer '{}' quantizes '{}', which no training step outputs",
               desc.arch.name, quantizers[q].name,
               desc.layers[static_cast<size_t>(quantizers[q].layer)].name);
  auto of_value = [&](int v) {
    return v == kInputValue ? input_quant : quant_of_step[static_cast<size_t>(v)];
  };
  for (Step& s : steps) {
    const std::string& name = desc.layers[static_cast<size_t>(s.layer)].name;
    switch (s.kind) {
      case StepKind::unit:
      case StepKind::avgpool:
      case StepKind::fc:
        s.qin = of_value(s.in[0]);
        RN50_CHECK(s.qin >= 0, "{}: QAT: the input of '{}' has no quantizer", desc.arch.name, name);
        break;
      case StepKind::join:
        s.qres = of_value(s.in[1]);
        RN50_CHECK(s.qres >= 0, "{}: QAT: the shortcut of '{}' has no quantizer", desc.arch.name,
                   name);
        break;
      case StepKind::maxpool:
        break;
    }
  }
  const int64_t nq = static_cast<int64_t>(quantizers.size());
  qat_state = be.alloc({nq * fake_quant::state_size}, DType::f32);
  qat_states.clear();
  for (int64_t q = 0; q < nq; ++q)
    qat_states.push_back(
        qat_state.slice0(q * fake_quant::state_size, (q + 1) * fake_quant::state_size));
  qat_values.assign(quantizers.size(), Tensor());
  reset_qat_state();
  qat_weights = be.alloc({desc.num_params}, opt.compute_dtype);
  be.zero(qat_weights);
  for (Step& s : steps) {
    switch (s.kind) {
      case StepKind::unit: s.wq = layout_view(qat_weights, s.conv_param); break;
      case StepKind::fc:
        s.wq = layout_view(qat_weights, desc.layers[static_cast<size_t>(s.layer)].params[0]);
        break;
      case StepKind::join:
      case StepKind::maxpool:
      case StepKind::avgpool:
        break;  // no weight
    }
  }
}

void ResNet::Impl::reset_qat_state() {
  if (!qat_state.defined()) return;
  Tensor host = Tensor::zeros({qat_state.numel()}, DType::f32);
  float* p = host.data_as<float>();
  for (size_t q = 0; q < quantizers.size(); ++q) {
    float* st = p + q * fake_quant::state_size;
    st[fake_quant::amax] = st[fake_quant::state] = st[fake_quant::accum] = 1.f;
  }
  be.copy(host, qat_state);
}

}  // namespace rn50
