// rn50: ResNet construction from the network description (rn50/graph.h: layers, parameters and
// the slab layout) — parameter and gradient slabs (conv weights in the backend's preferred
// layout), the AMP compute copies, the running-statistics storage — and the simple accessors.
#include <algorithm>
#include <utility>

#include "core/check.h"
#include "model/resnet_impl.h"

namespace rn50 {

using model_detail::BnState;

Tensor ResNet::Impl::layout_view(const Tensor& slab, int i, int64_t base) const {
  const ParamInfo& p = desc.params[i];
  // Conv weights in the backend's preferred weight layout; vectors and the fc weight row-major.
  const Layout l = p.shape.size() == 4 ? weight_layout : Layout::NCHW;
  return slab.slice0(p.offset - base, p.offset - base + p.numel()).reshape(p.shape, l);
}

namespace {
bool is_mirrored_kind(ParamKind k) {
  return k == ParamKind::conv_weight || k == ParamKind::fc_weight || k == ParamKind::fc_bias;
}
}  // namespace

bool ResNet::Impl::half_master(int i) const {
  return pure && is_mirrored_kind(desc.params[i].kind);
}

Tensor ResNet::Impl::param_view(int i) {
  return half_master(i) ? layout_view(param_lp, i) : layout_view(param_slab, i, f32_base);
}
Tensor ResNet::Impl::grad_view(int i) {
  return half_master(i) ? layout_view(grad_lp, i) : layout_view(grad_slab, i, f32_base);
}

Tensor ResNet::Impl::compute_param_view(int i) {
  if (!mirror || !is_mirrored_kind(desc.params[i].kind)) return param_view(i);
  return layout_view(param_lp, i);
}

Tensor ResNet::Impl::compute_grad_view(int i) {
  if (!mirror || !is_mirrored_kind(desc.params[i].kind)) return grad_view(i);
  return layout_view(grad_lp, i);
}

void ResNet::Impl::convert_ranges(const Tensor& from, Tensor& to) {
  for (const auto& [a, b] : mirrored_ranges) {
    Tensor dst = to.slice0(a, b);
    be.copy(from.slice0(a, b), dst);
  }
}

ResNet::ResNet(Backend& backend, ArchSpec arch, ModelOptions opt)
    : impl_(std::make_unique<Impl>(backend, describe(arch, opt.num_classes, opt.input_channels),
                                   opt)) {
  Impl& m = *impl_;
  const NetworkDesc& d = m.desc;
  const DType cd = m.opt.compute_dtype;
  // F64: only the reference backend computes in it (float64 golden comparisons in the tests).
  RN50_CHECK(cd == DType::f32 || cd == DType::f16 || cd == DType::bf16 ||
                 (cd == DType::f64 && backend.name() == "ref"),
             "compute dtype must be F32, F16 or BF16, got {}", dtype_name(cd));
  RN50_CHECK(backend.supports(Op::conv2d, cd, m.opt.layout),
             "the {} backend does not compute in {} with {} activations (fp16 AMP needs the cuda "
             "backend; bf16 needs cuda, or oneDNN on a CPU with AVX-512)",
             backend.name(), dtype_name(cd), layout_name(m.opt.layout));
  for (size_t i = 0; i < d.params.size(); ++i) m.param_index[d.params[i].name] = static_cast<int>(i);
  for (size_t i = 0; i < d.buffers.size(); ++i)
    m.buffer_index[d.buffers[i].name] = static_cast<int>(i);

  Backend& be = m.be;
  m.pure = m.opt.pure_half;
  RN50_CHECK(!m.pure || cd == DType::f16,
             "pure fp16 (--use-pure-fp16) keeps the weights in F16: the compute dtype must be "
             "F16, got {}",
             dtype_name(cd));
  RN50_CHECK(!m.pure || !m.opt.qat,
             "pure fp16 (--use-pure-fp16) and QAT (--qat) together are not built: QAT "
             "fake-quantizes f32 master weights, which pure fp16 does not keep; use --amp "
             "without --use-pure-fp16 for QAT");
  // f32 slabs: every parameter, or under pure fp16 only the span of the f32 (BatchNorm)
  // parameters, which the slab layout keeps between the decayed conv/fc weights and fc.bias.
  int64_t f32_end = d.num_params;
  if (m.pure) {
    int64_t lo = d.num_params, hi = 0;
    for (const ParamInfo& p : d.params)
      if (!is_mirrored_kind(p.kind)) {
        lo = std::min(lo, p.offset);
        hi = std::max(hi, p.offset + p.numel());
      }
    for (const ParamInfo& p : d.params)
      RN50_CHECK(!is_mirrored_kind(p.kind) || p.offset + p.numel() <= lo || p.offset >= hi,
                 "pure fp16: {} lies inside the span of the f32 parameters [{}, {}) of the "
                 "slab layout",
                 p.name, lo, hi);
    m.f32_base = std::min(lo, hi);
    f32_end = hi;
  }
  m.param_slab = be.alloc({f32_end - m.f32_base}, DType::f32);
  m.grad_slab = be.alloc({f32_end - m.f32_base}, DType::f32);
  be.zero(m.param_slab);
  be.zero(m.grad_slab);

  // Running statistics: [mean(C), var(C)] per BN in one f32 slab; counters on the host.
  m.buffer_bn.assign(d.buffers.size(), -1);
  m.buffer_what.assign(d.buffers.size(), -1);
  int64_t stat_elems = 0;
  for (size_t li = 0; li < d.layers.size(); ++li) {
    const Layer& l = d.layers[li];
    switch (l.kind) {
      case LayerKind::batchnorm: break;
      case LayerKind::input:
      case LayerKind::conv:
      case LayerKind::relu:
      case LayerKind::add:
      case LayerKind::maxpool:
      case LayerKind::global_avgpool:
      case LayerKind::fc:
        continue;  // no running buffers
    }
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

  // Master conv weights in the backend's preferred layout (KRSC on CUDA with NHWC); under AMP,
  // compute copies of the conv/fc parameters in the compute dtype, same layout, same offsets.
  m.weight_layout = be.preferred_weight_layout(m.opt.layout);
  m.mirror = cd != DType::f32;
  if (m.mirror) {
    m.param_lp = be.alloc({d.num_params}, cd);
    m.grad_lp = be.alloc({d.num_params}, cd);
    be.zero(m.param_lp);
    be.zero(m.grad_lp);
    // The mirrored parameters as maximal contiguous ranges of the slab (ResNet: the decayed
    // prefix of conv and fc weights, and fc.bias).
    std::vector<std::pair<int64_t, int64_t>> r;
    for (const ParamInfo& p : d.params)
      if (is_mirrored_kind(p.kind)) r.emplace_back(p.offset, p.offset + p.numel());
    std::sort(r.begin(), r.end());
    for (const auto& [a, b] : r) {
      if (!m.mirrored_ranges.empty() && m.mirrored_ranges.back().second == a)
        m.mirrored_ranges.back().second = b;
      else
        m.mirrored_ranges.emplace_back(a, b);
    }
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
int64_t ResNet::master_offset() const { return impl_->f32_base; }
Tensor& ResNet::compute_param_slab() { return impl_->param_lp; }
Tensor& ResNet::compute_grad_slab() { return impl_->grad_lp; }
std::vector<std::pair<int64_t, int64_t>> ResNet::mirrored_ranges() const {
  const Impl& m = *impl_;
  if (!m.mirror || m.pure) return {};
  return m.mirrored_ranges;
}
void ResNet::set_grads_in_compute_slab(bool on) { impl_->grads_stay_lp = on; }
bool ResNet::grads_in_compute_slab() const { return impl_->grads_only_lp(); }
std::vector<std::pair<int64_t, int64_t>> ResNet::half_ranges() const {
  return impl_->pure ? impl_->mirrored_ranges : std::vector<std::pair<int64_t, int64_t>>{};
}
bool ResNet::is_half_master(const ParamInfo& p) const {
  return impl_->pure && is_mirrored_kind(p.kind);
}
Layout ResNet::weight_layout() const { return impl_->weight_layout; }
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
  if (!ready_hook) return;  // without a hook, backward converts whole ranges at its end
  if (mirror && !pure && is_mirrored_kind(desc.params[i].kind)) {
    Tensor dst = grad_view(i);
    be.copy(compute_grad_view(i), dst);  // compute dtype -> f32, same layout (still scaled)
  }
  ready_hook(i);
}

void ResNet::refresh_compute_params() {
  Impl& m = *impl_;
  // f32 -> compute dtype; pure fp16 has no f32 copy of these parameters.
  if (m.mirror && !m.pure) m.convert_ranges(m.param_slab, m.param_lp);
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
