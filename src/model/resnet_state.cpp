// rn50: ResNet::state_dict / load_state_dict with torchvision's keys, shapes, dtypes and order
// (torch.nn.Module.state_dict: per module its parameters, then its buffers; BatchNorm2d buffers
// running_mean, running_var (f32, C) and num_batches_tracked (i64, 0-d)).
#include <string>
#include <vector>

#include <cmath>
#include <map>

#include "core/check.h"
#include "core/fake_quant.h"
#include "model/resnet_impl.h"
#include "model/weights.h"

namespace rn50 {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string join(const std::vector<std::string>& v, size_t max_items = 20) {
  std::string r;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) r += (i ? ", " : "") + v[i];
  if (v.size() > max_items) r += fmt::format(", ... ({} in all)", v.size());
  return r;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> ResNet::state_dict() {
  Impl& m = *impl_;
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(m.desc.state_dict_order.size());
  for (const StateDictEntry& e : m.desc.state_dict_order) {
    if (e.is_param) {
      const ParamInfo& p = m.desc.params[e.index];
      Tensor host = Tensor::empty(p.shape, DType::f32);
      m.be.copy(m.param_view(e.index), host);
      out.emplace_back(p.name, host);
      continue;
    }
    const BufferInfo& b = m.desc.buffers[e.index];
    const model_detail::BnState& bn = m.bns[m.buffer_bn[e.index]];
    const int what = m.buffer_what[e.index];
    if (what == 2) {
      Tensor host = Tensor::empty({}, DType::i64);
      *host.data_as<int64_t>() = m.nbt.data_as<int64_t>()[m.buffer_bn[e.index]];
      out.emplace_back(b.name, host);
    } else {
      Tensor host = Tensor::empty(b.shape, DType::f32);
      m.be.copy(what == 0 ? bn.running_mean : bn.running_var, host);
      out.emplace_back(b.name, host);
    }
  }
  if (!m.quantizers.empty()) {  // QAT ranges (src/model/qat.h)
    Tensor st = Tensor::empty({m.qat_state.numel()}, DType::f32);
    m.be.copy(m.qat_state, st);
    for (size_t q = 0; q < m.quantizers.size(); ++q) {
      const float* v = st.data_as<const float>() + q * fake_quant::state_size;
      const qat::ActQuantizer& aq = m.quantizers[q];
      for (auto [key, i] : {std::pair{qat::amax_key(aq), int{fake_quant::amax}},
                            std::pair{qat::state_key(aq), int{fake_quant::state}},
                            std::pair{qat::accum_key(aq), int{fake_quant::accum}}}) {
        Tensor t = Tensor::empty({1}, DType::f32);
        *t.data_as<float>() = v[i];
        out.emplace_back(key, t);
      }
    }
  }
  return out;
}

void ResNet::load_state_dict(const std::map<std::string, Tensor>& sd_in, bool strict) {
  Impl& m = *impl_;
  // The stem conv of a 3-channel file in a 4-channel model (or the reverse): zero fourth slice
  // added (or dropped; exact, the fourth input channel is always zero).
  std::map<std::string, Tensor> adapted;
  const std::map<std::string, Tensor>* src = &sd_in;
  if (auto c = sd_in.find("conv1.weight"); c != sd_in.end() && c->second.defined() &&
                                            c->second.ndim() == 4 &&
                                            c->second.dim(1) != m.desc.input_channels) {
    adapted = sd_in;
    adapted["conv1.weight"] = with_input_channels(c->second, m.desc.input_channels);
    src = &adapted;
  }
  const std::map<std::string, Tensor>& sd = *src;
  // QAT range keys of this model -> element of qat_state.
  std::map<std::string, int64_t> qat_slot;
  for (size_t q = 0; q < m.quantizers.size(); ++q) {
    const int64_t b = static_cast<int64_t>(q) * fake_quant::state_size;
    qat_slot[qat::amax_key(m.quantizers[q])] = b + fake_quant::amax;
    qat_slot[qat::state_key(m.quantizers[q])] = b + fake_quant::state;
    qat_slot[qat::accum_key(m.quantizers[q])] = b + fake_quant::accum;
  }
  // Validate everything before touching the model, so a bad checkpoint leaves it unchanged.
  std::vector<std::string> unexpected, missing;
  for (const auto& [key, t] : sd) {
    RN50_CHECK(t.defined(), "load_state_dict: '{}' is an undefined tensor", key);
    RN50_CHECK(t.is_cpu(), "load_state_dict: '{}' must be a host tensor, got {}", key, t.str());
    if (auto it = m.param_index.find(key); it != m.param_index.end()) {
      const ParamInfo& p = m.desc.params[it->second];
      RN50_CHECK(t.shape() == p.shape,
                 "load_state_dict: shape mismatch for '{}': checkpoint has {}, model ({}, {} "
                 "classes) expects {}",
                 key, shape_str(t.shape()), m.desc.arch.name, m.opt.num_classes, shape_str(p.shape));
      RN50_CHECK(t.dtype() == DType::f32, "load_state_dict: '{}' has dtype {}, expected F32", key,
                 dtype_name(t.dtype()));
    } else if (auto jt = m.buffer_index.find(key); jt != m.buffer_index.end()) {
      const BufferInfo& b = m.desc.buffers[jt->second];
      if (m.buffer_what[jt->second] == 2) {
        RN50_CHECK(t.numel() == 1 && t.ndim() <= 1,
                   "load_state_dict: shape mismatch for '{}': checkpoint has {}, expected [] "
                   "(a scalar)",
                   key, shape_str(t.shape()));
        RN50_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32,
                   "load_state_dict: '{}' has dtype {}, expected I64", key, dtype_name(t.dtype()));
      } else {
        RN50_CHECK(t.shape() == b.shape,
                   "load_state_dict: shape mismatch for '{}': checkpoint has {}, model expects {}",
                   key, shape_str(t.shape()), shape_str(b.shape));
        RN50_CHECK(t.dtype() == DType::f32, "load_state_dict: '{}' has dtype {}, expected F32",
                   key, dtype_name(t.dtype()));
      }
    } else if (auto qt = qat_slot.find(key); qt != qat_slot.end()) {
      RN50_CHECK(t.numel() == 1 && t.dtype() == DType::f32 && std::isfinite(*t.data_as<float>()),
                 "load_state_dict: QAT range '{}' must be one finite F32 value, got {}", key,
                 t.str());
    } else {
      unexpected.push_back(key);
    }
  }
  if (strict && m.quantizers.empty()) {
    std::vector<std::string> ranges;
    for (const std::string& k : unexpected)
      if (qat::is_qat_key(k)) ranges.push_back(k);
    RN50_CHECK(ranges.empty(),
               "load_state_dict into {}: the weights hold QAT activation ranges ([{}]): they "
               "were trained with --qat; pass --qat to train or evaluate them as they were "
               "trained (or export them: rn50 export --precision int8)",
               m.desc.arch.name, join(ranges, 3));
  }
  if (strict) {
    for (const StateDictEntry& e : m.desc.state_dict_order) {
      if (!e.is_param && m.buffer_what[e.index] == 2) continue;  // num_batches_tracked optional
      const std::string& name = e.is_param ? m.desc.params[e.index].name : m.desc.buffers[e.index].name;
      if (!sd.count(name)) missing.push_back(name);
    }
    RN50_CHECK(missing.empty() && unexpected.empty(),
               "load_state_dict (strict) into {}: missing keys: [{}]; unexpected keys: [{}]",
               m.desc.arch.name, join(missing), join(unexpected));
  }

  for (const auto& [key, t] : sd) {
    if (auto it = m.param_index.find(key); it != m.param_index.end()) {
      Tensor dst = m.param_view(it->second);
      m.be.copy(t, dst);  // Backend::copy converts a 4-D NHWC host tensor to the OIHW slab
    } else if (auto jt = m.buffer_index.find(key); jt != m.buffer_index.end()) {
      const int bn = m.buffer_bn[jt->second];
      switch (m.buffer_what[jt->second]) {
        case 0: m.be.copy(t, m.bns[bn].running_mean); break;
        case 1: m.be.copy(t, m.bns[bn].running_var); break;
        default:
          m.nbt.data_as<int64_t>()[bn] = t.dtype() == DType::i64
                                             ? *t.data_as<int64_t>()
                                             : static_cast<int64_t>(*t.data_as<int32_t>());
      }
    }
  }
  bool any_range = false;
  for (const auto& [key, slot] : qat_slot) any_range = any_range || sd.count(key);
  if (strict && !any_range) m.reset_qat_state();  // float weights: QAT starts with fresh ranges
  if (any_range) {
    Tensor st = Tensor::empty({m.qat_state.numel()}, DType::f32);
    m.be.copy(m.qat_state, st);
    for (const auto& [key, slot] : qat_slot)
      if (auto it = sd.find(key); it != sd.end())
        st.data_as<float>()[slot] = *it->second.data_as<const float>();
    m.be.copy(st, m.qat_state);
  }
  m.have_train_state = false;
  refresh_compute_params();
}

}  // namespace rn50
