// rn50: the training schedule of ResNet over a Backend (no autograd), walked from the network
// description (rn50/graph.h).
//
// Steps: the description's layers fused into what the backend computes in one go —
//   conv -> batchnorm [-> relu]  a unit: conv2d_fwd, then batchnorm_fwd_train/infer (ReLU fused)
//   add -> relu                  a join: add_relu_fwd
//   maxpool, global_avgpool, fc  one layer each
// Where the backend fuses a block's last BatchNorm with the join after it (supports
// Op::batchnorm_add_relu: NHWC on the CPU, bf16 and f32; CUDA with RN50_CUDA_BN_JOIN=fused),
// the training forward runs that unit's BN and its join as one batchnorm_add_relu_fwd_train,
// which writes the join's output (the BN's own output is never materialised: its backward,
// without a ReLU, does not read it); the unit is the join's input computed last (a
// downsampling block's shortcut BN or its last BN). Its backward is fused the same way:
// batchnorm_add_relu_bwd takes the join's output gradient (one or two parts) and writes, in the
// first part's slot, the join's input gradient for its other input, besides the BN's own
// backward.
// Any other sequence is rejected with an Error naming the layer.
//
// Forward runs the steps in order. Backward runs them in reverse; a value read by several steps
// (a block input: its branch and its shortcut) receives the sum of their gradients (add). At a
// join, relu_bwd(out, d_out) is the gradient of both inputs, shared by reference; when the join's
// output is such a block input, its two gradient parts go to add_relu_bwd, which sums and masks
// in one pass (the stem's maxpool output, the first block's input, still gets an add).
//
// Memory (planned by walking the steps, identically at construction and for every input shape):
//   activation arena   every output backward needs (a unit's conv output y and its output when
//                      a ReLU mask or a later weight gradient reads it, pool and join outputs,
//                      the pooled features), each unit's batch statistics (statistics arena),
//                      and a few scratch slots shared by transient outputs (BN outputs without
//                      a ReLU, which only feed a join), assigned by liveness;
//   gradient arena     num_grad_slots rotating slots, each as large as the largest activation,
//                      assigned by liveness in the backward walk (a slot is reused as soon as
//                      the op that reads it last has been issued): 3 for every ResNet.
// Both arenas are allocated on the backend in options().layout when an input shape first needs
// more room, and otherwise re-viewed.
#include <algorithm>

#include "core/check.h"
#include "model/resnet_impl.h"

namespace rn50 {

using model_detail::kInputValue;
using model_detail::Step;
using model_detail::StepKind;

namespace {

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }  // 64-byte aligned views

/// Reference-counted slots: alloc() takes the lowest free slot, release() drops a reference.
class SlotPool {
 public:
  int alloc() {
    for (size_t i = 0; i < refs_.size(); ++i)
      if (refs_[i] == 0) {
        refs_[i] = 1;
        return static_cast<int>(i);
      }
    refs_.push_back(1);
    return static_cast<int>(refs_.size()) - 1;
  }
  void retain(int s) { ++refs_[static_cast<size_t>(s)]; }
  void release(int s) { --refs_[static_cast<size_t>(s)]; }
  int high_water() const { return static_cast<int>(refs_.size()); }

 private:
  std::vector<int> refs_;
};

}  // namespace

void ResNet::Impl::build_schedule() {
  const NetworkDesc& d = desc;
  const std::vector<std::vector<int>> cons = d.consumers();
  std::vector<int> value_of(d.layers.size(), kInputValue - 1);  // layer -> value id
  auto only_consumer = [&](int layer, LayerKind kind) {
    const auto& c = cons[static_cast<size_t>(layer)];
    return c.size() == 1 && d.layers[static_cast<size_t>(c[0])].kind == kind ? c[0] : -1;
  };
  auto input_value = [&](const Layer& l, size_t k) {
    const int v = value_of[static_cast<size_t>(l.inputs[k])];
    RN50_CHECK(v >= kInputValue, "{}: layer '{}' reads '{}', which no step produces",
               d.arch.name, l.name, d.layers[static_cast<size_t>(l.inputs[k])].name);
    return v;
  };
  std::vector<bool> covered(d.layers.size(), false);
  for (size_t li = 0; li < d.layers.size(); ++li) {
    if (covered[li]) continue;
    const Layer& l = d.layers[li];
    Step s;
    switch (l.kind) {
      case LayerKind::input:
        value_of[li] = kInputValue;
        continue;
      case LayerKind::conv: {
        const int bn = only_consumer(static_cast<int>(li), LayerKind::batchnorm);
        RN50_CHECK(bn >= 0, "{}: conv '{}' must feed exactly one batchnorm (the only conv the "
                   "training schedule runs is conv+BN)", d.arch.name, l.name);
        const Layer& b = d.layers[static_cast<size_t>(bn)];
        s.kind = StepKind::unit;
        s.conv_layer = static_cast<int>(li);
        s.bn_layer = bn;
        s.conv = Conv2dParams{l.conv.stride, l.conv.pad};
        s.conv_param = l.params[0];
        s.gamma_param = b.params[0];
        s.beta_param = b.params[1];
        for (size_t k = 0; k < bns.size(); ++k)
          if (bns[k].layer == bn) s.bn = static_cast<int>(k);
        const int relu = only_consumer(bn, LayerKind::relu);
        s.relu = relu >= 0;
        s.layer = s.relu ? relu : bn;
        covered[static_cast<size_t>(bn)] = true;
        if (s.relu) covered[static_cast<size_t>(relu)] = true;
        break;
      }
      case LayerKind::add: {
        const int relu = only_consumer(static_cast<int>(li), LayerKind::relu);
        RN50_CHECK(relu >= 0 && l.inputs.size() == 2,
                   "{}: add '{}' must take two inputs and feed exactly one relu (the training "
                   "schedule runs add+ReLU)", d.arch.name, l.name);
        s.kind = StepKind::join;
        s.layer = relu;
        covered[static_cast<size_t>(relu)] = true;
        break;
      }
      case LayerKind::maxpool:
        s.kind = StepKind::maxpool;
        s.layer = static_cast<int>(li);
        s.pool = Pool2dParams{l.pool.kernel, l.pool.stride, l.pool.pad};
        break;
      case LayerKind::global_avgpool:
        s.kind = StepKind::avgpool;
        s.layer = static_cast<int>(li);
        break;
      case LayerKind::fc:
        RN50_CHECK(fc_step < 0, "{}: more than one fc layer", d.arch.name);
        s.kind = StepKind::fc;
        s.layer = static_cast<int>(li);
        break;
      case LayerKind::batchnorm:
      case LayerKind::relu:
        // Reached only when not fused into the unit or join before it.
        RN50_FAIL("{}: the training schedule cannot run layer '{}' ({}) on its own (it runs a "
                  "batchnorm after its conv, a relu after a conv + batchnorm or an add)",
                  d.arch.name, l.name, layer_kind_name(l.kind));
    }
    for (size_t k = 0; k < l.inputs.size(); ++k) s.in.push_back(input_value(l, k));
    const int id = static_cast<int>(steps.size());
    if (s.kind == StepKind::fc) fc_step = id;
    value_of[static_cast<size_t>(s.layer)] = id;
    steps.push_back(std::move(s));
  }
  RN50_CHECK(fc_step == static_cast<int>(steps.size()) - 1,
             "{}: the fc layer must be the last step", d.arch.name);
  RN50_CHECK(value_of.back() == fc_step, "{}: the last layer must be the fc", d.arch.name);

  // Which outputs backward reads: the inputs of units, pools and the fc, and the outputs whose
  // backward needs them (a fused ReLU's mask, a join's mask, the maxpool's argmax).
  for (Step& s : steps) {
    switch (s.kind) {
      case StepKind::unit: s.saved = s.relu; break;     // the ReLU's mask
      case StepKind::join: s.saved = true; break;       // the ReLU's mask
      case StepKind::maxpool: s.saved = true; break;    // the maxima, read by maxpool2d_bwd
      case StepKind::fc: s.saved = true; break;         // the logits, read by the loss
      case StepKind::avgpool: s.saved = false; break;   // its backward reads no output
    }
  }
  for (const Step& s : steps)
    if (s.kind != StepKind::join)
      for (int v : s.in)
        if (v >= 0) steps[static_cast<size_t>(v)].saved = true;
  // Transient outputs share scratch slots: free after their last reader.
  std::vector<int> last_reader(steps.size(), -1);
  for (size_t i = 0; i < steps.size(); ++i)
    for (int v : steps[i].in)
      if (v >= 0) last_reader[static_cast<size_t>(v)] = static_cast<int>(i);
  SlotPool scratch;
  for (size_t i = 0; i < steps.size(); ++i) {
    Step& s = steps[i];
    if (!s.saved) s.scratch = scratch.alloc();
    for (int v : s.in)
      if (v >= 0 && !steps[static_cast<size_t>(v)].saved &&
          last_reader[static_cast<size_t>(v)] == static_cast<int>(i))
        scratch.release(steps[static_cast<size_t>(v)].scratch);
  }
  num_scratch_slots = scratch.high_water();

  // Training forward: a join fused into the BN of the input computed last, where that input is
  // a unit without ReLU that only the join reads (QAT quantizes the join's inputs: not fused).
  if (be.supports(Op::batchnorm_add_relu, opt.compute_dtype, opt.layout) && !opt.qat) {
    for (size_t j = 0; j < steps.size(); ++j) {
      Step& s = steps[j];
      if (s.kind != StepKind::join) continue;
      const int u = std::max(s.in[0], s.in[1]);
      if (u < 0) continue;  // both inputs are the network input
      Step& unit = steps[static_cast<size_t>(u)];
      if (unit.kind == StepKind::unit && !unit.relu && !unit.saved) {
        unit.fused_join = static_cast<int>(j);
        s.fused_unit = u;
      }
    }
  }

  // Slab views of each unit's parameters and the fc's.
  for (Step& s : steps) {
    switch (s.kind) {
      case StepKind::unit:
        s.w = compute_param_view(s.conv_param);
        s.dw = compute_grad_view(s.conv_param);
        s.wq = s.w;
        s.gamma = param_view(s.gamma_param);
        s.dgamma = grad_view(s.gamma_param);
        s.beta = param_view(s.beta_param);
        s.dbeta = grad_view(s.beta_param);
        break;
      case StepKind::fc: {
        const Layer& fc = d.layers[static_cast<size_t>(s.layer)];
        s.w = compute_param_view(fc.params[0]);
        s.dw = compute_grad_view(fc.params[0]);
        s.wq = s.w;
        s.beta = compute_param_view(fc.params[1]);   // the fc bias
        s.dbeta = compute_grad_view(fc.params[1]);
        break;
      }
      case StepKind::join:
      case StepKind::maxpool:
      case StepKind::avgpool:
        break;  // no parameters
    }
  }

  // QAT: quantizers on the steps' inputs, their ranges, the fake-quantized weight slab.
  if (opt.qat) build_qat();

  // Gradient slots and the gradient-ready order: a dry run of backward.
  walk_backward(false, nullptr);
}

const Tensor& ResNet::Impl::value(int v) const {
  return v == kInputValue ? x_in : steps[static_cast<size_t>(v)].out;
}

void ResNet::Impl::plan(int64_t n, int64_t h, int64_t w) {
  if (n == cur_n && h == cur_h && w == cur_w) return;
  const Layout L = opt.layout;
  const DType cd = opt.compute_dtype;
  const std::vector<std::vector<int64_t>> shape = layer_shapes(desc, n, h, w);
  const bool lp_logits = cd != DType::f32;

  // Drop every view first so that reallocation frees the old arenas before allocating.
  for (Step& s : steps) s.out = s.y = s.save_mean = s.save_var = Tensor();
  for (Tensor& t : qat_values) t = Tensor();
  logits = dlogits_lp = x_in = Tensor();

  int64_t scratch_elems = 0, max_act = 0, act_total = 0, stat_total = 0;
  for (const Step& s : steps) {
    const int64_t out = numel_of(shape[static_cast<size_t>(s.layer)]);
    max_act = std::max(max_act, out);
    if (s.saved)
      act_total += round16(out);
    else
      scratch_elems = std::max(scratch_elems, round16(out));
    if (s.kind == StepKind::unit) {
      const int64_t y = numel_of(shape[static_cast<size_t>(s.conv_layer)]);
      max_act = std::max(max_act, y);
      act_total += round16(y);
      stat_total += 2 * round16(shape[static_cast<size_t>(s.conv_layer)][1]);
    }
  }
  std::vector<std::vector<int64_t>> qshape(quantizers.size());  // QAT: quantized copies
  for (size_t q = 0; q < quantizers.size(); ++q) {
    qshape[q] = shape[static_cast<size_t>(quantizers[q].layer)];
    if (!quantizers[q].residual) act_total += round16(numel_of(qshape[q]));
  }
  act_total += num_scratch_slots * scratch_elems;
  const int64_t slot = round16(max_act);
  const int64_t dlogits_elems = lp_logits ? round16(n * opt.num_classes) : 0;
  const int64_t grad_total = num_grad_slots * slot + dlogits_elems;
  auto ensure = [&](Tensor& arena, int64_t elems, DType dt) {
    if (!arena.defined() || arena.numel() < elems) {
      arena = Tensor();
      arena = be.alloc({elems}, dt);
    }
  };
  ensure(act_arena, act_total, cd);
  ensure(stat_arena, std::max<int64_t>(stat_total, 1), DType::f32);
  ensure(grad_arena, grad_total, cd);

  int64_t off = num_scratch_slots * scratch_elems, stat_off = 0;
  auto take = [&](const std::vector<int64_t>& s, Layout l) {
    Tensor t = act_arena.slice0(off, off + numel_of(s)).reshape(s, s.size() == 4 ? l : Layout::NCHW);
    off += round16(numel_of(s));
    return t;
  };
  for (Step& s : steps) {
    const std::vector<int64_t>& os = shape[static_cast<size_t>(s.layer)];
    if (s.kind == StepKind::unit) {
      const std::vector<int64_t>& ys = shape[static_cast<size_t>(s.conv_layer)];
      s.y = take(ys, L);
      const int64_t c = ys[1];
      s.save_mean = stat_arena.slice0(stat_off, stat_off + c);
      s.save_var = stat_arena.slice0(stat_off + round16(c), stat_off + round16(c) + c);
      stat_off += 2 * round16(c);
    }
    if (s.saved) {
      s.out = take(os, L);
    } else {
      const int64_t b = s.scratch * scratch_elems;
      s.out = act_arena.slice0(b, b + numel_of(os)).reshape(os, L);
    }
  }
  // QAT: a downsample's output is quantized in place (only its add reads it); every other
  // quantized value gets its own copy, kept for the weight gradient of the layers reading it.
  for (size_t q = 0; q < quantizers.size(); ++q) {
    qat_values[q] = Tensor();
    if (quantizers[q].residual) {
      for (size_t i = 0; i < steps.size(); ++i)
        if (quant_of_step[i] == static_cast<int>(q)) qat_values[q] = steps[i].out;
    } else {
      qat_values[q] = take(qshape[q], L);
    }
  }
  // Under AMP the fc writes its output in the compute dtype; the loss reads an f32 copy (and
  // dlogits is converted back into the compute dtype at the end of the gradient arena).
  Step& fc = steps[static_cast<size_t>(fc_step)];
  if (lp_logits) {
    logits = be.alloc(fc.out.shape(), DType::f32);
    const int64_t b = num_grad_slots * slot;
    dlogits_lp = grad_arena.slice0(b, b + n * opt.num_classes).reshape({n, opt.num_classes});
  } else {
    logits = fc.out;
  }
  slot_elems = slot;
  cur_n = n, cur_h = h, cur_w = w;
  ++plan_generation;
  have_train_state = false;
}

void ResNet::Impl::walk_backward(bool execute, const Tensor* dlogits) {
  SlotPool pool;
  std::vector<int> grad(steps.size(), -1);  // value -> slot holding its gradient
  // A join output's second gradient part, kept apart so that the join's backward adds the parts
  // inside add_relu_bwd (one pass) instead of an add followed by relu_bwd.
  std::vector<int> grad2(steps.size(), -1);
  std::vector<int> order;
  auto slot_view = [&](int s, const Tensor& like) {
    return grad_arena.slice0(s * slot_elems, s * slot_elems + like.numel())
        .reshape(like.shape(), like.layout());
  };
  auto done = [&](int param) {
    if (execute)
      grad_done(param);
    else
      order.push_back(param);
  };
  // Sums the gradients in slots a and b (one reference each, handed over) of value v.
  auto add_parts = [&](int v, int a, int b) {
    const int sum = pool.alloc();
    if (execute) {
      const Tensor& like = value(v);
      Tensor dst = slot_view(sum, like);
      be.add(slot_view(a, like), slot_view(b, like), dst);
    }
    pool.release(a);
    pool.release(b);
    return sum;
  };
  // Adds the gradient in slot `g` (one reference, handed over) to value v's gradient.
  auto contribute = [&](int v, int g) {
    if (v == kInputValue) return pool.release(g);  // no gradient for the network input
    int& have = grad[static_cast<size_t>(v)];
    if (have < 0) {
      have = g;
      return;
    }
    if (steps[static_cast<size_t>(v)].kind == StepKind::join) {
      int& second = grad2[static_cast<size_t>(v)];
      if (second >= 0) have = add_parts(v, have, second);  // a third part (not in ResNet)
      second = g;
      return;
    }
    have = add_parts(v, have, g);
  };

  for (int i = static_cast<int>(steps.size()) - 1; i >= 0; --i) {
    Step& s = steps[static_cast<size_t>(i)];
    const int g = grad[static_cast<size_t>(i)];
    RN50_CHECK(s.kind == StepKind::fc || g >= 0,
               "{}: backward reached '{}' without a gradient for its output", desc.arch.name,
               desc.layers[static_cast<size_t>(s.layer)].name);
    const Tensor in0 = execute ? value(s.in[0]) : Tensor();
    // What the step's forward read in place of in0 (QAT: the fake-quantized copy).
    const Tensor in0q = execute ? seen(s.in[0], s.qin) : Tensor();
    switch (s.kind) {
      case StepKind::fc: {
        const int dx = pool.alloc();
        if (execute) {
          Tensor d = slot_view(dx, in0);
          if (dlogits_lp.defined()) {
            be.copy(*dlogits, dlogits_lp);  // f32 -> compute dtype (torch: the half logits' grad)
            be.linear_bwd(in0q, s.wq, dlogits_lp, d, s.dw, s.dbeta);
          } else {
            be.linear_bwd(in0q, s.wq, *dlogits, d, s.dw, s.dbeta);
          }
        }
        const Layer& fc = desc.layers[static_cast<size_t>(s.layer)];
        done(fc.params[0]);
        done(fc.params[1]);
        contribute(s.in[0], dx);
        break;
      }
      case StepKind::avgpool: {
        const int dx = pool.alloc();
        if (execute) {
          Tensor d = slot_view(dx, in0);
          be.global_avgpool_bwd(slot_view(g, s.out), d);
        }
        pool.release(g);
        contribute(s.in[0], dx);
        break;
      }
      case StepKind::join: {
        // relu_bwd with the join's output as the mask: the gradient of both inputs. A join
        // output feeding a block's branch and shortcut has its two gradient parts summed here.
        const int g2 = grad2[static_cast<size_t>(i)];
        if (s.fused_unit >= 0) {  // its unit's batchnorm_add_relu_bwd does it: hand over g, g2
          grad[static_cast<size_t>(s.fused_unit)] = g;
          grad2[static_cast<size_t>(s.fused_unit)] = g2;
          break;
        }
        const int dj = pool.alloc();
        if (execute) {
          Tensor d = slot_view(dj, s.out);
          if (g2 >= 0)
            be.add_relu_bwd(s.out, slot_view(g, s.out), slot_view(g2, s.out), d);
          else
            be.relu_bwd(s.out, slot_view(g, s.out), d);
        }
        pool.release(g);
        if (g2 >= 0) pool.release(g2);
        pool.retain(dj);
        contribute(s.in[0], dj);
        contribute(s.in[1], dj);
        break;
      }
      case StepKind::maxpool: {
        const int dx = pool.alloc();
        if (execute) {
          Tensor d = slot_view(dx, in0);
          be.maxpool2d_bwd(s.pool, in0, s.out, slot_view(g, s.out), d);
        }
        pool.release(g);
        contribute(s.in[0], dx);
        break;
      }
      case StepKind::unit: {
        const BatchNormParams bp{opt.bn_eps, opt.bn_momentum, s.relu};
        const int g2 = grad2[static_cast<size_t>(i)];  // a fused join's second part, or -1
        const int dconv = pool.alloc();
        Tensor dc;
        if (execute) {
          dc = slot_view(dconv, s.y);
          if (s.fused_join >= 0) {
            // The join's backward too: its input gradient lands in place of the first part.
            const Tensor& jout = steps[static_cast<size_t>(s.fused_join)].out;
            Tensor dres = slot_view(g, jout);
            const Tensor part2 = g2 >= 0 ? slot_view(g2, jout) : Tensor();
            be.batchnorm_add_relu_bwd(bp, s.y, jout, dres, part2, s.gamma, s.save_mean,
                                      s.save_var, dres, dc, s.dgamma, s.dbeta);
          } else {
            // Without a fused ReLU the BN output is not needed (and may live in scratch).
            be.batchnorm_bwd(bp, s.y, s.relu ? s.out : Tensor(), slot_view(g, s.out), s.gamma,
                             s.save_mean, s.save_var, dc, s.dgamma, s.dbeta);
          }
        }
        if (s.fused_join >= 0) {
          // g holds the join's input gradient now: the join's other input takes it over.
          const Step& join = steps[static_cast<size_t>(s.fused_join)];
          if (g2 >= 0) pool.release(g2);
          contribute(join.in[0] == i ? join.in[1] : join.in[0], g);
        } else {
          pool.release(g);  // read by the BN backward only: the slot is free for dx
        }
        done(s.gamma_param);
        done(s.beta_param);
        // QAT: the straight-through estimator — the gradients with respect to the quantized
        // weight and input are those of the master weight and of the input (src/core/fake_quant.h).
        if (execute) be.conv2d_bwd_weights(s.conv, in0q, dc, s.dw);
        done(s.conv_param);
        if (s.in[0] != kInputValue) {
          const int dx = pool.alloc();
          if (execute) {
            Tensor d = slot_view(dx, in0);
            be.conv2d_bwd_data(s.conv, dc, s.wq, d);
          }
          pool.release(dconv);
          contribute(s.in[0], dx);
        } else {
          pool.release(dconv);
        }
        break;
      }
    }
  }
  // AMP without a grad-ready hook: the conv/fc gradients reach the f32 slab in one conversion
  // per contiguous range (2 for ResNet) instead of one per parameter, unless the optimiser
  // reads them in the compute slab (ResNet::set_grads_in_compute_slab).
  if (execute && mirror && !pure && !ready_hook && !grads_only_lp())
    convert_ranges(grad_lp, grad_slab);
  if (!execute) {
    num_grad_slots = pool.high_water();
    ready_order = std::move(order);
    RN50_CHECK(ready_order.size() == desc.params.size(),
               "{}: backward finishes {} parameter gradients, the model has {}", desc.arch.name,
               ready_order.size(), desc.params.size());
  }
}

const Tensor& ResNet::forward(const Tensor& x, bool train) {
  Impl& m = *impl_;
  const std::string& name = m.desc.arch.name;
  RN50_CHECK(x.defined() && x.ndim() == 4 && x.c() == m.desc.input_channels &&
                 x.dtype() == m.opt.compute_dtype,
             "{} forward: input must be {} (N,{},H,W), got {}", name,
             dtype_name(m.opt.compute_dtype), m.desc.input_channels,
             x.defined() ? x.str() : std::string("an undefined tensor"));
  RN50_CHECK(x.layout() == m.opt.layout && x.device() == m.be.device(),
             "{} forward: input {} must be in the model layout {} on {}", name, x.str(),
             layout_name(m.opt.layout), m.be.device().str());
  RN50_CHECK(x.n() >= 1, "{} forward: empty batch {}", name, x.str());
  m.have_train_state = false;
  m.plan(x.n(), x.h(), x.w());

  if (train) {
    // torch BatchNorm2d.forward: num_batches_tracked += 1 on every training forward.
    int64_t* c = m.nbt.data_as<int64_t>();
    for (int64_t i = 0; i < m.nbt.numel(); ++i) ++c[i];
  }
  m.x_in = x;
  if (m.opt.qat) {
    // Fake-quantized weights from the f32 master weights (per output channel), then the input.
    for (Step& s : m.steps) {
      switch (s.kind) {
        case StepKind::unit: m.be.fake_quant_weight(m.param_view(s.conv_param), s.wq); break;
        case StepKind::fc:
          m.be.fake_quant_weight(
              m.param_view(m.desc.layers[static_cast<size_t>(s.layer)].params[0]), s.wq);
          break;
        case StepKind::join:
        case StepKind::maxpool:
        case StepKind::avgpool:
          break;  // no weight
      }
    }
    if (m.input_quant >= 0) {
      const auto q = static_cast<size_t>(m.input_quant);
      m.be.fake_quant_act(x, m.qat_states[q], train, m.qat_values[q]);
    }
  }
  for (size_t si = 0; si < m.steps.size(); ++si) {
    Step& s = m.steps[si];
    const Tensor& in0 = m.seen(s.in[0], s.qin);
    switch (s.kind) {
      case StepKind::unit: {
        const BatchNormParams bp{m.opt.bn_eps, m.opt.bn_momentum, s.relu};
        model_detail::BnState& bn = m.bns[static_cast<size_t>(s.bn)];
        m.be.conv2d_fwd(s.conv, in0, s.wq, s.y);
        if (train && s.fused_join >= 0) {
          Step& join = m.steps[static_cast<size_t>(s.fused_join)];
          const int other = join.in[0] == static_cast<int>(si) ? join.in[1] : join.in[0];
          m.be.batchnorm_add_relu_fwd_train(bp, s.y, m.value(other), s.gamma, s.beta,
                                            bn.running_mean, bn.running_var, join.out,
                                            s.save_mean, s.save_var);
        } else if (train) {
          m.be.batchnorm_fwd_train(bp, s.y, s.gamma, s.beta, bn.running_mean, bn.running_var,
                                   s.out, s.save_mean, s.save_var);
        } else {
          m.be.batchnorm_fwd_infer(bp, s.y, s.gamma, s.beta, bn.running_mean, bn.running_var,
                                   s.out);
        }
        break;
      }
      case StepKind::join:
        if (!(train && s.fused_unit >= 0))  // else written by its unit's fused BN
          m.be.add_relu_fwd(in0, m.seen(s.in[1], s.qres), s.out);
        break;
      case StepKind::maxpool: m.be.maxpool2d_fwd(s.pool, in0, s.out); break;
      case StepKind::avgpool: m.be.global_avgpool_fwd(in0, s.out); break;
      case StepKind::fc:
        m.be.linear_fwd(in0, s.wq, s.beta, s.out);
        if (m.logits.data() != s.out.data()) m.be.copy(s.out, m.logits);  // -> f32 for the loss
        break;
    }
    // QAT: this output's range (updated from the batch when training) and quantized copy.
    if (m.opt.qat && m.quant_of_step[si] >= 0) {
      const auto q = static_cast<size_t>(m.quant_of_step[si]);
      m.be.fake_quant_act(s.out, m.qat_states[q], train, m.qat_values[q]);
    }
  }
  if (!train) m.x_in = Tensor();  // an eval forward keeps nothing for backward
  m.have_train_state = train;
  return m.logits;
}

void ResNet::backward(const Tensor& dlogits) {
  Impl& m = *impl_;
  RN50_CHECK(m.have_train_state,
             "{} backward: needs a preceding forward(train=true) (after the last eval forward, "
             "init or load_state_dict)",
             m.desc.arch.name);
  RN50_CHECK(dlogits.defined() && dlogits.shape() == m.logits.shape() &&
                 dlogits.dtype() == DType::f32,
             "{} backward: dlogits must be F32 {}, got {}", m.desc.arch.name, m.logits.str(),
             dlogits.defined() ? dlogits.str() : std::string("an undefined tensor"));
  m.walk_backward(true, &dlogits);
}

}  // namespace rn50
