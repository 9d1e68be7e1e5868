#include "train/optimizer.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "core/check.h"
#include "model/weights.h"

namespace rn50 {

SgdOptimizer::SgdOptimizer(Backend& backend, ResNet& model, const Options& opt)
    : be_(backend), model_(model), opt_(opt) {
  momentum_ = be_.alloc({model_.param_slab().numel()}, DType::f32);
  be_.zero(momentum_);
  if (!model_.half_ranges().empty()) {
    momentum_half_ = be_.alloc({model_.num_params()}, model_.compute_param_slab().dtype());
    be_.zero(momentum_half_);
  }
}

int64_t SgdOptimizer::state_bytes() const {
  int64_t b = static_cast<int64_t>(momentum_.nbytes());
  if (momentum_half_.defined()) b += static_cast<int64_t>(momentum_half_.nbytes());
  if (mask_.defined()) b += static_cast<int64_t>(mask_.nbytes());
  return b;
}

void SgdOptimizer::update(const SgdParams& proto, bool zero_grads) {
  // The decayed prefix [0, decay) of the slab layout, as seen by a range starting at `begin`.
  const int64_t decay = opt_.decay_all ? model_.num_params() : model_.decay_count();
  auto decay_in = [&](int64_t begin, int64_t n) {
    return std::clamp<int64_t>(decay - begin, 0, n);
  };
  auto run = [&](int64_t begin, Tensor params, const Tensor& grads, Tensor momentum,
                 const Tensor& compute_copy) {
    const int64_t n = params.numel();
    SgdParams p = proto;
    p.decay_count = decay_in(begin, n);
    if (mask_.defined()) p.mask = mask_.slice0(begin, begin + n);
    p.compute_copy = compute_copy;
    Tensor g = grads;
    if (zero_grads) {
      g = be_.alloc({n}, params.dtype());
      be_.zero(g);
    }
    be_.sgd_update(p, params, g, momentum);
  };
  Tensor& w32 = model_.param_slab();
  if (model_.grads_in_compute_slab()) {
    // CPU AMP (ResNet::set_grads_in_compute_slab): the conv/fc gradients are read where
    // backward wrote them, in bf16; the others (BatchNorm) in the f32 slab. One pass per range,
    // each writing its part of the compute copy.
    Tensor& cc = model_.compute_param_slab();
    auto piece = [&](int64_t a, int64_t b, const Tensor& grads) {
      if (b > a)
        run(a, w32.slice0(a, b), grads.slice0(a, b), momentum_.slice0(a, b), cc.slice0(a, b));
    };
    int64_t at = 0;
    for (const auto& [a, b] : model_.mirrored_ranges()) {
      piece(at, a, model_.grad_slab());
      piece(a, b, model_.compute_grad_slab());
      at = b;
    }
    piece(at, w32.numel(), model_.grad_slab());
    return;
  }
  const int64_t base = model_.master_offset();
  const auto halves = model_.half_ranges();
  // AMP: the f32 master slab writes the whole compute copy in the same pass.
  run(base, w32, model_.grad_slab(), momentum_,
      halves.empty() ? model_.compute_param_slab() : Tensor());
  for (const auto& [a, b] : halves)
    run(a, model_.compute_param_slab().slice0(a, b), model_.compute_grad_slab().slice0(a, b),
        momentum_half_.slice0(a, b), Tensor());
}

void SgdOptimizer::step(const Tensor& step_state) {
  SgdParams p;
  p.momentum = opt_.momentum;
  p.weight_decay = opt_.weight_decay;
  p.state = step_state;
  update(p, /*zero_grads=*/false);
}

Tensor SgdOptimizer::momentum_view(const ParamInfo& p) {
  const Layout l = p.shape.size() == 4 ? model_.weight_layout() : Layout::NCHW;
  if (model_.is_half_master(p))
    return momentum_half_.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, l);
  const int64_t at = p.offset - model_.master_offset();
  return momentum_.slice0(at, at + p.numel()).reshape(p.shape, l);
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
  SgdParams p;
  p.lr = 0.f;
  p.momentum = 1.f;
  p.weight_decay = 0.f;
  update(p, /*zero_grads=*/true);
  be_.synchronize();
}

namespace {

/// Host u8 view of parameter p inside a host slab, in the slab's layout.
Tensor slab_view(const Tensor& slab, const ParamInfo& p, Layout wl) {
  return slab.slice0(p.offset, p.offset + p.numel())
      .reshape(p.shape, p.shape.size() == 4 ? wl : Layout::NCHW);
}

/// dst[logical index] = src[logical index] for two host u8 tensors of one shape (any layouts).
void copy_u8(const Tensor& src, Tensor& dst) {
  if (src.ndim() != 4 || src.layout() == dst.layout()) {
    std::copy(src.data_as<const uint8_t>(), src.data_as<const uint8_t>() + src.numel(),
              dst.data_as<uint8_t>());
    return;
  }
  for (int64_t n = 0; n < src.n(); ++n)
    for (int64_t c = 0; c < src.c(); ++c)
      for (int64_t h = 0; h < src.h(); ++h)
        for (int64_t w = 0; w < src.w(); ++w)
          dst.data_as<uint8_t>()[dst.offset4(n, c, h, w)] =
              src.data_as<const uint8_t>()[src.offset4(n, c, h, w)];
}

}  // namespace

void SgdOptimizer::set_param_masks(const std::map<std::string, Tensor>& masks) {
  Tensor slab = Tensor::empty({model_.num_params()}, DType::u8);
  std::fill(slab.data_as<uint8_t>(), slab.data_as<uint8_t>() + slab.numel(), uint8_t{1});
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : model_.params()) by_name[p.name] = &p;
  for (const auto& [name, m] : masks) {
    auto it = by_name.find(name);
    RN50_CHECK(it != by_name.end(), "2:4 mask for '{}': the {} model has no such parameter", name,
               model_.arch().name);
    const ParamInfo& p = *it->second;
    RN50_CHECK(m.is_cpu() && m.dtype() == DType::u8 && m.shape() == p.shape,
               "2:4 mask for '{}' is {}, expected a host U8 tensor of shape [{}]", name, m.str(),
               fmt::join(p.shape, ", "));
    Tensor dst = slab_view(slab, p, model_.weight_layout());
    copy_u8(m, dst);
  }
  set_mask(slab);
}

std::vector<std::pair<std::string, Tensor>> SgdOptimizer::param_masks() {
  std::vector<std::pair<std::string, Tensor>> out;
  if (!mask_.defined()) return out;
  Tensor slab = Tensor::empty({model_.num_params()}, DType::u8);
  be_.copy(mask_, slab);
  be_.synchronize();
  for (const ParamInfo& p : model_.params()) {
    const Tensor v = slab_view(slab, p, model_.weight_layout());
    const uint8_t* b = v.data_as<const uint8_t>();
    if (std::find(b, b + v.numel(), uint8_t{0}) == b + v.numel()) continue;  // not masked
    Tensor m = Tensor::empty(p.shape, DType::u8);  // torchvision layout
    copy_u8(v, m);
    out.emplace_back(p.name, m);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> SgdOptimizer::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParamInfo& p : model_.params()) {
    const Tensor v = momentum_view(p);
    Tensor host = Tensor::empty(p.shape, DType::f32);  // torchvision layout
    be_.copy(v, host);
    out.emplace_back(p.name, host);
  }
  be_.synchronize();
  for (auto& [name, m] : param_masks()) out.emplace_back(kMaskPrefix + name, m);
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
  for (size_t i = 0; i < model_.params().size(); ++i) {
    Tensor dst = momentum_view(model_.params()[i]);
    be_.copy(f32[i], dst);  // f16 momentum (pure fp16): rounded to nearest even
  }
  be_.synchronize();
  std::map<std::string, Tensor> masks;
  const std::string prefix = kMaskPrefix;
  for (const auto& [key, t] : sd)
    if (key.rfind(prefix, 0) == 0) masks.emplace(key.substr(prefix.size()), t);
  if (!masks.empty()) set_param_masks(masks);
}

}  // namespace rn50
