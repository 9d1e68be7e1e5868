#include "train/optimizer.h"

#include <fmt/ranges.h>

#include "core/check.h"
#include "model/weights.h"

namespace rn50 {

SgdOptimizer::SgdOptimizer(Backend& backend, ResNet& model, const Options& opt)
    : be_(backend), model_(model), opt_(opt) {
  momentum_ = be_.alloc({model_.num_params()}, DType::f32);
  be_.zero(momentum_);
}

void SgdOptimizer::step(const Tensor& step_state) {
  SgdParams p;
  p.momentum = opt_.momentum;
  p.weight_decay = opt_.weight_decay;
  p.decay_count = opt_.decay_all ? model_.num_params() : model_.decay_count();
  p.state = step_state;
  p.mask = mask_;
  p.compute_copy = model_.compute_param_slab();
  be_.sgd_update(p, model_.param_slab(), model_.grad_slab(), momentum_);
}

void SgdOptimizer::set_mask(const Tensor& mask) {
  if (!mask.defined()) {
    mask_ = Tensor();
    return;
  }
  RN50_CHECK(mask.dtype() == DType::u8 && mask.numel() == model_.num_params(),
             "optimizer mask is {}, expected U8 with one element per parameter ({})", mask.str(),
             model_.num_params());
  mask_ = be_.alloc({model_.num_params()}, DType::u8);
  be_.copy(mask.reshape({model_.num_params()}), mask_);
  // Apply it now: an update with lr 0 and no gradient leaves only the masking.
  Tensor zero_grads = be_.alloc({model_.num_params()}, DType::f32);
  be_.zero(zero_grads);
  SgdParams p;
  p.lr = 0.f;
  p.momentum = 1.f;
  p.weight_decay = 0.f;
  p.mask = mask_;
  p.compute_copy = model_.compute_param_slab();
  be_.sgd_update(p, model_.param_slab(), zero_grads, momentum_);
  be_.synchronize();
}

std::vector<std::pair<std::string, Tensor>> SgdOptimizer::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out;
  const Layout wl = model_.weight_layout();
  for (const ParamInfo& p : model_.params()) {
    const Tensor v = momentum_.slice0(p.offset, p.offset + p.numel())
                         .reshape(p.shape, p.shape.size() == 4 ? wl : Layout::NCHW);
    Tensor host = Tensor::empty(p.shape, DType::f32);  // torchvision layout
    be_.copy(v, host);
    out.emplace_back(p.name, host);
  }
  be_.synchronize();
  return out;
}

void SgdOptimizer::load_state_dict(const std::map<std::string, Tensor>& sd,
                                   const std::string& what) {
  // Validate every entry before touching the momentum.
  std::vector<Tensor> f32(model_.params().size());
  for (size_t i = 0; i < model_.params().size(); ++i) {
    const ParamInfo& p = model_.params()[i];
    auto it = sd.find(p.name);
    RN50_CHECK(it != sd.end(), "{}: missing momentum of '{}'", what, p.name);
    RN50_CHECK(it->second.shape() == p.shape, "{}: momentum '{}' has shape [{}], the model [{}]",
               what, p.name, fmt::join(it->second.shape(), ", "), fmt::join(p.shape, ", "));
    f32[i] = to_f32(it->second, what + ": " + p.name);
  }
  const Layout wl = model_.weight_layout();
  for (size_t i = 0; i < model_.params().size(); ++i) {
    const ParamInfo& p = model_.params()[i];
    Tensor dst = momentum_.slice0(p.offset, p.offset + p.numel())
                     .reshape(p.shape, p.shape.size() == 4 ? wl : Layout::NCHW);
    be_.copy(f32[i], dst);
  }
  be_.synchronize();
}

}  // namespace rn50
