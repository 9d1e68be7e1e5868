// rn50: ResNet construction from the network description (rn50/graph.h: layers, parameters and
// the slab layout) — parameter and gradient slabs, the compute copies, the running-statistics
// storage — and the simple accessors.
#include <utility>

#include "core/check.h"
#include "model/resnet_impl.h"

namespace rn50 {

using model_detail::BnState;

Tensor ResNet::Impl::param_view(int i) {
  const ParamInfo& p = desc.params[i];
  return param_slab.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, Layout::NCHW);
}

Tensor ResNet::Impl::grad_view(int i) {
  const ParamInfo& p = desc.params[i];
  return grad_slab.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, Layout::NCHW);
}

namespace {
bool is_mirrored_kind(ParamKind k) {
  return k == ParamKind::conv_weight || k == ParamKind::fc_weight || k == ParamKind::fc_bias;
}
}  // namespace

Tensor ResNet::Impl::compute_param_view(int i) {
  const ParamInfo& p = desc.params[i];
  if (!mirror || !is_mirrored_kind(p.kind)) return param_view(i);
  const Layout l = p.shape.size() == 4 ? weight_layout : Layout::NCHW;
  return param_lp.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, l);
}

Tensor ResNet::Impl::compute_grad_view(int i) {
  const ParamInfo& p = desc.params[i];
  if (!mirror || !is_mirrored_kind(p.kind)) return grad_view(i);
  const Layout l = p.shape.size() == 4 ? weight_layout : Layout::NCHW;
  return grad_lp.slice0(p.offset, p.offset + p.numel()).reshape(p.shape, l);
}

ResNet::ResNet(Backend& backend, ArchSpec arch, ModelOptions opt)
    : impl_(std::make_unique<Impl>(backend, describe(arch, opt.num_classes), opt)) {
  Impl& m = *impl_;
  const NetworkDesc& d = m.desc;
  const DType cd = m.opt.compute_dtype;
  RN50_CHECK(cd == DType::f32 || cd == DType::f16 || cd == DType::bf16,
             "compute dtype must be F32, F16 or BF16, got {}", dtype_name(cd));
  RN50_CHECK(backend.supports(Op::conv2d, cd, m.opt.layout),
             "the {} backend does not compute in {} with {} activations (AMP needs the cuda "
             "backend)",
             backend.name(), dtype_name(cd), layout_name(m.opt.layout));
  for (size_t i = 0; i < d.params.size(); ++i) m.param_index[d.params[i].name] = static_cast<int>(i);
  for (size_t i = 0; i < d.buffers.size(); ++i)
    m.buffer_index[d.buffers[i].name] = static_cast<int>(i);

  Backend& be = m.be;
  m.param_slab = be.alloc({d.num_params}, DType::f32);
  m.grad_slab = be.alloc({d.num_params}, DType::f32);
  be.zero(m.param_slab);
  be.zero(m.grad_slab);

  // Running statistics: [mean(C), var(C)] per BN in one f32 slab; counters on the host.
  m.buffer_bn.assign(d.buffers.size(), -1);
  m.buffer_what.assign(d.buffers.size(), -1);
  int64_t stat_elems = 0;
  for (size_t li = 0; li < d.layers.size(); ++li) {
    const Layer& l = d.layers[li];
    if (l.kind != LayerKind::batchnorm) continue;
    model_detail::BnState bn;
    bn.layer = static_cast<int>(li);
    bn.channels = l.channels;
    bn.stat_offset = stat_elems;
    stat_elems += 2 * l.channels;
    for (int k = 0; k < 3; ++k) {
      m.buffer_bn[l.buffers[k]] = static_cast<int>(m.bns.size());
      m.buffer_what[l.buffers[k]] = k;
    }
    m.bns.push_back(bn);
  }
  m.stat_slab = be.alloc({stat_elems}, DType::f32);
  for (BnState& bn : m.bns) {
    bn.running_mean = m.stat_slab.slice0(bn.stat_offset, bn.stat_offset + bn.channels);
    bn.running_var =
        m.stat_slab.slice0(bn.stat_offset + bn.channels, bn.stat_offset + 2 * bn.channels);
  }
  m.nbt = Tensor::zeros({static_cast<int64_t>(m.bns.size())}, DType::i64);

  // Compute copies of the conv/fc parameters (AMP dtype and/or the backend's weight layout).
  m.weight_layout = be.preferred_weight_layout(m.opt.layout);
  m.mirror = cd != DType::f32 || m.weight_layout != Layout::NCHW;
  if (m.mirror) {
    m.param_lp = be.alloc({d.num_params}, cd);
    m.grad_lp = be.alloc({d.num_params}, cd);
    be.zero(m.param_lp);
    be.zero(m.grad_lp);
    for (size_t i = 0; i < d.params.size(); ++i)
      if (is_mirrored_kind(d.params[i].kind)) m.mirrored.push_back(static_cast<int>(i));
  }

  // The training schedule walked from the description (schedule.cpp).
  m.build_schedule();

  // Parameters are zero until init() or load_state_dict(); running stats start at mean 0 /
  // var 1 as torch's.
  Tensor host_stats = Tensor::zeros({stat_elems}, DType::f32);
  for (const BnState& bn : m.bns)
    for (int64_t c = 0; c < bn.channels; ++c)
      host_stats.data_as<float>()[bn.stat_offset + bn.channels + c] = 1.f;
  be.copy(host_stats, m.stat_slab);
}

ResNet::~ResNet() = default;

const ArchSpec& ResNet::arch() const { return impl_->desc.arch; }
const NetworkDesc& ResNet::desc() const { return impl_->desc; }
const ModelOptions& ResNet::options() const { return impl_->opt; }
const std::vector<ParamInfo>& ResNet::params() const { return impl_->desc.params; }
const std::vector<BufferInfo>& ResNet::buffers() const { return impl_->desc.buffers; }
int64_t ResNet::num_params() const { return impl_->desc.num_params; }
int64_t ResNet::decay_count() const { return impl_->desc.decay_count; }
Tensor& ResNet::param_slab() { return impl_->param_slab; }
Tensor& ResNet::grad_slab() { return impl_->grad_slab; }
const Tensor& ResNet::forward_output() const { return impl_->logits; }
int64_t ResNet::plan_generation() const { return impl_->plan_generation; }

ResNet::MemoryPlan ResNet::memory_plan() const {
  const Impl& m = *impl_;
  MemoryPlan p;
  p.grad_slots = m.num_grad_slots;
  p.scratch_slots = m.num_scratch_slots;
  if (m.act_arena.defined()) p.activation_bytes = static_cast<int64_t>(m.act_arena.nbytes());
  if (m.grad_arena.defined()) p.gradient_bytes = static_cast<int64_t>(m.grad_arena.nbytes());
  return p;
}

const std::vector<int>& ResNet::grad_ready_order() const { return impl_->ready_order; }
void ResNet::set_grad_ready_hook(std::function<void(int)> hook) {
  impl_->ready_hook = std::move(hook);
}

void ResNet::Impl::grad_done(int i) {
  if (mirror && is_mirrored_kind(desc.params[i].kind)) {
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
  RN50_CHECK(it != impl_->param_index.end(), "{}: no parameter named '{}'", impl_->desc.arch.name,
             name);
  return impl_->param_view(it->second);
}

Tensor ResNet::grad(const std::string& name) {
  auto it = impl_->param_index.find(name);
  RN50_CHECK(it != impl_->param_index.end(), "{}: no parameter named '{}'", impl_->desc.arch.name,
             name);
  return impl_->grad_view(it->second);
}

Tensor ResNet::buffer(const std::string& name) {
  Impl& m = *impl_;
  auto it = m.buffer_index.find(name);
  RN50_CHECK(it != m.buffer_index.end(), "{}: no buffer named '{}'", m.desc.arch.name, name);
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
