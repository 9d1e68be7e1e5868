// The optimiser (train/optimizer.h) and what it removed from every step: SgdOptimizer::step is
// exactly Backend::sgd_update over the model's slabs; a mask holds its weights (and momentum)
// at exactly zero through training steps; under AMP the compute copy it writes equals the
// master weights converted; and a training step on a KRSC-weight backend (as CUDA) makes no
// per-parameter copies: f32 one copy per step (the lr), AMP five (the lr, the logits to f32,
// dlogits to half, and the conv/fc gradients to f32 in two contiguous ranges).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "step_test_util.h"
#include "krsc_ref_backend.h"
#include "model/input_stage.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

std::vector<float> host_f32(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), t.layout());
  be.copy(t, h);
  be.synchronize();
  Tensor f = Tensor::empty(t.shape(), DType::f32, t.layout());
  make_backend("ref")->copy(h, f);
  return std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel());
}

ModelOptions options(DType dt) {
  ModelOptions mo;
  mo.num_classes = 10;
  mo.layout = Layout::NHWC;
  mo.compute_dtype = dt;
  return mo;
}

TEST(SgdOptimizer, StepIsSgdUpdateOverTheSlabs) {
  auto be = make_backend("onednn");
  ResNet a(*be, kNet, options(DType::f32)), b(*be, kNet, options(DType::f32));
  a.init(1);
  b.init(1);
  std::mt19937 g(2);
  std::normal_distribution<float> nd;
  Tensor grads = Tensor::empty({a.num_params()}, DType::f32);
  for (int64_t i = 0; i < grads.numel(); ++i) grads.data_as<float>()[i] = nd(g);
  be->copy(grads, a.grad_slab());
  be->copy(grads, b.grad_slab());
  SgdOptimizer::Options o;
  o.momentum = 0.9f;
  o.weight_decay = 1e-3f;
  SgdOptimizer opt(*be, a, o);
  Tensor state = Tensor::zeros({StepState::size}, DType::f32);
  state.data_as<float>()[StepState::lr] = 0.1f;
  state.data_as<float>()[StepState::loss_scale] = 1.f;
  state.data_as<float>()[StepState::inv_loss_scale] = 1.f;
  opt.step(state);
  opt.step(state);
  Tensor mom = be->alloc({b.num_params()}, DType::f32);
  be->zero(mom);
  SgdParams p;
  p.lr = 0.1f;
  p.momentum = 0.9f;
  p.weight_decay = 1e-3f;
  p.decay_count = b.decay_count();
  be->sgd_update(p, b.param_slab(), b.grad_slab(), mom);
  be->sgd_update(p, b.param_slab(), b.grad_slab(), mom);
  EXPECT_EQ(host_f32(*be, a.param_slab()), host_f32(*be, b.param_slab()));
  EXPECT_EQ(host_f32(*be, opt.momentum()), host_f32(*be, mom));
}

// --bn-weight-decay: the optimizer decays the whole slab (BatchNorm gamma/beta and biases too),
// which with zero gradients and no momentum history moves exactly the parameters past the
// decayed prefix that the default leaves alone.
TEST(SgdOptimizer, DecayAllCoversBatchNormAndBiases) {
  auto be = make_backend("onednn");
  ResNet a(*be, kNet, options(DType::f32)), b(*be, kNet, options(DType::f32));
  a.init(4);
  b.init(4);
  be->zero(a.grad_slab());
  be->zero(b.grad_slab());
  SgdOptimizer::Options o;
  o.weight_decay = 0.01f;
  SgdOptimizer plain(*be, a, o);
  o.decay_all = true;
  SgdOptimizer all(*be, b, o);
  Tensor state = Tensor::zeros({StepState::size}, DType::f32);
  state.data_as<float>()[StepState::lr] = 0.5f;
  state.data_as<float>()[StepState::loss_scale] = 1.f;
  state.data_as<float>()[StepState::inv_loss_scale] = 1.f;
  const std::vector<float> before = host_f32(*be, a.param_slab());
  plain.step(state);
  all.step(state);
  const std::vector<float> pa = host_f32(*be, a.param_slab()), pb = host_f32(*be, b.param_slab());
  ASSERT_LT(a.decay_count(), a.num_params());
  int64_t bn_moved = 0;
  for (int64_t i = 0; i < a.num_params(); ++i) {
    // p - lr * wd * p on decayed entries (momentum buffer starts at 0).
    const float decayed = before[i] - 0.5f * (0.01f * before[i]);
    if (i < a.decay_count()) {
      ASSERT_FLOAT_EQ(pa[i], decayed) << i;
      ASSERT_FLOAT_EQ(pb[i], decayed) << i;
    } else {
      ASSERT_EQ(pa[i], before[i]) << "default: no decay on BN/bias entry " << i;
      ASSERT_FLOAT_EQ(pb[i], decayed) << "--bn-weight-decay: decay on entry " << i;
      bn_moved += before[i] != 0.f;
    }
  }
  EXPECT_GT(bn_moved, 0);  // BN gammas start at 1
}

void check_mask_holds(Backend& be, DType dt) {
  SCOPED_TRACE(dtype_name(dt));
  ResNet m(be, kNet, options(dt));
  m.init(3);
  SgdOptimizer opt(be, m, {});
  // Every other weight of the conv/fc weights masked; BN parameters and biases kept.
  Tensor mask = Tensor::empty({m.num_params()}, DType::u8);
  for (int64_t i = 0; i < m.num_params(); ++i)
    mask.data_as<uint8_t>()[i] = i < m.decay_count() && i % 2 == 0 ? 0 : 1;
  const std::vector<float> before = host_f32(be, m.param_slab());
  opt.set_mask(mask);
  std::vector<float> p = host_f32(be, m.param_slab());
  for (int64_t i = 0; i < m.num_params(); ++i)
    ASSERT_EQ(p[i], mask.data_as<uint8_t>()[i] ? before[i] : 0.f) << "set_mask applies now, " << i;

  InputStage in(be, Layout::NHWC, dt, 10, 2);
  StepOptions so;
  so.loss_scaling = dt == DType::f16;
  so.initial_loss_scale = 256.f;
  TrainStep step(be, m, in, opt, so);
  for (int k = 0; k < 3; ++k) {
    const int s = in.upload(random_batch(2, 32, 10, 10 + k));
    step.run(s, 0.5);
    in.release(s);
  }
  p = host_f32(be, m.param_slab());
  const std::vector<float> mom = host_f32(be, opt.momentum());
  int64_t moved = 0;
  for (int64_t i = 0; i < m.num_params(); ++i) {
    if (mask.data_as<uint8_t>()[i] == 0) {
      ASSERT_EQ(p[i], 0.f) << "masked weight " << i << " after 3 steps";
      ASSERT_EQ(mom[i], 0.f) << "masked momentum " << i;
    } else if (p[i] != before[i]) {
      ++moved;
    }
  }
  EXPECT_GT(moved, m.num_params() / 3) << "the unmasked parameters train";
  if (dt != DType::f32) {
    // The compute copy the step wrote is the masked master, rounded: masked entries 0 too.
    const std::vector<float> lp = host_f32(be, m.compute_param_slab());
    Tensor conv = Tensor::empty({m.decay_count()}, dt);
    make_backend("ref")->copy(Tensor::view(p.data(), {m.decay_count()}, DType::f32), conv);
    EXPECT_EQ(std::vector<float>(lp.begin(), lp.begin() + m.decay_count()),
              host_f32(*make_backend("ref"), conv));
  }
  EXPECT_THROW(opt.set_mask(Tensor::zeros({3}, DType::u8)), Error);
}

TEST(SgdOptimizer, MaskHoldsWeightsAtZero) {
  auto onednn = make_backend("onednn");
  check_mask_holds(*onednn, DType::f32);
  KrscRefBackend krsc;
  check_mask_holds(krsc, DType::f32);
  check_mask_holds(krsc, DType::f16);
}

int copies_per_step(DType dt) {
  KrscRefBackend be;
  ResNet m(be, kNet, options(dt));
  m.init(4);
  SgdOptimizer opt(be, m, {});
  InputStage in(be, Layout::NHWC, dt, 10, 2);
  StepOptions so;
  so.loss_scaling = dt == DType::f16;
  TrainStep step(be, m, in, opt, so);
  int per_step = -1;
  for (int k = 0; k < 3; ++k) {
    const int s = in.upload(random_batch(2, 32, 10, 20 + k));
    const int c0 = be.copies_;
    step.run(s, 0.1);
    in.release(s);
    const int n = be.copies_ - c0;
    if (k > 0) {
      EXPECT_EQ(n, per_step) << "every step the same";
    }
    per_step = n;
  }
  return per_step;
}

TEST(SgdOptimizer, NoPerParameterCopiesInAStep) {
  EXPECT_EQ(copies_per_step(DType::f32), 0)
      << "f32 on KRSC weights: none (the lr comes through the step-input ring)";
  EXPECT_EQ(copies_per_step(DType::f16), 4)
      << "AMP: logits -> f32, dlogits -> f16, 2 gradient ranges -> f32";
}

}  // namespace
}  // namespace rn50
