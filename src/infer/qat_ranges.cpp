// rn50 inference: the activation ranges of a quantization-aware-trained model (src/model/qat.h)
// taken into an inference program (has_qat_ranges, apply_qat_ranges; see rn50/inference.h).
#include <cmath>

#include "core/check.h"
#include "model/qat.h"
#include "rn50/inference.h"

namespace rn50 {

bool has_qat_ranges(const std::map<std::string, Tensor>& sd) {
  for (const auto& [key, t] : sd)
    if (qat::is_qat_key(key)) return true;
  return false;
}

void apply_qat_ranges(InferenceProgram& p, const NetworkDesc& desc,
                      const std::map<std::string, Tensor>& sd, const std::string& what) {
  RN50_CHECK(desc.layers.size() == p.producer.size(),
             "{}: the program has {} values, the description {} layers", what, p.producer.size(),
             desc.layers.size());
  std::vector<float> absmax(p.producer.size(), 0.f);
  for (const qat::ActQuantizer& q : qat::activation_quantizers(desc)) {
    const std::string key = qat::amax_key(q);
    auto it = sd.find(key);
    RN50_CHECK(it != sd.end(),
               "{}: '{}' is missing: weights with QAT ranges need one per activation quantizer "
               "(train them with --qat to the end, or export --precision fp32)",
               what, key);
    const Tensor& t = it->second;
    RN50_CHECK(t.dtype() == DType::f32 && t.numel() == 1, "{}: '{}' is {}, expected one f32 value",
               what, key, t.str());
    const float a = *t.data_as<const float>();
    RN50_CHECK(std::isfinite(a) && a > 0,
               "{}: QAT range '{}' is {}: a range must be finite and > 0", what, key, a);
    absmax.at(static_cast<size_t>(q.layer)) = a;
  }
  // A max pool's input gets its output's range where training had none for it (the stem's
  // output): max commutes with the quantizer, so the INT8 stem conv can write the codes the
  // pool's quantizer gives.
  for (const InferOp& op : p.ops)
    if (op.kind == InferOp::Kind::maxpool && absmax.at(static_cast<size_t>(op.input)) == 0.f)
      absmax.at(static_cast<size_t>(op.input)) = absmax.at(static_cast<size_t>(op.output));
  p.value_absmax = std::move(absmax);
  p.qat_ranges = true;
}

}  // namespace rn50
