// Mixup (DLE --mixup, Zhang et al. 2018): the Beta(alpha, alpha) weight, the mixed loss against
// its definition and a finite-difference gradient, the training step's wiring on every CPU
// backend (and CUDA when present), and whole trainer runs (deterministic from --seed, reported).
//  * sample_beta: mean and variance of 40,000 draws within 5 standard errors of Beta's
//    moments, for alpha < 1 (the boosted Gamma branch) and >= 1; every draw in [0, 1]; the same
//    keys give the same draw.
//  * softmax_xent_mixup_fwd (ref, f64) equals -sum_k q_k log softmax(z)_k with the mixed,
//    label-smoothed target written out by hand; its bwd equals central differences of the fwd.
//  * TrainStep with mixup and lam = 1 is bit-identical to a plain step; with lam = 0.3 it
//    equals the same sequence of backend calls written out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/input_stage.h"
#include "require.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/train.h"
#include "step_test_util.h"
#include "test_train_util.h"
#include "train/mixup.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

using rn50_test::of_type;
using rn50_test::read_jsonl;
using rn50_test::TempDir;

TEST(MixupBeta, MomentsRangeAndDeterminism) {
  struct Case {
    double a, b;
  };
  for (const Case& c : {Case{0.2, 0.2}, Case{2.0, 2.0}, Case{0.7, 3.0}}) {
    SCOPED_TRACE(::testing::Message() << "Beta(" << c.a << ", " << c.b << ")");
    const int n = 40000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = sample_beta(c.a, c.b, 11, static_cast<uint64_t>(i), 0);
      ASSERT_GE(x, 0.0);
      ASSERT_LE(x, 1.0);
      s += x;
      s2 += x * x;
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    const double ab = c.a + c.b;
    const double want_mean = c.a / ab, want_var = c.a * c.b / (ab * ab * (ab + 1));
    // Standard error of the mean: sqrt(var / n); of the variance: about var * sqrt(2 / n)
    // (an upper bound for these light-tailed, bounded laws: kurtosis below 3 for a = b < 1 ...
    // widened to 5 sigma and a 4% floor).
    EXPECT_NEAR(mean, want_mean, 5 * std::sqrt(want_var / n));
    EXPECT_NEAR(var, want_var, std::max(5 * want_var * std::sqrt(2.0 / n), 0.04 * want_var));
  }
  EXPECT_EQ(mixup_lambda(0.2, 5, 17, 0), mixup_lambda(0.2, 5, 17, 0));
  EXPECT_NE(mixup_lambda(0.2, 5, 17, 0), mixup_lambda(0.2, 5, 17, 1)) << "each rank its own";
  EXPECT_NE(mixup_lambda(0.2, 5, 17, 0), mixup_lambda(0.2, 5, 18, 0)) << "each step its own";
  EXPECT_THROW(sample_beta(0.0, 1.0, 1, 1, 1), Error);
}

/// The mixed target and loss written out by hand (f64): q = (1 - eps) (lam e_a + (1 - lam) e_b)
/// + eps / K, loss = mean_n -sum_k q_nk log softmax(z_n)_k.
double naive_mixup_loss(const std::vector<double>& z, const std::vector<int>& a,
                        const std::vector<int>& b, int64_t N, int64_t K, double lam, double eps) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    double m = z[n * K];
    for (int64_t k = 1; k < K; ++k) m = std::max(m, z[n * K + k]);
    double se = 0;
    for (int64_t k = 0; k < K; ++k) se += std::exp(z[n * K + k] - m);
    for (int64_t k = 0; k < K; ++k) {
      const double t = (k == a[n] ? lam : 0.0) + (k == b[n] ? 1.0 - lam : 0.0);
      const double q = (1 - eps) * t + eps / static_cast<double>(K);
      total -= q * (z[n * K + k] - m - std::log(se));
    }
  }
  return total / static_cast<double>(N);
}

TEST(MixupLoss, RefMatchesDefinitionAndFiniteDifferences) {
  auto be = make_backend("ref");
  const int64_t N = 6, K = 7;
  const double lam = 0.3, eps = 0.1;
  std::mt19937_64 g(9);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> z(N * K);
  for (double& v : z) v = u(g);
  std::vector<int> a{0, 3, 6, 2, 2, 5}, b{4, 3, 1, 0, 6, 5};  // rows 1 and 5: a == b
  Tensor zt = Tensor::empty({N, K}, DType::f64), la = Tensor::empty({N}, DType::i32);
  Tensor lb = Tensor::empty({N}, DType::i32), st = Tensor::zeros({StepState::size}, DType::f32);
  for (int64_t i = 0; i < N * K; ++i) zt.data_as<double>()[i] = z[i];
  for (int64_t n = 0; n < N; ++n) {
    la.data_as<int32_t>()[n] = a[n];
    lb.data_as<int32_t>()[n] = b[n];
  }
  st.data_as<float>()[StepState::loss_scale] = 1.f;
  st.data_as<float>()[StepState::mixup_lambda] = static_cast<float>(lam);
  const double lamf = static_cast<float>(lam);  // the state holds lam as f32
  Tensor loss = Tensor::empty({1}, DType::f64), probs = Tensor::empty({N, K}, DType::f64);
  be->softmax_xent_mixup_fwd(zt, la, lb, static_cast<float>(eps), st, loss, probs);
  const double epsf = static_cast<float>(eps);
  EXPECT_NEAR(loss.data_as<double>()[0], naive_mixup_loss(z, a, b, N, K, lamf, epsf), 1e-12);
  Tensor dz = Tensor::empty({N, K}, DType::f64);
  be->softmax_xent_mixup_bwd(probs, la, lb, static_cast<float>(eps), 1.f, dz, st);
  for (int64_t i = 0; i < N * K; ++i) {
    std::vector<double> zp = z, zm = z;
    const double h = 1e-5;
    zp[i] += h;
    zm[i] -= h;
    const double fd = (naive_mixup_loss(zp, a, b, N, K, lamf, epsf) -
                       naive_mixup_loss(zm, a, b, N, K, lamf, epsf)) /
                      (2 * h);
    EXPECT_NEAR(dz.data_as<double>()[i], fd, 1e-8) << "element " << i;
  }
  // lam outside [0, 1] is refused.
  st.data_as<float>()[StepState::mixup_lambda] = 1.5f;
  EXPECT_THROW(be->softmax_xent_mixup_fwd(zt, la, lb, 0.1f, st, loss, probs), Error);
}

/// Parameters after two TrainSteps on `backend` with mixup at `lam` (or without mixup).
std::vector<double> two_steps(Backend& be, bool mixup, double lam) {
  ModelOptions mo;
  mo.num_classes = 10;
  ResNet m(be, kNet, mo);
  m.init(7);
  InputStage in(be, Layout::NHWC, DType::f32, 10, 2, {}, /*reversed_labels=*/mixup);
  StepOptions so;
  so.mixup = mixup;
  SgdOptimizer opt(be, m, {});
  TrainStep step(be, m, in, opt, so);
  for (uint64_t seed : {4u, 5u}) {
    const Batch b = random_batch(4, 32, 10, seed);
    const int s = in.upload(b);
    step.run(s, 0.1, lam);
    in.release(s);
  }
  return host_values(be, m.param_slab());
}

TEST(MixupStep, LambdaOneIsThePlainStepAndTheWiringMatchesByHand) {
  std::vector<std::string> names = available_backends();
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    auto be = make_backend(name);
    EXPECT_EQ(two_steps(*be, true, 1.0), two_steps(*be, false, 1.0))
        << "lam = 1 mixes nothing in: bit-identical to a plain step";
    const std::vector<double> mixed = two_steps(*be, true, 0.3);
    EXPECT_NE(mixed, two_steps(*be, false, 1.0));
    // By hand: normalise, mix with the reversed batch, forward, mixed loss, backward, SGD.
    ModelOptions mo;
    mo.num_classes = 10;
    ResNet r(*be, kNet, mo);
    r.init(7);
    InputStage rin(*be, Layout::NHWC, DType::f32, 10, 1, {}, true);
    Tensor mom = be->alloc({r.num_params()}, DType::f32);
    be->zero(mom);
    Tensor sth = Tensor::zeros({StepState::size}, DType::f32);
    sth.data_as<float>()[StepState::loss_scale] = 1.f;
    sth.data_as<float>()[StepState::inv_loss_scale] = 1.f;
    sth.data_as<float>()[StepState::mixup_lambda] = 0.3f;
    Tensor st = be->alloc({StepState::size}, DType::f32);
    be->copy(sth, st);
    for (uint64_t seed : {4u, 5u}) {
      const Batch b = random_batch(4, 32, 10, seed);
      const int s = rin.upload(b);
      rin.normalize(s);
      rin.mixup(st);
      const Tensor& z = r.forward(rin.x(), true);
      Tensor loss = be->alloc({1}, DType::f32), probs = be->alloc(z.shape(), DType::f32);
      Tensor dz = be->alloc(z.shape(), DType::f32);
      be->softmax_xent_mixup_fwd(z, rin.labels(s), rin.reversed_labels(s), 0.1f, st, loss, probs);
      be->softmax_xent_mixup_bwd(probs, rin.labels(s), rin.reversed_labels(s), 0.1f, 1.f, dz, st);
      r.backward(dz);
      SgdParams p;
      p.lr = 0.1f;
      p.decay_count = r.decay_count();
      be->sgd_update(p, r.param_slab(), r.grad_slab(), mom);
      rin.release(s);
    }
    EXPECT_EQ(mixed, host_values(*be, r.param_slab()));
  }
}

TEST(MixupTrain, RunIsDeterministicAndReported) {
  TempDir tmp("mixup");
  auto run = [&](const std::string& tag, double alpha, uint64_t seed) {
    Config c;
    c.data = DataKind::synthetic;
    c.synthetic_samples = 32;
    c.num_classes = 4;
    c.arch = "resnet18";
    c.crop_size = 32;
    c.batch_size = 8;
    c.epochs = 2;
    c.warmup_epochs = 0;
    c.print_interval = 1;
    c.seed = seed;
    c.mixup = alpha;
    c.run_scope = RunScope::train_only;
    c.save_interval = 0;
    c.report_file = (tmp.path / (tag + ".jsonl")).string();
    EXPECT_EQ(run_train(c), 0);
    return read_jsonl(c.report_file);
  };
  const auto a = run("a", 0.2, 3), b = run("b", 0.2, 3), plain = run("plain", 0.0, 3);
  EXPECT_EQ(a.front()["mixup"], 0.2);
  EXPECT_EQ(plain.front()["mixup"], 0.0);
  const auto sa = of_type(a, "step"), sb = of_type(b, "step"), sp = of_type(plain, "step");
  ASSERT_EQ(sa.size(), 8u);
  ASSERT_EQ(sb.size(), sa.size());
  bool differs_from_plain = false;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_TRUE(std::isfinite(sa[i]["train.loss"].get<double>()));
    EXPECT_EQ(sa[i]["train.loss"], sb[i]["train.loss"]) << "same seed, same run: step " << i;
    differs_from_plain |= sa[i]["train.loss"] != sp[i]["train.loss"];
  }
  EXPECT_TRUE(differs_from_plain);
  for (const auto& e : of_type(a, "epoch")) {
    EXPECT_GE(e["train.top1"].get<double>(), 0.0);
    EXPECT_EQ(e["train.top5"].get<double>(), 100.0) << "4 classes: every label is in the top 5";
  }
}

}  // namespace
}  // namespace rn50
