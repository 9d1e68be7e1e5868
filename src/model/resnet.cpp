// rn50: ResNet construction — the module list in torchvision order (torchvision/models/resnet.py,
// ResNet.__init__, _make_layer, BasicBlock, Bottleneck), the parameter slab layout (decayed
// parameters first), the running-statistics storage, and the simple accessors.
#include <utility>

#include "core/check.h"
#include "model/resnet_impl.h"

namespace rn50 {

using model_detail::BnState;
using model_detail::ConvBnUnit;

int ResNet::Impl::add_param(const std::string& name, std::vector<int64_t> shape, ParamKind kind) {
  int idx = static_cast<int>(params.size());
  params.push_back(ParamInfo{name, std::move(shape), kind, 0});
  param_index[name] = idx;
  sd_order.push_back({true, idx});
  return idx;
}

int ResNet::Impl::add_bn(const std::string& name, int64_t channels) {
  int idx = static_cast<int>(bns.size());
  BnState bn;
  bn.name = name;
  bn.channels = channels;
  bns.push_back(bn);
  const std::pair<const char*, DType> bufs[3] = {{"running_mean", DType::f32},
                                                 {"running_var", DType::f32},
                                                 {"num_batches_tracked", DType::i64}};
  for (int k = 0; k < 3; ++k) {
    int b = static_cast<int>(buffers.size());
    std::vector<int64_t> shape;
    if (k < 2) shape = {channels};  // num_batches_tracked is a 0-d tensor in torch
    buffers.push_back(BufferInfo{name + "." + bufs[k].first, shape, bufs[k].second});
    buffer_index[buffers.back().name] = b;
    buffer_bn.push_back(idx);
    buffer_what.push_back(k);
    sd_order.push_back({false, b});
  }
  return idx;
}

int ResNet::Impl::add_unit(const std::string& conv, const std::string& bn, int64_t c, int64_t k,
                           int64_t kernel, int stride, int pad, bool relu) {
  ConvBnUnit u;
  u.in_channels = c;
  u.out_channels = k;
  u.kernel = kernel;
  u.conv = Conv2dParams{stride, pad};
  u.relu = relu;
  // torchvision registers conv (weight), then bn (weight, bias, running_mean, running_var,
  // num_batches_tracked): the state_dict order.
  u.conv_param = add_param(conv + ".weight", {k, c, kernel, kernel}, ParamKind::conv_weight);
  u.gamma_param = add_param(bn + ".weight", {k}, ParamKind::bn_weight);
  u.beta_param = add_param(bn + ".bias", {k}, ParamKind::bn_bias);
  // add_param pushed the two BN params to sd_order; add_bn appends the buffers after them.
  u.bn = add_bn(bn, k);
  units.push_back(u);
  return static_cast<int>(units.size()) - 1;
}

Tensor ResNet::Impl::param_view(int i) {
  const ParamInfo& p = params[i];
  return param_slab.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, Layout::NCHW);
}

Tensor ResNet::Impl::grad_view(int i) {
  const ParamInfo& p = params[i];
  return grad_slab.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, Layout::NCHW);
}

namespace {
bool is_mirrored_kind(ParamKind k) {
  return k == ParamKind::conv_weight || k == ParamKind::fc_weight || k == ParamKind::fc_bias;
}
}  // namespace

Tensor ResNet::Impl::compute_param_view(int i) {
  const ParamInfo& p = params[i];
  if (!mirror || !is_mirrored_kind(p.kind)) return param_view(i);
  const Layout l = p.shape.size() == 4 ? weight_layout : Layout::NCHW;
  return param_lp.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, l);
}

Tensor ResNet::Impl::compute_grad_view(int i) {
  const ParamInfo& p = params[i];
  if (!mirror || !is_mirrored_kind(p.kind)) return grad_view(i);
  const Layout l = p.shape.size() == 4 ? weight_layout : Layout::NCHW;
  return grad_lp.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, l);
}

ResNet::ResNet(Backend& backend, ArchSpec arch, ModelOptions opt)
    : impl_(std::make_unique<Impl>(backend, std::move(arch), opt)) {
  Impl& m = *impl_;
  RN50_CHECK(m.opt.num_classes >= 1, "num_classes must be >= 1, got {}", m.opt.num_classes);
  const DType cd = m.opt.compute_dtype;
  RN50_CHECK(cd == DType::f32 || cd == DType::f16 || cd == DType::bf16,
             "compute dtype must be F32, F16 or BF16, got {}", dtype_name(cd));
  RN50_CHECK(backend.supports(Op::conv2d, cd, m.opt.layout),
             "the {} backend does not compute in {} with {} activations (AMP needs the cuda "
             "backend)",
             backend.name(), dtype_name(cd), layout_name(m.opt.layout));
  for (int s = 0; s < 4; ++s)
    RN50_CHECK(m.arch.layers[s] >= 1, "architecture '{}': stage {} has {} blocks (need >= 1)",
               m.arch.name, s + 1, m.arch.layers[s]);

  // Stem: conv1 7x7/2 pad 3, bn1 + relu (maxpool has no parameters).
  m.stem = m.add_unit("conv1", "bn1", 3, 64, 7, 2, 3, true);
  int64_t inplanes = 64;
  const int exp = m.arch.expansion();
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = int64_t{64} << s;
    const int stage_stride = s == 0 ? 1 : 2;
    for (int i = 0; i < m.arch.layers[s]; ++i) {
      const std::string pre = fmt::format("layer{}.{}.", s + 1, i);
      const int st = i == 0 ? stage_stride : 1;
      model_detail::Block b;
      if (m.arch.bottleneck) {
        // Bottleneck (v1.5): 1x1 reduce, 3x3 with the stride, 1x1 expand (no relu before join).
        b.units.push_back(m.add_unit(pre + "conv1", pre + "bn1", inplanes, planes, 1, 1, 0, true));
        b.units.push_back(m.add_unit(pre + "conv2", pre + "bn2", planes, planes, 3, st, 1, true));
        b.units.push_back(
            m.add_unit(pre + "conv3", pre + "bn3", planes, planes * exp, 1, 1, 0, false));
      } else {
        // BasicBlock: 3x3 with the stride, 3x3.
        b.units.push_back(m.add_unit(pre + "conv1", pre + "bn1", inplanes, planes, 3, st, 1, true));
        b.units.push_back(m.add_unit(pre + "conv2", pre + "bn2", planes, planes, 3, 1, 1, false));
      }
      if (st != 1 || inplanes != planes * exp)
        b.downsample = m.add_unit(pre + "downsample.0", pre + "downsample.1", inplanes,
                                  planes * exp, 1, st, 0, false);
      inplanes = planes * exp;
      m.blocks.push_back(std::move(b));
    }
  }
  m.feature_channels = inplanes;
  m.fc_w = m.add_param("fc.weight", {m.opt.num_classes, inplanes}, ParamKind::fc_weight);
  m.fc_b = m.add_param("fc.bias", {m.opt.num_classes}, ParamKind::fc_bias);

  // Slab layout: decayed parameters first (torchvision order among them), then the rest.
  int64_t off = 0;
  for (ParamInfo& p : m.params)
    if (is_decayed(p.kind)) p.offset = off, off += p.numel();
  m.decay_count = off;
  for (ParamInfo& p : m.params)
    if (!is_decayed(p.kind)) p.offset = off, off += p.numel();
  m.num_params = off;

  Backend& be = m.be;
  m.param_slab = be.alloc({m.num_params}, DType::f32);
  m.grad_slab = be.alloc({m.num_params}, DType::f32);
  be.zero(m.param_slab);
  be.zero(m.grad_slab);

  // Running statistics: [mean(C), var(C)] per BN in one f32 slab; counters on the host.
  int64_t stat_elems = 0;
  for (BnState& bn : m.bns) bn.stat_offset = stat_elems, stat_elems += 2 * bn.channels;
  m.stat_slab = be.alloc({stat_elems}, DType::f32);
  for (BnState& bn : m.bns) {
    bn.running_mean = m.stat_slab.slice0(bn.stat_offset, bn.stat_offset + bn.channels);
    bn.running_var =
        m.stat_slab.slice0(bn.stat_offset + bn.channels, bn.stat_offset + 2 * bn.channels);
  }
  m.nbt = Tensor::zeros({static_cast<int64_t>(m.bns.size())}, DType::i64);

  // The order backward() finishes gradients in (see resnet_schedule.cpp, ResNet::backward).
  auto unit_order = [&](int u) {
    m.ready_order.push_back(m.units[u].gamma_param);
    m.ready_order.push_back(m.units[u].beta_param);
    m.ready_order.push_back(m.units[u].conv_param);
  };
  m.ready_order = {m.fc_w, m.fc_b};
  for (auto bi = m.blocks.rbegin(); bi != m.blocks.rend(); ++bi) {
    for (auto ui = bi->units.rbegin(); ui != bi->units.rend(); ++ui) unit_order(*ui);
    if (bi->downsample >= 0) unit_order(bi->downsample);
  }
  unit_order(m.stem);

  // Compute copies of the conv/fc parameters (AMP dtype and/or the backend's weight layout).
  m.weight_layout = be.preferred_weight_layout(m.opt.layout);
  m.mirror = cd != DType::f32 || m.weight_layout != Layout::NCHW;
  if (m.mirror) {
    m.param_lp = be.alloc({m.num_params}, cd);
    m.grad_lp = be.alloc({m.num_params}, cd);
    be.zero(m.param_lp);
    be.zero(m.grad_lp);
    for (size_t i = 0; i < m.params.size(); ++i)
      if (is_mirrored_kind(m.params[i].kind)) m.mirrored.push_back(static_cast<int>(i));
  }

  for (ConvBnUnit& u : m.units) {
    u.w = m.compute_param_view(u.conv_param);
    u.dw = m.compute_grad_view(u.conv_param);
    u.gamma = m.param_view(u.gamma_param);
    u.dgamma = m.grad_view(u.gamma_param);
    u.beta = m.param_view(u.beta_param);
    u.dbeta = m.grad_view(u.beta_param);
  }
  m.fcw = m.compute_param_view(m.fc_w);
  m.dfcw = m.compute_grad_view(m.fc_w);
  m.fcb = m.compute_param_view(m.fc_b);
  m.dfcb = m.compute_grad_view(m.fc_b);

  // Parameters are zero until init() or load_state_dict(); running stats start at mean 0 /
  // var 1 as torch's.
  Tensor host_stats = Tensor::zeros({stat_elems}, DType::f32);
  for (const BnState& bn : m.bns)
    for (int64_t c = 0; c < bn.channels; ++c)
      host_stats.data_as<float>()[bn.stat_offset + bn.channels + c] = 1.f;
  be.copy(host_stats, m.stat_slab);
}

ResNet::~ResNet() = default;

const ArchSpec& ResNet::arch() const { return impl_->arch; }
const ModelOptions& ResNet::options() const { return impl_->opt; }
const std::vector<ParamInfo>& ResNet::params() const { return impl_->params; }
const std::vector<BufferInfo>& ResNet::buffers() const { return impl_->buffers; }
int64_t ResNet::num_params() const { return impl_->num_params; }
int64_t ResNet::decay_count() const { return impl_->decay_count; }
Tensor& ResNet::param_slab() { return impl_->param_slab; }
Tensor& ResNet::grad_slab() { return impl_->grad_slab; }
const Tensor& ResNet::forward_output() const { return impl_->logits; }
int64_t ResNet::plan_generation() const { return impl_->plan_generation; }

const std::vector<int>& ResNet::grad_ready_order() const { return impl_->ready_order; }
void ResNet::set_grad_ready_hook(std::function<void(int)> hook) {
  impl_->ready_hook = std::move(hook);
}

void ResNet::Impl::grad_done(int i) {
  if (mirror && is_mirrored_kind(params[i].kind)) {
    Tensor dst = grad_view(i);
    be.copy(compute_grad_view(i), dst);  // compute dtype/layout -> f32 OIHW (still loss-scaled)
  }
  if (ready_hook) ready_hook(i);
}

void ResNet::refresh_compute_params() {
  Impl& m = *impl_;
  if (!m.mirror) return;
  for (int i : m.mirrored) {
    Tensor dst = m.compute_param_view(i);
    m.be.copy(m.param_view(i), dst);  // f32 OIHW -> compute dtype, preferred layout
  }
}

void ResNet::add_batches_tracked(int64_t delta) {
  int64_t* c = impl_->nbt.data_as<int64_t>();
  for (int64_t i = 0; i < impl_->nbt.numel(); ++i) c[i] += delta;
}

Tensor ResNet::param(const std::string& name) {
  auto it = impl_->param_index.find(name);
  RN50_CHECK(it != impl_->param_index.end(), "{}: no parameter named '{}'", impl_->arch.name,
             name);
  return impl_->param_view(it->second);
}

Tensor ResNet::grad(const std::string& name) {
  auto it = impl_->param_index.find(name);
  RN50_CHECK(it != impl_->param_index.end(), "{}: no parameter named '{}'", impl_->arch.name,
             name);
  return impl_->grad_view(it->second);
}

Tensor ResNet::buffer(const std::string& name) {
  Impl& m = *impl_;
  auto it = m.buffer_index.find(name);
  RN50_CHECK(it != m.buffer_index.end(), "{}: no buffer named '{}'", m.arch.name, name);
  const BnState& bn = m.bns[m.buffer_bn[it->second]];
  switch (m.buffer_what[it->second]) {
    case 0: return bn.running_mean;
    case 1: return bn.running_var;
    default: {
      int64_t i = m.buffer_bn[it->second];
      return m.nbt.slice0(i, i + 1).reshape({});
    }
  }
}

}  // namespace rn50
