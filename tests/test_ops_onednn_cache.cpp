// oneDNN backend: primitive-cache behaviour (a repeated same-shape call is a cache hit and
// creates nothing) and a few ops against straightforward double-precision loops written here,
// in NCHW and NHWC. The exhaustive comparison against the "ref" backend is the op harness
// (op_backend_fixture.h, test_ops_conv_bn.cpp and its siblings).
// The first-call vs steady-state timing of a ResNet-50 3x3 conv is a benchmark:
// bench/bench_micro.cpp (build/rn50_bench_micro --benchmark_filter=Conv).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/onednn_backend.h"
#include "rn50/backend.h"

namespace rn50 {
namespace {

using onednn::OnednnBackend;

OnednnBackend& dnnl_backend(std::unique_ptr<Backend>& holder) {
  holder = make_backend("onednn");
  auto* be = dynamic_cast<OnednnBackend*>(holder.get());
  EXPECT_NE(be, nullptr);
  return *be;
}

Tensor rnd(std::vector<int64_t> shape, std::mt19937& rng, Layout l = Layout::NCHW,
           float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32, l);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

float at(const Tensor& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  return t.data_as<float>()[t.offset4(n, c, h, w)];
}

/// |got - want| <= atol + rtol * |want| for every element of a 4-D tensor vs an NCHW double
/// array (or any-rank row-major for non-4-D tensors).
void expect_close(const char* what, const Tensor& got, const std::vector<double>& want,
                  double atol, double rtol) {
  ASSERT_EQ(static_cast<int64_t>(want.size()), got.numel()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g;
    if (got.ndim() == 4) {
      const int64_t C = got.c(), H = got.h(), W = got.w();
      const int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
      g = at(got, n, c, h, w);
    } else {
      g = got.data_as<float>()[i];
    }
    if (!(std::fabs(g - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << g << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// ------------------------------------------------------------------ cache

TEST(OnednnCache, RepeatedCallsHitTheCache) {
  std::unique_ptr<Backend> h;
  OnednnBackend& be = dnnl_backend(h);
  std::mt19937 rng(1);
  Tensor x = rnd({2, 8, 10, 10}, rng, Layout::NHWC), w = rnd({16, 8, 3, 3}, rng);
  Tensor y = Tensor::empty({2, 16, 10, 10}, DType::f32, Layout::NHWC);
  Tensor y2 = Tensor::empty({2, 16, 10, 10}, DType::f32, Layout::NHWC);
  Conv2dParams p{1, 1};
  be.conv2d_fwd(p, x, w, y);
  const auto s1 = be.cache_stats();
  EXPECT_EQ(s1.entries, 1u);
  EXPECT_EQ(s1.misses, 1u);
  // Same shapes, different buffers: a hit, no new primitive.
  Tensor x2 = rnd({2, 8, 10, 10}, rng, Layout::NHWC);
  be.conv2d_fwd(p, x2, w, y2);
  be.conv2d_fwd(p, x, w, y2);
  auto s2 = be.cache_stats();
  EXPECT_EQ(s2.entries, 1u);
  EXPECT_EQ(s2.misses, 1u);
  EXPECT_EQ(s2.hits, 2u);
  // Same buffers give the same result.
  for (int64_t i = 0; i < y.numel(); ++i)
    ASSERT_EQ(y.data_as<float>()[i], y2.data_as<float>()[i]) << i;
  // A different layout or stride is a new entry.
  Tensor xc = x.to_layout(Layout::NCHW);
  Tensor yc = Tensor::empty({2, 16, 10, 10}, DType::f32, Layout::NCHW);
  be.conv2d_fwd(p, xc, w, yc);
  EXPECT_EQ(be.cache_stats().entries, 2u);

  // A training step's worth of ops, twice: the second round creates nothing.
  auto round = [&] {
    Tensor g = rnd({16}, rng), b = rnd({16}, rng), rm = rnd({16}, rng), rv = rnd({16}, rng, {}, 0.5f, 1.f);
    Tensor sm = Tensor::empty({16}, DType::f32), sv = Tensor::empty({16}, DType::f32);
    Tensor z = Tensor::empty(y.shape(), DType::f32, Layout::NHWC);
    Tensor dz = rnd(y.shape(), rng, Layout::NHWC);
    Tensor dy = Tensor::empty(y.shape(), DType::f32, Layout::NHWC);
    Tensor dg = Tensor::empty({16}, DType::f32), db = Tensor::empty({16}, DType::f32);
    BatchNormParams bp;
    bp.relu = true;
    be.batchnorm_fwd_train(bp, y, g, b, rm, rv, z, sm, sv);
    be.batchnorm_bwd(bp, y, z, dz, g, sm, sv, dy, dg, db);
    be.add_relu_fwd(z, y, dz);
    be.relu_bwd(z, dz, dy);
    Tensor dx = Tensor::empty(x.shape(), DType::f32, Layout::NHWC);
    Tensor dw = Tensor::empty(w.shape(), DType::f32);
    be.conv2d_bwd_data(p, dy, w, dx);
    be.conv2d_bwd_weights(p, x, dy, dw);
    Tensor pooled = Tensor::empty({2, 16}, DType::f32);
    be.global_avgpool_fwd(z, pooled);
    be.global_avgpool_bwd(pooled, dy);
    Tensor mp = Tensor::empty({2, 16, 5, 5}, DType::f32, Layout::NHWC);
    be.maxpool2d_fwd(Pool2dParams{}, z, mp);
    be.maxpool2d_bwd(Pool2dParams{}, z, mp, mp, dy);
  };
  round();
  const auto s3 = be.cache_stats();
  round();
  round();
  const auto s4 = be.cache_stats();
  EXPECT_EQ(s4.entries, s3.entries);
  EXPECT_EQ(s4.misses, s3.misses);
  EXPECT_GT(s4.hits, s3.hits);
}

TEST(OnednnCache, RegistryNames) {
  auto names = available_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "onednn"), names.end());
  EXPECT_EQ(make_backend("cpu")->name(), "onednn");
  auto be = make_backend("onednn");
  EXPECT_TRUE(be->supports(Op::conv2d, DType::f32, Layout::NHWC));
  EXPECT_TRUE(be->supports(Op::batchnorm, DType::f32, Layout::NCHW));
  EXPECT_FALSE(be->supports(Op::conv2d, DType::f16, Layout::NHWC)) << "fp16 compute: CUDA only";
  EXPECT_FALSE(be->supports(Op::softmax_xent, DType::bf16, Layout::NHWC)) << "the loss is f32";
  EXPECT_FALSE(be->supports(Op::sgd, DType::bf16, Layout::NHWC)) << "SGD is f32";
}

// ------------------------------------------------------------------ conv vs loops

struct ConvCase {
  int64_t N, C, H, W, K, R;
  int stride, pad;
};

class OnednnConv : public ::testing::TestWithParam<std::tuple<ConvCase, Layout>> {};

TEST_P(OnednnConv, MatchesLoops) {
  const auto [cc, layout] = GetParam();
  std::unique_ptr<Backend> h;
  OnednnBackend& be = dnnl_backend(h);
  std::mt19937 rng(7);
  const int64_t OH = (cc.H + 2 * cc.pad - cc.R) / cc.stride + 1;
  const int64_t OW = (cc.W + 2 * cc.pad - cc.R) / cc.stride + 1;
  Tensor x = rnd({cc.N, cc.C, cc.H, cc.W}, rng, layout);
  Tensor w = rnd({cc.K, cc.C, cc.R, cc.R}, rng);
  Tensor dy = rnd({cc.N, cc.K, OH, OW}, rng, layout);
  Tensor y = Tensor::empty({cc.N, cc.K, OH, OW}, DType::f32, layout);
  Tensor dx = Tensor::empty(x.shape(), DType::f32, layout);
  Tensor dw = Tensor::empty(w.shape(), DType::f32);
  Conv2dParams p{cc.stride, cc.pad};
  for (int rep = 0; rep < 2; ++rep) {  // second round runs from the cache
    be.conv2d_fwd(p, x, w, y);
    be.conv2d_bwd_data(p, dy, w, dx);
    be.conv2d_bwd_weights(p, x, dy, dw);
  }
  std::vector<double> ry(y.numel(), 0.0), rdx(x.numel(), 0.0), rdw(w.numel(), 0.0);
  for (int64_t n = 0; n < cc.N; ++n)
    for (int64_t k = 0; k < cc.K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          const double g = at(dy, n, k, oh, ow);
          for (int64_t c = 0; c < cc.C; ++c)
            for (int64_t r = 0; r < cc.R; ++r)
              for (int64_t s = 0; s < cc.R; ++s) {
                const int64_t ih = oh * cc.stride - cc.pad + r, iw = ow * cc.stride - cc.pad + s;
                if (ih < 0 || ih >= cc.H || iw < 0 || iw >= cc.W) continue;
                const double xv = at(x, n, c, ih, iw), wv = at(w, k, c, r, s);
                acc += xv * wv;
                rdx[((n * cc.C + c) * cc.H + ih) * cc.W + iw] += g * wv;
                rdw[((k * cc.C + c) * cc.R + r) * cc.R + s] += g * xv;
              }
          ry[((n * cc.K + k) * OH + oh) * OW + ow] = acc;
        }
  const double red = static_cast<double>(cc.C * cc.R * cc.R);
  expect_close("conv y", y, ry, 1e-5 * std::sqrt(red), 1e-4);
  expect_close("conv dx", dx, rdx, 1e-5 * std::sqrt(red), 1e-4);
  expect_close("conv dw", dw, rdw, 1e-5 * std::sqrt(static_cast<double>(cc.N * OH * OW)), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OnednnConv,
    ::testing::Combine(::testing::Values(ConvCase{2, 5, 9, 9, 6, 3, 1, 1},
                                         ConvCase{2, 16, 9, 9, 32, 3, 2, 1},
                                         ConvCase{3, 8, 10, 10, 16, 1, 2, 0},
                                         ConvCase{2, 3, 15, 15, 8, 7, 2, 3},
                                         ConvCase{2, 64, 8, 8, 64, 1, 1, 0}),
                       ::testing::Values(Layout::NCHW, Layout::NHWC)));

// ------------------------------------------------------------------ batchnorm vs loops

class OnednnBn : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(OnednnBn, TrainForwardBackwardMatchLoops) {
  const auto [layout, relu] = GetParam();
  std::unique_ptr<Backend> h;
  OnednnBackend& be = dnnl_backend(h);
  std::mt19937 rng(3);
  const int64_t N = 3, C = 19, H = 5, W = 6, M = N * H * W;
  Tensor x = rnd({N, C, H, W}, rng, layout, -2.f, 3.f);
  Tensor g = rnd({C}, rng, {}, 0.5f, 1.5f), b = rnd({C}, rng);
  Tensor rm = rnd({C}, rng), rv = rnd({C}, rng, {}, 0.5f, 2.f);
  const Tensor rm0 = rm.clone(), rv0 = rv.clone();
  Tensor y = Tensor::empty(x.shape(), DType::f32, layout);
  Tensor sm = Tensor::empty({C}, DType::f32), sv = Tensor::empty({C}, DType::f32);
  Tensor dy = rnd(x.shape(), rng, layout);
  Tensor dx = Tensor::empty(x.shape(), DType::f32, layout);
  Tensor dg = Tensor::empty({C}, DType::f32), db = Tensor::empty({C}, DType::f32);
  BatchNormParams p;
  p.relu = relu;
  be.batchnorm_fwd_train(p, x, g, b, rm, rv, y, sm, sv);
  be.batchnorm_bwd(p, x, y, dy, g, sm, sv, dx, dg, db);

  std::vector<double> ry(x.numel()), rdx(x.numel()), mean(C), var(C), rrm(C), rrv(C), rdg(C),
      rdb(C);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) s += at(x, n, c, hh, ww);
    mean[c] = s / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) ss += std::pow(at(x, n, c, hh, ww) - mean[c], 2);
    var[c] = ss / M;
    rrm[c] = 0.9 * rm0.data_as<float>()[c] + 0.1 * mean[c];
    rrv[c] = 0.9 * rv0.data_as<float>()[c] + 0.1 * var[c] * M / (M - 1);
    const double inv = 1.0 / std::sqrt(var[c] + p.eps), gc = g.data_as<float>()[c];
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) {
          const int64_t i = ((n * C + c) * H + hh) * W + ww;
          const double xh = (at(x, n, c, hh, ww) - mean[c]) * inv;
          double yv = gc * xh + b.data_as<float>()[c];
          if (relu) yv = std::max(yv, 0.0);
          ry[i] = yv;
          const double d = (relu && yv <= 0) ? 0.0 : at(dy, n, c, hh, ww);
          sdy += d;
          sdyx += d * xh;
        }
    rdb[c] = sdy;
    rdg[c] = sdyx;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) {
          const int64_t i = ((n * C + c) * H + hh) * W + ww;
          const double xh = (at(x, n, c, hh, ww) - mean[c]) * inv;
          const double d = (relu && ry[i] <= 0) ? 0.0 : at(dy, n, c, hh, ww);
          rdx[i] = gc * inv / M * (M * d - sdy - xh * sdyx);
        }
  }
  expect_close("bn y", y, ry, 1e-5, 1e-4);
  expect_close("bn save_mean", sm, mean, 1e-5, 1e-4);
  expect_close("bn save_var", sv, var, 1e-5, 1e-4);
  expect_close("bn running_mean", rm, rrm, 1e-5, 1e-4);
  expect_close("bn running_var", rv, rrv, 1e-5, 1e-4);
  expect_close("bn dgamma", dg, rdg, 1e-4, 1e-4);
  expect_close("bn dbeta", db, rdb, 1e-4, 1e-4);
  expect_close("bn dx", dx, rdx, 1e-5, 1e-3);

  // Inference with the running statistics.
  Tensor yi = Tensor::empty(x.shape(), DType::f32, layout);
  be.batchnorm_fwd_infer(p, x, g, b, rm, rv, yi);
  std::vector<double> ryi(x.numel());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) {
          double v = (at(x, n, c, hh, ww) - rm.data_as<float>()[c]) /
                         std::sqrt(rv.data_as<float>()[c] + p.eps) * g.data_as<float>()[c] +
                     b.data_as<float>()[c];
          ryi[((n * C + c) * H + hh) * W + ww] = relu ? std::max(v, 0.0) : v;
        }
  expect_close("bn infer y", yi, ryi, 1e-5, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Layouts, OnednnBn,
                         ::testing::Combine(::testing::Values(Layout::NCHW, Layout::NHWC),
                                            ::testing::Bool()));

// ------------------------------------------------------------------ pooling vs loops

TEST(OnednnPool, MaxPoolRoutesToFirstMaximum) {
  std::unique_ptr<Backend> hb;
  OnednnBackend& be = dnnl_backend(hb);
  std::mt19937 rng(5);
  for (Layout l : {Layout::NCHW, Layout::NHWC}) {
    const int64_t N = 2, C = 70, H = 9, W = 8;
    Tensor x = Tensor::empty({N, C, H, W}, DType::f32, l);
    std::uniform_int_distribution<int> u(0, 3);  // many ties
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(u(rng));
    Pool2dParams p;  // 3x3, stride 2, pad 1
    const int64_t OH = (H + 2 - 3) / 2 + 1, OW = (W + 2 - 3) / 2 + 1;
    Tensor y = Tensor::empty({N, C, OH, OW}, DType::f32, l);
    Tensor dy = rnd({N, C, OH, OW}, rng, l);
    Tensor dx = Tensor::empty(x.shape(), DType::f32, l);
    be.maxpool2d_fwd(p, x, y);
    be.maxpool2d_bwd(p, x, y, dy, dx);
    std::vector<double> ry(y.numel()), rdx(x.numel(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double best = -INFINITY;
            int64_t bi = -1;
            for (int64_t ih = oh * 2 - 1; ih < oh * 2 + 2; ++ih)
              for (int64_t iw = ow * 2 - 1; iw < ow * 2 + 2; ++iw) {
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                if (at(x, n, c, ih, iw) > best) {
                  best = at(x, n, c, ih, iw);
                  bi = ((n * C + c) * H + ih) * W + iw;
                }
              }
            ry[((n * C + c) * OH + oh) * OW + ow] = best;
            rdx[bi] += at(dy, n, c, oh, ow);
          }
    expect_close("maxpool y", y, ry, 0, 0);
    expect_close("maxpool dx", dx, rdx, 1e-6, 1e-6);

    Tensor gp = Tensor::empty({N, C}, DType::f32);
    be.global_avgpool_fwd(x, gp);
    Tensor gdy = rnd({N, C}, rng);
    be.global_avgpool_bwd(gdy, dx);
    std::vector<double> rgp(N * C, 0.0), rgdx(x.numel());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t ih = 0; ih < H; ++ih)
          for (int64_t iw = 0; iw < W; ++iw) {
            rgp[n * C + c] += at(x, n, c, ih, iw) / (H * W);
            rgdx[((n * C + c) * H + ih) * W + iw] = gdy.data_as<float>()[n * C + c] / (H * W);
          }
    expect_close("avgpool y", gp, rgp, 1e-6, 1e-5);
    expect_close("avgpool dx", dx, rgdx, 1e-7, 1e-5);
  }
}

// ------------------------------------------------------------------ linear, loss, sgd, misc

TEST(OnednnMisc, LinearLossSgdEltwiseCopyNormalize) {
  std::unique_ptr<Backend> hb;
  OnednnBackend& be = dnnl_backend(hb);
  std::mt19937 rng(11);
  const int64_t N = 4, C = 33, K = 10;
  Tensor x = rnd({N, C}, rng), w = rnd({K, C}, rng), b = rnd({K}, rng), dy = rnd({N, K}, rng);
  Tensor y = Tensor::empty({N, K}, DType::f32), dx = Tensor::empty({N, C}, DType::f32);
  Tensor dw = Tensor::empty({K, C}, DType::f32), db = Tensor::empty({K}, DType::f32);
  be.linear_fwd(x, w, b, y);
  be.linear_bwd(x, w, dy, dx, dw, db);
  std::vector<double> ry(N * K), rdx(N * C, 0.0), rdw(K * C, 0.0), rdb(K, 0.0);
  const float* xp = x.data_as<float>();
  const float* wp = w.data_as<float>();
  const float* gp = dy.data_as<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double acc = b.data_as<float>()[k];
      for (int64_t c = 0; c < C; ++c) {
        acc += double(xp[n * C + c]) * wp[k * C + c];
        rdx[n * C + c] += double(gp[n * K + k]) * wp[k * C + c];
        rdw[k * C + c] += double(gp[n * K + k]) * xp[n * C + c];
      }
      ry[n * K + k] = acc;
      rdb[k] += gp[n * K + k];
    }
  expect_close("linear y", y, ry, 1e-5, 1e-5);
  expect_close("linear dx", dx, rdx, 1e-5, 1e-5);
  expect_close("linear dw", dw, rdw, 1e-5, 1e-5);
  expect_close("linear db", db, rdb, 1e-5, 1e-5);
  Tensor none;
  be.linear_bwd(x, w, dy, none, dw, db);  // dx skipped
  expect_close("linear dw (no dx)", dw, rdw, 1e-5, 1e-5);

  // Softmax cross-entropy with label smoothing.
  Tensor logits = rnd({N, K}, rng, {}, -4.f, 4.f);
  Tensor labels = Tensor::empty({N}, DType::i32);
  for (int64_t n = 0; n < N; ++n) labels.data_as<int32_t>()[n] = static_cast<int32_t>((3 * n + 1) % K);
  Tensor loss = Tensor::empty({1}, DType::f32), probs = Tensor::empty({N, K}, DType::f32);
  Tensor dl = Tensor::empty({N, K}, DType::f32);
  const float eps = 0.1f, scale = 8.f;
  be.softmax_xent_fwd(logits, labels, eps, loss, probs);
  be.softmax_xent_bwd(probs, labels, eps, scale, dl, Tensor());
  std::vector<double> rp(N * K), rdl(N * K), rloss(1, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, s = 0;
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, double(logits.data_as<float>()[n * K + k]));
    for (int64_t k = 0; k < K; ++k) s += std::exp(logits.data_as<float>()[n * K + k] - mx);
    for (int64_t k = 0; k < K; ++k) {
      const double lp = logits.data_as<float>()[n * K + k] - mx - std::log(s);
      const double q = (k == labels.data_as<int32_t>()[n] ? 1.0 - eps : 0.0) + eps / K;
      rp[n * K + k] = std::exp(lp);
      rloss[0] -= q * lp / N;
      rdl[n * K + k] = scale * (std::exp(lp) - q) / N;
    }
  }
  expect_close("xent loss", loss, rloss, 1e-6, 1e-5);
  expect_close("xent probs", probs, rp, 1e-7, 1e-5);
  expect_close("xent dlogits", dl, rdl, 1e-6, 1e-5);
  labels.data_as<int32_t>()[0] = static_cast<int32_t>(K);
  EXPECT_THROW(be.softmax_xent_fwd(logits, labels, eps, loss, probs), Error);

  // SGD over a slab with a decayed prefix.
  const int64_t S = 1000, D = 600;
  Tensor prm = rnd({S}, rng), grd = rnd({S}, rng), buf = rnd({S}, rng);
  std::vector<double> rprm(S), rbuf(S);
  SgdParams sp;
  sp.lr = 0.25f;
  sp.decay_count = D;
  sp.grad_scale = 0.5f;
  for (int64_t i = 0; i < S; ++i) {
    double g = double(sp.grad_scale) * grd.data_as<float>()[i];
    if (i < D) g += double(sp.weight_decay) * prm.data_as<float>()[i];
    rbuf[i] = double(sp.momentum) * buf.data_as<float>()[i] + g;
    rprm[i] = prm.data_as<float>()[i] - double(sp.lr) * rbuf[i];
  }
  be.sgd_update(sp, prm, grd, buf);
  expect_close("sgd params", prm, rprm, 1e-6, 1e-6);
  expect_close("sgd momentum", buf, rbuf, 1e-6, 1e-6);

  // Elementwise ops with mixed layouts, and copy() layout conversion.
  Tensor a = rnd({2, 5, 3, 4}, rng, Layout::NHWC), c = rnd({2, 5, 3, 4}, rng, Layout::NCHW);
  Tensor s = Tensor::empty(a.shape(), DType::f32, Layout::NCHW);
  Tensor r = Tensor::empty(a.shape(), DType::f32, Layout::NHWC);
  Tensor g2 = Tensor::empty(a.shape(), DType::f32, Layout::NCHW);
  be.add_relu_fwd(a, c, s);
  be.relu_fwd(c, r);
  be.relu_bwd(s, a, g2);
  std::vector<double> rs(a.numel()), rr(a.numel()), rg(a.numel()), ra(a.numel());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 5; ++ch)
      for (int64_t hh = 0; hh < 3; ++hh)
        for (int64_t ww = 0; ww < 4; ++ww) {
          const int64_t i = ((n * 5 + ch) * 3 + hh) * 4 + ww;
          rs[i] = std::max(0.0, double(at(a, n, ch, hh, ww)) + at(c, n, ch, hh, ww));
          rr[i] = std::max(0.f, at(c, n, ch, hh, ww));
          rg[i] = rs[i] > 0 ? at(a, n, ch, hh, ww) : 0.0;
          ra[i] = at(a, n, ch, hh, ww);
        }
  expect_close("add_relu", s, rs, 1e-7, 1e-6);
  expect_close("relu", r, rr, 0, 0);
  expect_close("relu_bwd", g2, rg, 0, 0);
  Tensor ac = Tensor::empty(a.shape(), DType::f32, Layout::NCHW);
  be.copy(a, ac);
  expect_close("copy NHWC->NCHW", ac, ra, 0, 0);

  // normalize_u8 into both layouts.
  Tensor img = Tensor::empty({2, 3, 4, 5}, DType::u8, Layout::NHWC);
  for (int64_t i = 0; i < img.numel(); ++i) img.data_as<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  for (Layout l : {Layout::NCHW, Layout::NHWC}) {
    Tensor out = Tensor::empty(img.shape(), DType::f32, l);
    be.normalize_u8(img, mean, stdv, out);
    std::vector<double> ro(img.numel());
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t hh = 0; hh < 4; ++hh)
          for (int64_t ww = 0; ww < 5; ++ww)
            ro[((n * 3 + ch) * 4 + hh) * 5 + ww] =
                (img.data_as<uint8_t>()[img.offset4(n, ch, hh, ww)] / 255.0 - mean[ch]) / stdv[ch];
    expect_close("normalize_u8", out, ro, 1e-6, 1e-6);
  }
}

}  // namespace
}  // namespace rn50
