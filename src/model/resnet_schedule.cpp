// rn50: the explicit forward/backward schedule of ResNet over a Backend (no autograd).
//
// Forward (torchvision ResNet._forward_impl):
//   stem:   conv1 7x7/2 -> bn1+relu -> maxpool 3x3/2 pad 1
//   blocks: branch units (ConvBN[+ReLU]) ; shortcut = x or downsample(x) (1x1/s conv + BN);
//           out = relu(branch + shortcut)                         (Backend::add_relu_fwd)
//   head:   global average pool -> fc
// Backward walks the schedule in reverse. At a join, relu_bwd(out, d_out) is the gradient of
// both the branch output and the shortcut; the block input gradient is the sum of the branch's
// input gradient and the shortcut's (Backend::add).
//
// Memory: every forward activation that backward needs (conv output y and BN+ReLU output z of
// each unit, its batch statistics, the pool output, the block outputs) lives in one activation
// arena; BN outputs without ReLU (which only feed a join) share two scratch slots there. The
// backward pass needs only three rotating gradient slots, each as large as the largest
// activation, in a second arena. Both are allocated on the backend in options().layout when the
// input shape first needs more room, and otherwise re-viewed.
#include <algorithm>

#include "core/check.h"
#include "model/resnet_impl.h"

namespace rn50 {

using model_detail::Block;
using model_detail::ConvBnUnit;

namespace {

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }  // 64-byte aligned views

const Pool2dParams kMaxPool{3, 2, 1};

/// The slot in {0,1,2} that is neither a nor b (a may equal b).
int other_slot(int a, int b) {
  for (int s = 0; s < 3; ++s)
    if (s != a && s != b) return s;
  return -1;
}

}  // namespace

void ResNet::Impl::plan(int64_t n, int64_t h, int64_t w) {
  if (n == cur_n && h == cur_h && w == cur_w) return;
  const Layout L = opt.layout;

  // Shapes of every activation, in forward order.
  struct Req {
    Tensor* t;
    std::vector<int64_t> shape;
    Layout layout;
    bool stat = false;  ///< f32 statistics arena instead of the compute-dtype activation arena
  };
  const DType cd = opt.compute_dtype;
  std::vector<Req> reqs;
  // BN outputs without a ReLU (bn3 / downsample.1 / BasicBlock bn2) only feed the join: backward
  // does not need them, so they share two scratch slots (branch, shortcut) of the activation arena.
  std::vector<std::pair<ConvBnUnit*, std::vector<int64_t>>> scratch_z;
  int64_t max_act = 0;
  auto conv_out = [&](ConvBnUnit& u, int64_t ih, int64_t iw, int64_t& oh, int64_t& ow) {
    oh = (ih + 2 * u.conv.pad - u.kernel) / u.conv.stride + 1;
    ow = (iw + 2 * u.conv.pad - u.kernel) / u.conv.stride + 1;
    RN50_CHECK(ih + 2 * u.conv.pad >= u.kernel && iw + 2 * u.conv.pad >= u.kernel && oh >= 1 &&
                   ow >= 1,
               "{}: input {}x{} is too small (a convolution would see {}x{}); use H, W >= 32",
               arch.name, h, w, ih, iw);
    std::vector<int64_t> s{n, u.out_channels, oh, ow};
    reqs.push_back({&u.y, s, L});
    if (u.relu)
      reqs.push_back({&u.z, s, L});
    else
      scratch_z.push_back({&u, s});
    reqs.push_back({&u.save_mean, {u.out_channels}, Layout::NCHW, true});
    reqs.push_back({&u.save_var, {u.out_channels}, Layout::NCHW, true});
    max_act = std::max(max_act, numel_of(s));
  };
  int64_t oh, ow;
  conv_out(units[stem], h, w, oh, ow);
  const int64_t ph = (oh + 2 * kMaxPool.pad - kMaxPool.kernel) / kMaxPool.stride + 1;
  const int64_t pw = (ow + 2 * kMaxPool.pad - kMaxPool.kernel) / kMaxPool.stride + 1;
  RN50_CHECK(ph >= 1 && pw >= 1, "{}: input {}x{} is too small; use H, W >= 32", arch.name, h, w);
  reqs.push_back({&pool_out, {n, 64, ph, pw}, L});
  max_act = std::max(max_act, n * 64 * ph * pw);
  int64_t ch = ph, cw = pw;
  for (Block& b : blocks) {
    int64_t bh = ch, bw = cw;
    for (int ui : b.units) conv_out(units[ui], bh, bw, bh, bw);
    if (b.downsample >= 0) {
      int64_t dh, dw;
      conv_out(units[b.downsample], ch, cw, dh, dw);
    }
    std::vector<int64_t> s{n, units[b.units.back()].out_channels, bh, bw};
    reqs.push_back({&b.out, s, L});
    max_act = std::max(max_act, numel_of(s));
    ch = bh, cw = bw;
  }
  reqs.push_back({&pooled, {n, feature_channels}, Layout::NCHW});
  // Logits: the fc writes them in the compute dtype; under AMP they are converted into a
  // separate f32 tensor for the loss (and dlogits back into the compute dtype).
  const bool lp_logits = cd != DType::f32;
  reqs.push_back({lp_logits ? &logits_lp : &logits, {n, opt.num_classes}, Layout::NCHW});

  int64_t scratch = 0;
  for (const auto& [u, shape] : scratch_z) scratch = std::max(scratch, round16(numel_of(shape)));
  int64_t act_total = 2 * scratch, stat_total = 0;
  for (const Req& r : reqs) (r.stat ? stat_total : act_total) += round16(numel_of(r.shape));
  const int64_t slot = round16(max_act);
  const int64_t dlogits_elems = lp_logits ? round16(n * opt.num_classes) : 0;
  const int64_t grad_total = 3 * slot + round16(n * feature_channels) + dlogits_elems;

  // Drop every view first so that reallocation frees the old arenas before allocating.
  for (Req& r : reqs) *r.t = Tensor();
  for (auto& [u, shape] : scratch_z) u->z = Tensor();
  for (ConvBnUnit& u : units) u.x = Tensor();
  for (Block& b : blocks) b.in = Tensor();
  dpooled = Tensor();
  dlogits_lp = Tensor();
  if (lp_logits) logits = Tensor();
  if (!act_arena.defined() || act_arena.numel() < act_total) {
    act_arena = Tensor();
    act_arena = be.alloc({act_total}, cd);
  }
  if (!stat_arena.defined() || stat_arena.numel() < stat_total) {
    stat_arena = Tensor();
    stat_arena = be.alloc({stat_total}, DType::f32);
  }
  if (!grad_arena.defined() || grad_arena.numel() < grad_total) {
    grad_arena = Tensor();
    grad_arena = be.alloc({grad_total}, cd);
  }
  if (lp_logits) logits = be.alloc({n, opt.num_classes}, DType::f32);
  std::vector<bool> is_shortcut(units.size(), false);
  for (const Block& b : blocks)
    if (b.downsample >= 0) is_shortcut[b.downsample] = true;
  for (auto& [u, shape] : scratch_z) {
    const int64_t base = is_shortcut[u - units.data()] ? scratch : 0;
    u->z = act_arena.slice0(base, base + numel_of(shape)).reshape(shape, L);
  }
  int64_t off = 2 * scratch, stat_off = 0;
  for (Req& r : reqs) {
    const int64_t k = numel_of(r.shape);
    int64_t& o = r.stat ? stat_off : off;
    *r.t = (r.stat ? stat_arena : act_arena).slice0(o, o + k).reshape(r.shape, r.layout);
    o += round16(k);
  }
  slot_elems = slot;
  dpooled = grad_arena.slice0(3 * slot, 3 * slot + n * feature_channels)
                .reshape({n, feature_channels});
  if (lp_logits) {
    const int64_t b = 3 * slot + round16(n * feature_channels);
    dlogits_lp = grad_arena.slice0(b, b + n * opt.num_classes).reshape({n, opt.num_classes});
  }
  cur_n = n, cur_h = h, cur_w = w;
  ++plan_generation;
  have_train_state = false;
}

Tensor ResNet::Impl::slot(int i, const std::vector<int64_t>& shape) {
  const int64_t k = numel_of(shape);
  return grad_arena.slice0(i * slot_elems, i * slot_elems + k).reshape(shape, opt.layout);
}

void ResNet::Impl::unit_forward(ConvBnUnit& u, const Tensor& x, bool train) {
  const BatchNormParams bp{opt.bn_eps, opt.bn_momentum, u.relu};
  model_detail::BnState& bn = bns[u.bn];
  be.conv2d_fwd(u.conv, x, u.w, u.y);
  if (train) {
    u.x = x;
    be.batchnorm_fwd_train(bp, u.y, u.gamma, u.beta, bn.running_mean, bn.running_var, u.z,
                           u.save_mean, u.save_var);
  } else {
    u.x = Tensor();
    be.batchnorm_fwd_infer(bp, u.y, u.gamma, u.beta, bn.running_mean, bn.running_var, u.z);
  }
}

void ResNet::Impl::unit_backward(ConvBnUnit& u, const Tensor& dz, Tensor& dconv, Tensor* dx) {
  const BatchNormParams bp{opt.bn_eps, opt.bn_momentum, u.relu};
  // Without a fused ReLU the BN output is not needed (and lives in shared scratch).
  be.batchnorm_bwd(bp, u.y, u.relu ? u.z : Tensor(), dz, u.gamma, u.save_mean, u.save_var, dconv,
                   u.dgamma, u.dbeta);
  grad_done(u.gamma_param);
  grad_done(u.beta_param);
  be.conv2d_bwd_weights(u.conv, u.x, dconv, u.dw);
  grad_done(u.conv_param);
  if (dx) be.conv2d_bwd_data(u.conv, dconv, u.w, *dx);
}

const Tensor& ResNet::forward(const Tensor& x, bool train) {
  Impl& m = *impl_;
  RN50_CHECK(x.defined() && x.ndim() == 4 && x.c() == 3 && x.dtype() == m.opt.compute_dtype,
             "{} forward: input must be {} (N,3,H,W), got {}", m.arch.name,
             dtype_name(m.opt.compute_dtype),
             x.defined() ? x.str() : std::string("an undefined tensor"));
  RN50_CHECK(x.layout() == m.opt.layout && x.device() == m.be.device(),
             "{} forward: input {} must be in the model layout {} on {}", m.arch.name, x.str(),
             layout_name(m.opt.layout), m.be.device().str());
  RN50_CHECK(x.n() >= 1, "{} forward: empty batch {}", m.arch.name, x.str());
  m.have_train_state = false;
  m.plan(x.n(), x.h(), x.w());

  if (train) {
    // torch BatchNorm2d.forward: num_batches_tracked += 1 on every training forward.
    int64_t* c = m.nbt.data_as<int64_t>();
    for (int64_t i = 0; i < m.nbt.numel(); ++i) ++c[i];
  }
  ConvBnUnit& stem = m.units[m.stem];
  m.unit_forward(stem, x, train);
  m.be.maxpool2d_fwd(kMaxPool, stem.z, m.pool_out);
  Tensor cur = m.pool_out;
  for (Block& b : m.blocks) {
    b.in = train ? cur : Tensor();
    Tensor t = cur;
    for (int ui : b.units) {
      m.unit_forward(m.units[ui], t, train);
      t = m.units[ui].z;
    }
    Tensor shortcut = cur;
    if (b.downsample >= 0) {
      m.unit_forward(m.units[b.downsample], cur, train);
      shortcut = m.units[b.downsample].z;
    }
    m.be.add_relu_fwd(t, shortcut, b.out);
    cur = b.out;
  }
  m.be.global_avgpool_fwd(cur, m.pooled);
  if (m.logits_lp.defined()) {
    m.be.linear_fwd(m.pooled, m.fcw, m.fcb, m.logits_lp);
    m.be.copy(m.logits_lp, m.logits);  // compute dtype -> f32 for the loss
  } else {
    m.be.linear_fwd(m.pooled, m.fcw, m.fcb, m.logits);
  }
  m.have_train_state = train;
  return m.logits;
}

void ResNet::backward(const Tensor& dlogits) {
  Impl& m = *impl_;
  RN50_CHECK(m.have_train_state,
             "{} backward: needs a preceding forward(train=true) (after the last eval forward, "
             "init or load_state_dict)",
             m.arch.name);
  RN50_CHECK(dlogits.defined() && dlogits.shape() == m.logits.shape() &&
                 dlogits.dtype() == DType::f32,
             "{} backward: dlogits must be F32 {}, got {}", m.arch.name, m.logits.str(),
             dlogits.defined() ? dlogits.str() : std::string("an undefined tensor"));

  if (m.dlogits_lp.defined()) {
    m.be.copy(dlogits, m.dlogits_lp);  // f32 -> compute dtype (torch: the half logits' grad)
    m.be.linear_bwd(m.pooled, m.fcw, m.dlogits_lp, m.dpooled, m.dfcw, m.dfcb);
  } else {
    m.be.linear_bwd(m.pooled, m.fcw, dlogits, m.dpooled, m.dfcw, m.dfcb);
  }
  m.grad_done(m.fc_w);
  m.grad_done(m.fc_b);
  int cur = 0;
  Tensor d = m.slot(cur, m.blocks.back().out.shape());
  m.be.global_avgpool_bwd(m.dpooled, d);

  for (auto bi = m.blocks.rbegin(); bi != m.blocks.rend(); ++bi) {
    Block& b = *bi;
    // d (slot cur) is the gradient of the join output; the join's ReLU mask gives dj, the
    // gradient of both the branch output and the shortcut output.
    const int js = other_slot(cur, cur);
    Tensor dj = m.slot(js, b.out.shape());
    m.be.relu_bwd(b.out, d, dj);

    // Branch, last unit first. dj must survive for the shortcut, so the first unit's input
    // gradient goes to the third slot; later ones overwrite their (consumed) incoming gradient.
    int gs = js;
    Tensor g = dj;
    for (auto ui = b.units.rbegin(); ui != b.units.rend(); ++ui) {
      ConvBnUnit& u = m.units[*ui];
      const int cs = other_slot(js, gs);
      Tensor dconv = m.slot(cs, u.y.shape());
      const int xs = gs != js ? gs : other_slot(js, cs);
      Tensor dx = m.slot(xs, u.x.shape());
      m.unit_backward(u, g, dconv, &dx);
      gs = xs;
      g = dx;
    }

    // Shortcut and the block-input gradient (branch + shortcut).
    const int fs = other_slot(js, gs);
    Tensor din = m.slot(fs, b.in.shape());
    if (b.downsample >= 0) {
      ConvBnUnit& u = m.units[b.downsample];
      Tensor dconv = m.slot(fs, u.y.shape());
      Tensor dx = m.slot(js, u.x.shape());  // dj is consumed by the BN backward before this
      m.unit_backward(u, dj, dconv, &dx);
      m.be.add(g, dx, din);                  // dconv (slot fs) is dead by now
    } else {
      m.be.add(g, dj, din);
    }
    d = din;
    cur = fs;
  }

  // Stem: maxpool backward, then bn1+relu and conv1 (no input gradient needed).
  ConvBnUnit& stem = m.units[m.stem];
  const int ps = other_slot(cur, cur);
  Tensor dstem = m.slot(ps, stem.z.shape());
  m.be.maxpool2d_bwd(kMaxPool, stem.z, m.pool_out, d, dstem);
  Tensor dconv = m.slot(other_slot(cur, ps), stem.y.shape());
  m.unit_backward(stem, dstem, dconv, nullptr);
}

}  // namespace rn50
