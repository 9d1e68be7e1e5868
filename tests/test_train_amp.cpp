// AMP and compute-copy paths of the model and the training step, run on the CPU through the
// reference backend (which computes on f16/bf16 operands exactly and rounds once), so that the
// logic the CUDA backend relies on is tested without a GPU:
//  * KRSC compute copies: a backend that prefers KRSC conv weights (as CUDA does with NHWC)
//    gives the same f32 logits and gradients as plain OIHW weights (exact up to 1e-6).
//  * fp16 / bf16 compute: logits, loss and the fc gradients close to f32; the whole (unscaled)
//    gradient slab close in relative L2. Measured (batch 8, 64 px, random init), f16 / bf16:
//    logits 3.4e-3 / 2.9e-2, fc.weight grad 3.4e-3 / 2.6e-2, fc.bias grad 4e-4 / 3.5e-3, slab
//    0.13 / 0.35. The slab error grows backwards through the BatchNorms (layer4 bn3 3%, conv1
//    20% at batch 4, 32 px): BN backward over few values per channel amplifies rounding, as
//    torch's own float32 vs float64 gradients differ by 1.4% at this size (test_model_parity).
//    A wiring bug (missed unscale, wrong weight layout) is off by O(1) or by the 1024x scale.
//  * TrainStep with fp16 loss scaling: an overflowing scale (2^40: scaled gradients exceed the
//    fp16 range) makes check_finite flag the step, SGD skip it (parameters and momentum
//    unchanged), the scale back off x0.5 and skipped_steps count it; a normal scale then trains.
//  * TrainStep's lr comes from the device step state: two steps with different lrs equal a
//    hand-written sequence of backend calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <utility>

#include "step_test_util.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/model.h"
#include "rn50/profile.h"
#include "model/input_stage.h"
#include "train/train_step.h"
#include "require.h"
#include "krsc_ref_backend.h"

namespace rn50 {
namespace {

double rel_l2(const std::vector<double>& a, const std::vector<double>& ref, double scale = 1) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] / scale - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

/// Training forward of `m` on the batch in `in`, label-smoothed (0.1) softmax cross-entropy and
/// backward with the loss scaled by `loss_scale`: the gradients land in m's gradient slab.
/// Returns the logits (m's output, [N, classes] f32) and the loss (f32 [1]).
std::pair<const Tensor*, Tensor> forward_backward(Backend& be, ResNet& m, const InputStage& in,
                                                  float loss_scale) {
  const Tensor& z = m.forward(in.x(), true);
  Tensor loss = be.alloc({1}, DType::f32), probs = be.alloc(z.shape(), DType::f32);
  Tensor dz = be.alloc(z.shape(), DType::f32);
  be.softmax_xent_fwd(z, in.labels(), 0.1f, loss, probs);
  be.softmax_xent_bwd(probs, in.labels(), 0.1f, loss_scale, dz, Tensor());
  m.backward(dz);
  return {&z, loss};
}

/// Forward + loss + backward of one batch; returns (logits, loss, every parameter's gradient in
/// params() order and torchvision's layout) as host values.
struct Pass {
  std::vector<double> logits, grads;
  double loss = 0;
};
Pass run_pass(Backend& be, DType dt, const Batch& b, float loss_scale) {
  ModelOptions mo;
  mo.num_classes = 10;
  mo.layout = Layout::NHWC;
  mo.compute_dtype = dt;
  ResNet m(be, kNet, mo);
  m.init(3);
  InputStage in(be, Layout::NHWC, dt, 10, 1);
  in.load(b);
  const auto [z, loss] = forward_backward(be, m, in, loss_scale);
  Pass p;
  p.logits = host_values(be, *z);
  p.loss = host_values(be, loss)[0];
  // Per parameter in torchvision's logical order, whatever the slab's conv weight layout.
  for (const ParamInfo& pi : m.params())
    for (double g : host_values(be, m.grad(pi.name))) p.grads.push_back(g / loss_scale);
  return p;
}

TEST(TrainAmp, KrscComputeCopyMatchesOihw) {
  const Batch b = random_batch(2, 32, 10, 1);
  auto ref = make_backend("ref");
  KrscRefBackend krsc;
  const Pass want = run_pass(*ref, DType::f32, b, 1.f);
  const Pass got = run_pass(krsc, DType::f32, b, 1.f);
  EXPECT_GT(krsc.krsc_convs_, 0);
  EXPECT_LE(rel_l2(got.logits, want.logits), 1e-6);
  EXPECT_NEAR(got.loss, want.loss, 1e-6);
  EXPECT_LE(rel_l2(got.grads, want.grads), 1e-6);
}

/// fp16 and bf16 passes (those in `dtypes`) on `make()`'s backend against an f32 pass on ref
/// (see the file comment).
void check_half_close_to_f32(const std::function<std::unique_ptr<Backend>()>& make,
                             std::vector<DType> dtypes = {DType::f16, DType::bf16}) {
  const Batch b = random_batch(8, 64, 10, 2);
  auto ref = make_backend("ref");
  const Pass want = run_pass(*ref, DType::f32, b, 1.f);
  struct Case {
    DType dt;
    float scale;
    double logits_tol, grad_tol;
  };
  for (const Case& c : {Case{DType::f16, 1024.f, 1e-2, 2.5e-1}, Case{DType::bf16, 1.f, 6e-2, 6e-1}}) {
    if (std::find(dtypes.begin(), dtypes.end(), c.dt) == dtypes.end()) continue;
    SCOPED_TRACE(dtype_name(c.dt));
    std::unique_ptr<Backend> be = make();
    const Pass got = run_pass(*be, c.dt, b, c.scale);
    const double el = rel_l2(got.logits, want.logits), eg = rel_l2(got.grads, want.grads);
    // The fc gradients sit right after the loss: they test the f32 <-> half logits path and
    // the unscaling tightly (a missed 1/scale would be off by 1024x).
    ModelOptions mo;
    mo.num_classes = 10;
    ResNet shape_only(*ref, kNet, mo);
    // Pass::grads holds the parameters one after the other in params() order.
    auto slice = [&](const std::vector<double>& v, const std::string& name) {
      int64_t at = 0;
      for (const ParamInfo& pi : shape_only.params()) {
        if (pi.name == name) return std::vector<double>(v.begin() + at, v.begin() + at + pi.numel());
        at += pi.numel();
      }
      return std::vector<double>();
    };
    const double efw = rel_l2(slice(got.grads, "fc.weight"), slice(want.grads, "fc.weight"));
    const double efb = rel_l2(slice(got.grads, "fc.bias"), slice(want.grads, "fc.bias"));
    std::printf("%s %s: logits rel-L2 %.3g, loss %.6f vs %.6f, gradient slab rel-L2 %.3g, "
                "fc.weight %.3g, fc.bias %.3g\n",
                be->name().c_str(), dtype_name(c.dt), el, got.loss, want.loss, eg, efw, efb);
    EXPECT_LE(el, c.logits_tol);
    EXPECT_NEAR(got.loss, want.loss, 0.2 * c.logits_tol);
    EXPECT_LE(efw, c.logits_tol);
    EXPECT_LE(efb, 0.2 * c.logits_tol);
    EXPECT_LE(eg, c.grad_tol);
  }
}

bool have_cuda() {
  const auto v = available_backends();
  return std::find(v.begin(), v.end(), "cuda") != v.end();
}

TEST(TrainAmp, HalfPrecisionCloseToF32) {
  // The CUDA configuration on the CPU: half compute copies with KRSC weights.
  check_half_close_to_f32([] { return std::make_unique<KrscRefBackend>(); });
}

// CPU AMP: the oneDNN backend's bf16 kernels (bf16 convolutions, BN, pooling, fc with f32
// master weights) against f32 on ref, with the bound of the reference's exact bf16 arithmetic.
TEST(TrainAmp, OnednnBf16CloseToF32) {
  if (!make_backend("onednn")->supports(Op::conv2d, DType::bf16, Layout::NHWC))
    GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  check_half_close_to_f32([] { return make_backend("onednn"); }, {DType::bf16});
}

// CPU NHWC, bf16 and f32: the training forward runs each block's last BatchNorm and its residual
// join as one fused op (Backend::batchnorm_add_relu_fwd_train), on the BN of the join's input
// computed last: in downsampling blocks (the first of each stage) and in an identity block
// (stage 1's second); the backward runs their backwards as one (batchnorm_add_relu_bwd). Eval
// keeps the separate ops. The fused path's numbers are checked by OnednnBf16CloseToF32 (its
// network's four blocks all fuse), by test_model_parity (f32 oneDNN against torchvision) and,
// op by op, by test_ops_onednn_bn_nhwc.
void expect_fused_joins(DType dt) {
  SCOPED_TRACE(dtype_name(dt));
  auto be = make_profiling_backend(make_backend("onednn"));
  ASSERT_TRUE(be->supports(Op::batchnorm_add_relu, dt, Layout::NHWC));
  const ArchSpec net{"bottleneck2111", true, {2, 1, 1, 1}};  // 5 joins: 4 downsampling
  ModelOptions mo;
  mo.num_classes = 10;
  mo.layout = Layout::NHWC;
  mo.compute_dtype = dt;
  ResNet m(*be, net, mo);
  m.init(3);
  InputStage in(*be, Layout::NHWC, dt, 10, 1);
  in.load(random_batch(8, 32, 10, 4));
  auto calls = [](const OpProfiler& p, const std::string& op) {
    for (const OpProfiler::Row& r : p.rows())
      if (r.op == op) return r.calls;
    return int64_t{0};
  };
  OpProfiler train, eval;
  {
    OpProfiler::Activation on(train);
    forward_backward(*be, m, in, 1.f);
  }
  {
    OpProfiler::Activation on(eval);
    m.forward(in.x(), false);
  }
  EXPECT_EQ(calls(train, "batchnorm+add+relu fwd (train)"), 5);
  EXPECT_EQ(calls(train, "add+relu fwd"), 0);
  EXPECT_EQ(calls(train, "batchnorm fwd (train)"), 1 + 3 * 5 + 4 - 5);  // stem + the rest
  // The backward the same way: every join's ReLU backward inside its unit's BN backward.
  EXPECT_EQ(calls(train, "batchnorm+add+relu bwd"), 5);
  EXPECT_EQ(calls(train, "add+relu bwd"), 0);
  EXPECT_EQ(calls(train, "relu bwd"), 0);
  EXPECT_EQ(calls(train, "batchnorm bwd"), 1 + 3 * 5 + 4 - 5);
  EXPECT_EQ(calls(eval, "batchnorm+add+relu fwd (train)"), 0);
  EXPECT_EQ(calls(eval, "add+relu fwd"), 5);
}

TEST(TrainAmp, OnednnFusesEachBlocksLastBatchNormWithItsJoin) {
  expect_fused_joins(DType::f32);
  if (!make_backend("onednn")->supports(Op::conv2d, DType::bf16, Layout::NHWC))
    GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU (f32 checked)";
  expect_fused_joins(DType::bf16);
}

TEST(TrainAmp, CudaHalfPrecisionCloseToF32) {
  RN50_REQUIRE_OR_SKIP("gpu", have_cuda(), "no usable GPU: " << cuda_unavailable_reason());
  check_half_close_to_f32([] { return make_backend("cuda"); });
}

/// The overflow / skip / recovery sequence of TrainStep on `be` (see the file comment).
void check_overflow_skip(Backend& be) {
  ModelOptions mo;
  mo.num_classes = 10;
  mo.compute_dtype = DType::f16;
  ResNet m(be, kNet, mo);
  m.init(5);
  InputStage in(be, Layout::NHWC, DType::f16, 10, 2);
  StepOptions so;
  so.loss_scaling = true;
  so.initial_loss_scale = 1099511627776.f;  // 2^40: every scaled gradient overflows fp16
  SgdOptimizer opt(be, m, {});
  TrainStep step(be, m, in, opt, so);
  const std::vector<double> p0 = host_values(be, m.param_slab());
  const Batch b = random_batch(2, 32, 10, 3);

  int s = in.upload(b);
  step.run(s, 0.1);
  in.release(s);
  Tensor st = step.read_state();
  const float* v = st.data_as<const float>();
  EXPECT_EQ(v[StepState::skipped_steps], 1.f);
  EXPECT_EQ(v[StepState::loss_scale], 549755813888.f) << "backoff x0.5";
  EXPECT_EQ(v[StepState::found_inf], 0.f) << "cleared for the next step";
  EXPECT_EQ(rel_l2(host_values(be, m.param_slab()), p0), 0.0) << "a skipped step changes nothing";
  for (double x : host_values(be, opt.momentum())) ASSERT_EQ(x, 0.0);
  EXPECT_TRUE(std::isfinite(host_values(be, step.loss())[0])) << "the loss itself is finite";
  EXPECT_EQ(m.buffer("bn1.num_batches_tracked").data_as<int64_t>()[0], 1);

  // A sane scale: the step is taken, the parameters move, nothing more is skipped.
  step.set_loss_scale(128.f, 1.f);
  s = in.upload(b);
  step.run(s, 0.1);
  in.release(s);
  st = step.read_state();
  EXPECT_EQ(st.data_as<const float>()[StepState::skipped_steps], 1.f);
  EXPECT_EQ(st.data_as<const float>()[StepState::growth_tracker], 1.f);
  EXPECT_GT(rel_l2(host_values(be, m.param_slab()), p0), 1e-4);
  // The f16 compute copies follow the master weights (written by the SGD pass itself): a
  // forward equals that of a fresh model loaded from the master state_dict. (Train mode: after
  // two steps the running statistics are far from the batch ones, and an eval forward of this
  // random net overflows fp16.)
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : m.state_dict()) sd[k] = t;
  ResNet fresh(be, kNet, mo);
  fresh.load_state_dict(sd);
  InputStage ein(be, Layout::NHWC, DType::f16, 10, 1);
  ein.load(b);
  const std::vector<double> z1 = host_values(be, m.forward(ein.x(), true));
  const std::vector<double> z2 = host_values(be, fresh.forward(ein.x(), true));
  EXPECT_EQ(rel_l2(z1, z2), 0.0);
}

TEST(TrainAmp, LossScaleOverflowSkipsTheStep) {
  KrscRefBackend be;
  check_overflow_skip(be);
}

TEST(TrainAmp, CudaLossScaleOverflowSkipsTheStep) {
  RN50_REQUIRE_OR_SKIP("gpu", have_cuda(), "no usable GPU: " << cuda_unavailable_reason());
  auto be = make_backend("cuda");
  check_overflow_skip(*be);
}

TEST(TrainAmp, StepTakesItsLrFromTheDeviceState) {
  auto be = make_backend("ref");
  const Batch b0 = random_batch(2, 32, 10, 4), b1 = random_batch(2, 32, 10, 5);
  ModelOptions mo;
  mo.num_classes = 10;
  // TrainStep, lrs 0.2 then 0.05.
  ResNet m(*be, kNet, mo);
  m.init(7);
  InputStage in(*be, Layout::NHWC, DType::f32, 10, 2);
  StepOptions so;
  SgdOptimizer opt(*be, m, {});
  TrainStep step(*be, m, in, opt, so);
  for (auto [batch, lr] : {std::pair{&b0, 0.2}, std::pair{&b1, 0.05}}) {
    const int s = in.upload(*batch);
    step.run(s, lr);
    in.release(s);
  }
  // The same by hand with host lrs.
  ResNet r(*be, kNet, mo);
  r.init(7);
  InputStage rin(*be, Layout::NHWC, DType::f32, 10, 1);
  Tensor mom = be->alloc({r.num_params()}, DType::f32);
  be->zero(mom);
  for (auto [batch, lr] : {std::pair{&b0, 0.2}, std::pair{&b1, 0.05}}) {
    rin.load(*batch);
    forward_backward(*be, r, rin, 1.f);
    SgdParams p;
    p.lr = static_cast<float>(lr);
    p.decay_count = r.decay_count();
    be->sgd_update(p, r.param_slab(), r.grad_slab(), mom);
  }
  EXPECT_EQ(rel_l2(host_values(*be, m.param_slab()), host_values(*be, r.param_slab())), 0.0);
  EXPECT_EQ(rel_l2(host_values(*be, opt.momentum()), host_values(*be, mom)), 0.0);
}

// CPU bf16 AMP: TrainStep has SGD read the conv/fc gradients in the bf16 slab backward wrote
// (ResNet::set_grads_in_compute_slab, Backend::sgd_takes_bf16_grads) instead of converting
// them into the f32 slab first. Three steps give the same bits (weights, momentum, the bf16
// compute copy) as three with the conversion, and the f32 slab's conv/fc entries stay
// unwritten (a NaN sentinel survives).
TEST(TrainAmp, OnednnBf16SgdReadsTheBf16GradientsUnconverted) {
  auto be = make_backend("onednn");
  if (!be->supports(Op::conv2d, DType::bf16, Layout::NHWC))
    GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  ASSERT_TRUE(be->sgd_takes_bf16_grads());
  ModelOptions mo;
  mo.num_classes = 10;
  mo.layout = Layout::NHWC;
  mo.compute_dtype = DType::bf16;
  const Batch batches[] = {random_batch(2, 32, 10, 11), random_batch(2, 32, 10, 12),
                           random_batch(2, 32, 10, 13)};
  struct Run {
    std::vector<double> w, mom, cc;
    std::vector<double> grad32;
  };
  auto train = [&](bool unconverted) {
    ResNet m(*be, kNet, mo);
    m.init(3);
    InputStage in(*be, Layout::NHWC, DType::bf16, 10, 1);
    SgdOptimizer opt(*be, m, {});
    TrainStep step(*be, m, in, opt, StepOptions{});
    EXPECT_TRUE(m.grads_in_compute_slab()) << "TrainStep turns it on for bf16 AMP";
    if (!unconverted) m.set_grads_in_compute_slab(false);
    Tensor nan = Tensor::empty({m.num_params()}, DType::f32);
    std::fill_n(nan.data_as<float>(), m.num_params(), std::nanf(""));
    be->copy(nan, m.grad_slab());
    for (const Batch& b : batches) {
      const int s = in.upload(b);
      step.run(s, 0.1);
      in.release(s);
    }
    return Run{host_values(*be, m.param_slab()), host_values(*be, opt.momentum()),
               host_values(*be, m.compute_param_slab()), host_values(*be, m.grad_slab())};
  };
  const Run a = train(true), b = train(false);
  ASSERT_EQ(a.w.size(), b.w.size());
  EXPECT_EQ(a.w, b.w) << "f32 master weights";
  EXPECT_EQ(a.mom, b.mom) << "momentum";
  EXPECT_EQ(a.cc, b.cc) << "bf16 compute copy";
  ResNet probe(*be, kNet, mo);
  int64_t mirrored = 0;
  for (const auto& [lo, hi] : probe.mirrored_ranges()) {
    mirrored += hi - lo;
    for (int64_t i = lo; i < hi; ++i) {
      ASSERT_TRUE(std::isnan(a.grad32[i])) << "f32 gradient " << i << " was written";
      ASSERT_FALSE(std::isnan(b.grad32[i])) << "converted f32 gradient " << i;
    }
  }
  EXPECT_GT(mirrored, probe.num_params() / 2) << "the conv/fc weights are mirrored";
}

}  // namespace
}  // namespace rn50

namespace rn50 {
namespace {

// On a GPU: the steps TrainStep replays from recorded CUDA graphs give the same parameters as
// the same steps run op by op (one backend, so both use the same cached cuDNN algorithms;
// tolerance for cuDNN's non-deterministic weight-gradient algorithms).
TEST(TrainAmp, CudaGraphReplayEqualsEagerSteps) {
  RN50_REQUIRE_OR_SKIP("gpu", have_cuda(), "no usable GPU: " << cuda_unavailable_reason());
  auto be = make_backend("cuda");
  std::vector<std::vector<double>> params;
  for (bool graphs : {false, true}) {
    ModelOptions mo;
    mo.num_classes = 10;
    mo.compute_dtype = DType::f16;
    ResNet m(*be, kNet, mo);
    m.init(11);
    InputStage in(*be, Layout::NHWC, DType::f16, 10, 2);
    StepOptions so;
    so.loss_scaling = true;
    so.initial_loss_scale = 128.f;
    so.use_graphs = graphs;
    SgdOptimizer opt(*be, m, {});
    TrainStep step(*be, m, in, opt, so);
    for (int i = 0; i < 6; ++i) {
      const int s = in.upload(random_batch(4, 64, 10, 100 + i));
      step.run(s, 0.05 + 0.01 * i);
      in.release(s);
    }
    be->synchronize();
    EXPECT_EQ(step.replayed_steps(), graphs ? 4 : 0);
    EXPECT_EQ(m.buffer("bn1.num_batches_tracked").data_as<int64_t>()[0], 6);
    params.push_back(host_values(*be, m.param_slab()));
  }
  EXPECT_LE(rel_l2(params[1], params[0]), 1e-4);
}

}  // namespace
}  // namespace rn50
