// Op harness (see op_backend_fixture.h), the loss end of the network: softmax cross-entropy
// (with label smoothing, the loss scale given or read from the device step state), its mixup
// form (two label sets mixed by the step state's lambda), mixup of the input images, and the
// top-1/top-5 hit counts (ties, NaNs). Every backend but "ref" against "ref", the mixup and top-k
// results also against their definitions written out here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "op_backend_fixture.h"
#include "rn50/backend.h"

namespace rn50::test {
namespace {

// ---------------------------------------------------------------- loss

TEST_P(OpsBackend, SoftmaxXent) {
  REQUIRE_F32("softmax cross-entropy");
  REQUIRE_OP(Op::softmax_xent);
  struct LossShape {
    int64_t N, K;
  };
  for (const LossShape& s : {LossShape{5, 1000}, LossShape{3, 10}, LossShape{1, 2}})
    for (float eps : {0.0f, 0.1f}) {
      SCOPED_TRACE(::testing::Message() << "N" << s.N << " K" << s.K << " smoothing " << eps);
      Tensor z = rand({s.N, s.K}, -4, 4), lab = Tensor::empty({s.N}, DType::i32);
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(s.K - 1));
      for (int64_t n = 0; n < s.N; ++n) lab.data_as<int32_t>()[n] = pick(rng_);
      Tensor labd = up(lab, DType::i32, NCHW);
      Tensor loss = out({1}, F32), probs = out({s.N, s.K}, F32);
      be().softmax_xent_fwd(up(z, F32, NCHW), labd, eps, loss, probs);
      Tensor lossr = rout({1}), probsr = rout({s.N, s.K});
      ref().softmax_xent_fwd(rin(z, F32, NCHW), lab, eps, lossr, probsr);
      check("softmax_xent_fwd loss", loss, lossr, kLoss);
      check("softmax_xent_fwd probs", probs, probsr, kProbs);
      Tensor ph = host32(probsr);
      for (float scale : {1.0f, 128.0f}) {
        Tensor dz = out({s.N, s.K}, F32);
        be().softmax_xent_bwd(up(ph, F32, NCHW), labd, eps, scale, dz, Tensor());
        Tensor dzr = rout({s.N, s.K});
        ref().softmax_xent_bwd(rin(ph, F32, NCHW), lab, eps, scale, dzr, Tensor());
        check("softmax_xent_bwd dlogits (scale " + std::to_string(scale) + ")", dz, dzr, kProbs);
      }
      // Loss scale read on the device from a step state: 2 * state[loss_scale] = 2 * 64.
      Tensor st = step_state(0.1f, 64.f);
      Tensor dz = out({s.N, s.K}, F32);
      be().softmax_xent_bwd(up(ph, F32, NCHW), labd, eps, 2.f, dz, up(st, F32, NCHW));
      Tensor dzr = rout({s.N, s.K});
      ref().softmax_xent_bwd(rin(ph, F32, NCHW), lab, eps, 128.f, dzr, Tensor());
      check("softmax_xent_bwd dlogits (scale 2 x state loss_scale 64)", dz, dzr, kProbs);
    }
}

// Mixup targets: row n's target mixes labels[n] and labels_b[n] by state[mixup_lambda]; lam 1
// and 0 reduce to the plain loss of either label set (checked against the plain reference).
TEST_P(OpsBackend, SoftmaxXentMixup) {
  REQUIRE_F32("softmax cross-entropy");
  REQUIRE_OP(Op::softmax_xent);
  struct LossShape {
    int64_t N, K;
  };
  for (const LossShape& s : {LossShape{6, 1000}, LossShape{5, 10}})
    for (float lam : {0.3f, 0.0f, 1.0f, 0.9f}) {
      const float eps = 0.1f;
      SCOPED_TRACE(::testing::Message() << "N" << s.N << " K" << s.K << " lam " << lam);
      Tensor z = rand({s.N, s.K}, -4, 4), a = Tensor::empty({s.N}, DType::i32);
      Tensor b = Tensor::empty({s.N}, DType::i32);
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(s.K - 1));
      for (int64_t n = 0; n < s.N; ++n) {
        a.data_as<int32_t>()[n] = pick(rng_);
        b.data_as<int32_t>()[n] = n == 0 ? a.data_as<int32_t>()[n] : pick(rng_);  // one equal
      }
      Tensor st = step_state(0.1f, 8.f);
      st.data_as<float>()[StepState::mixup_lambda] = lam;
      Tensor std_ = up(st, F32, NCHW), ad = up(a, DType::i32, NCHW), bd = up(b, DType::i32, NCHW);
      Tensor loss = out({1}, F32), probs = out({s.N, s.K}, F32);
      be().softmax_xent_mixup_fwd(up(z, F32, NCHW), ad, bd, eps, std_, loss, probs);
      Tensor lossr = rout({1}), probsr = rout({s.N, s.K});
      ref().softmax_xent_mixup_fwd(rin(z, F32, NCHW), a, b, eps, st, lossr, probsr);
      check("softmax_xent_mixup_fwd loss", loss, lossr, kLoss);
      check("softmax_xent_mixup_fwd probs", probs, probsr, kProbs);
      Tensor ph = host32(probsr);
      Tensor dz = out({s.N, s.K}, F32);
      be().softmax_xent_mixup_bwd(up(ph, F32, NCHW), ad, bd, eps, 2.f, dz, std_);
      Tensor dzr = rout({s.N, s.K});
      ref().softmax_xent_mixup_bwd(rin(ph, F32, NCHW), a, b, eps, 2.f, dzr, st);
      check("softmax_xent_mixup_bwd dlogits (scale 2 x state loss_scale 8)", dz, dzr, kProbs);
      if (lam == 1.f || lam == 0.f) {  // the plain loss of the dominant labels
        const Tensor& only = lam == 1.f ? a : b;
        Tensor lp = rout({1}), pp = rout({s.N, s.K}), dp = rout({s.N, s.K});
        ref().softmax_xent_fwd(rin(z, F32, NCHW), only, eps, lp, pp);
        ref().softmax_xent_bwd(rin(ph, F32, NCHW), only, eps, 16.f, dp, Tensor());
        check("softmax_xent_mixup_fwd loss at lam 0/1 = plain loss", loss, lp, kLoss);
        check("softmax_xent_mixup_bwd at lam 0/1 = plain dlogits", dz, dp, kProbs);
      }
    }
}

TEST_P(OpsBackend, MixupImages) {
  REQUIRE_OP(Op::mixup);
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{4, 3, 9, 7}, std::vector<int64_t>{5, 3, 16, 16},
        std::vector<int64_t>{1, 3, 4, 4}})
    for (float lam : {0.27f, 0.5f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << "N" << shape[0] << " lam " << lam);
      Tensor x = rand(shape, -2, 2);
      Tensor st = step_state(0.1f, 1.f);
      st.data_as<float>()[StepState::mixup_lambda] = lam;
      Tensor xd = up(x, dt(), lay());
      be().mixup_images(xd, up(st, F32, NCHW));
      Tensor xr = rin(x, dt(), lay());
      ref().mixup_images(xr, st);
      check("mixup_images x", xd, xr, tol(kMixup));
      // The naive definition, on the rounded input values: x[n] = lam x[n] + (1-lam) x[N-1-n].
      Tensor xin = rin(x, dt(), NCHW), want = rout(shape);
      const int64_t N = shape[0], per = x.numel() / N;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < per; ++i)
          want.data_as<double>()[n * per + i] =
              lam * xin.data_as<double>()[n * per + i] +
              (1.0 - lam) * xin.data_as<double>()[(N - 1 - n) * per + i];
      check("mixup_images x vs the definition", xd, want, tol(kMixup));
    }
}

// Top-1/top-5 hits against the reference on logits with ties (integers in a small range), NaNs
// in other classes and in a label's own logit, K below and above 5.
TEST_P(OpsBackend, TopkHits) {
  REQUIRE_F32("topk_hits");
  REQUIRE_OP(Op::topk);
  struct Shape {
    int64_t N, K;
  };
  for (const Shape& s : {Shape{300, 1000}, Shape{64, 10}, Shape{7, 3}, Shape{1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "N" << s.N << " K" << s.K);
    Tensor z = Tensor::empty({s.N, s.K}, F32), lab = Tensor::empty({s.N}, DType::i32);
    std::uniform_int_distribution<int> val(-3, 3);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(s.K - 1));
    for (int64_t i = 0; i < z.numel(); ++i) z.data_as<float>()[i] = static_cast<float>(val(rng_));
    for (int64_t n = 0; n < s.N; ++n) lab.data_as<int32_t>()[n] = pick(rng_);
    if (s.N > 5) {
      z.data_as<float>()[1 * s.K + (lab.data_as<int32_t>()[1] + 1) % s.K] = NAN;  // another class
      z.data_as<float>()[2 * s.K + lab.data_as<int32_t>()[2]] = NAN;            // the label's
      for (int64_t k = 0; k < s.K; ++k) z.data_as<float>()[3 * s.K + k] = 1.f;  // all tied
    }
    Tensor hits = out({2}, F32);
    be().topk_hits(up(z, F32, NCHW), up(lab, DType::i32, NCHW), hits);
    Tensor hr = Tensor::empty({2}, F32);
    ref().topk_hits(z, lab, hr);
    check("topk_hits", hits, convert(hr, F64), kCopy);
    // An independent count: sort each row (stable, descending, NaN last).
    int64_t want1 = 0, want5 = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      std::vector<int64_t> idx(static_cast<size_t>(s.K));
      for (int64_t k = 0; k < s.K; ++k) idx[static_cast<size_t>(k)] = k;
      const float* r = z.data_as<float>() + n * s.K;
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
        if (std::isnan(r[a]) != std::isnan(r[b])) return std::isnan(r[b]);
        return !std::isnan(r[a]) && r[a] > r[b];
      });
      const int32_t l = lab.data_as<int32_t>()[n];
      const auto pos = std::find(idx.begin(), idx.end(), l) - idx.begin();
      const bool nan_label = std::isnan(r[l]);
      want1 += !nan_label && pos < 1;
      want5 += !nan_label && pos < 5;
    }
    const Tensor h = test::download(be(), hits);
    EXPECT_EQ(h.data_as<double>()[0], static_cast<double>(want1));
    EXPECT_EQ(h.data_as<double>()[1], static_cast<double>(want5));
  }
}

RN50_INSTANTIATE_OPS_BACKEND();

}  // namespace
}  // namespace rn50::test
