// Tests of the reference backend ("ref") on its own:
//  * forward ops against torch golden values (conv2d, max pooling, loss, SGD; computed once
//    with torch 1.13 in float64, resp. float32 for SGD) and against direct formulas (BN
//    statistics and running-stat update, inference BN, avgpool, normalize_u8);
//  * every backward op against central finite differences of the matching forward op, on f64
//    tensors: L = sum(r * y) with random r, dL/dtheta_i ~ (L(theta + h e_i) - L(theta - h e_i))
//    / (2 h), h = 1e-6, tolerance |num - ana| <= 1e-6 + 1e-6 * |ana| (f64 round-off of L is
//    ~1e-15 * |L| / h ~ 1e-8, truncation ~h^2);
//  * argument checking (rn50::Error naming the op) and copy() conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "core/check.h"
#include "op_harness.h"
#include "rn50/backend.h"

namespace rn50 {
namespace {

using test::ref_backend;

constexpr DType F64 = DType::f64;
constexpr Layout NCHW = Layout::NCHW;
constexpr Layout NHWC = Layout::NHWC;

Tensor rnd(std::vector<int64_t> shape, std::mt19937_64& rng, Layout l = NCHW, double lo = -1,
           double hi = 1) {
  return test::random_tensor(std::move(shape), rng, lo, hi, F64, l);
}
Tensor empty64(std::vector<int64_t> shape, Layout l = NCHW) {
  return Tensor::empty(std::move(shape), F64, l);
}

// sum(r * y) over memory order (r and y share shape and layout).
double dot(const Tensor& r, const Tensor& y) {
  EXPECT_EQ(r.shape(), y.shape());
  EXPECT_EQ(r.layout(), y.layout());
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += r.data_as<double>()[i] * y.data_as<double>()[i];
  return s;
}

// Central-difference check of the analytic gradient `grad` (same shape and layout as `param`)
// of loss() with respect to `param`, which is perturbed in place. At most `max_points` elements
// (a deterministic random subset) are checked.
void check_grad(const std::string& what, Tensor& param, const Tensor& grad,
                const std::function<double()>& loss, int max_points = 400) {
  ASSERT_EQ(param.shape(), grad.shape()) << what;
  ASSERT_EQ(param.layout(), grad.layout()) << what;
  const double h = 1e-6, atol = 1e-6, rtol = 1e-6;
  std::vector<int64_t> idx(static_cast<size_t>(param.numel()));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  if (static_cast<int64_t>(idx.size()) > max_points) {
    std::mt19937_64 rng(77);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(max_points);
  }
  double* p = param.data_as<double>();
  int bad = 0;
  for (int64_t i : idx) {
    const double keep = p[i];
    p[i] = keep + h;
    const double lp = loss();
    p[i] = keep - h;
    const double lm = loss();
    p[i] = keep;
    const double num = (lp - lm) / (2 * h);
    const double ana = grad.data_as<double>()[i];
    if (!(std::fabs(num - ana) <= atol + rtol * std::fabs(ana)) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " of " << param.str() << ": numeric " << num
                    << " analytic " << ana;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << idx.size() << " gradients wrong";
}

// ---------------------------------------------------------------- convolution

// Direct definition of torch.nn.functional.conv2d (no bias), written independently of the
// backend's loop structure, through Tensor::offset4.
Tensor conv_direct(const Tensor& x, const Tensor& w, int st, int pad) {
  const int64_t N = x.n(), C = x.c(), H = x.h(), W = x.w(), K = w.n(), R = w.h(), S = w.w();
  const int64_t OH = (H + 2 * pad - R) / st + 1, OW = (W + 2 * pad - S) / st + 1;
  Tensor y = Tensor::zeros({N, K, OH, OW}, F64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t q = 0; q < S; ++q) {
                const int64_t ih = oh * st - pad + r, iw = ow * st - pad + q;
                if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
                s += x.data_as<double>()[x.offset4(n, c, ih, iw)] *
                     w.data_as<double>()[w.offset4(k, c, r, q)];
              }
          y.data_as<double>()[y.offset4(n, k, oh, ow)] = s;
        }
  return y;
}

TEST(RefForward, ConvMatchesTorchGolden) {
  // x[i] = sin(0.7 i + 0.1) (1,2,5,5), w[i] = 0.5 cos(0.3 i) (3,2,3,3), stride 2, pad 1.
  const double want[27] = {
      1.0353150727465374,   0.7589226457728259,   -0.3148146640008212,  -0.25989897236024895,
      -0.630811767710348,   -0.19515224331081338, -0.7196471538459207,  -0.15208312126701148,
      0.3771616917934726,   0.6435430670249119,   0.8080179402034947,   0.2848664787217989,
      -0.10227697766421846, -0.07639032853915634, 0.052551806906642295, -0.37560407889368475,
      -0.7275048949953176,  -0.506393090831272,   -0.21841067274056786, 0.26676381478917344,
      0.6764201132800007,   0.13007003416740215,  0.5338429730809088,   0.2618607582339308,
      0.24286068774828712,  -0.7714012268668327,  -1.019969866147832};
  Tensor x = empty64({1, 2, 5, 5}), w = empty64({3, 2, 3, 3});
  for (int i = 0; i < 50; ++i) x.data_as<double>()[i] = std::sin(0.7 * i + 0.1);
  for (int i = 0; i < 54; ++i) w.data_as<double>()[i] = 0.5 * std::cos(0.3 * i);
  for (Layout lx : {NCHW, NHWC})
    for (Layout ly : {NCHW, NHWC}) {
      Tensor xl = x.to_layout(lx), y = empty64({1, 3, 3, 3}, ly);
      ref_backend().conv2d_fwd({2, 1}, xl, w, y);
      Tensor yn = y.to_layout(NCHW);
      for (int i = 0; i < 27; ++i)
        EXPECT_NEAR(yn.data_as<double>()[i], want[i], 1e-12)
            << i << " x " << layout_name(lx) << " y " << layout_name(ly);
    }
}

struct ConvCase {
  int64_t C, K, H, W, R;
  int stride, pad;
  Layout lx, ly;
};

TEST(RefGradcheck, Conv2d) {
  const ConvCase cases[] = {
      {3, 4, 5, 5, 1, 1, 0, NCHW, NCHW},   {3, 4, 7, 6, 1, 2, 0, NHWC, NHWC},
      {3, 4, 6, 5, 3, 1, 1, NHWC, NCHW},   {4, 3, 7, 7, 3, 2, 1, NCHW, NHWC},
      {2, 3, 8, 7, 3, 2, 0, NHWC, NHWC},   {3, 2, 6, 6, 3, 1, 0, NCHW, NCHW},
      {3, 4, 11, 10, 7, 2, 3, NCHW, NCHW}, {3, 4, 9, 9, 7, 2, 3, NHWC, NHWC},
  };
  std::mt19937_64 rng(1);
  for (const ConvCase& cc : cases) {
    const int64_t N = 2;
    const int64_t OH = (cc.H + 2 * cc.pad - cc.R) / cc.stride + 1;
    const int64_t OW = (cc.W + 2 * cc.pad - cc.R) / cc.stride + 1;
    SCOPED_TRACE(::testing::Message()
                 << "C" << cc.C << " K" << cc.K << " " << cc.H << "x" << cc.W << " k" << cc.R
                 << " s" << cc.stride << " p" << cc.pad << " x " << layout_name(cc.lx) << " y "
                 << layout_name(cc.ly));
    const Conv2dParams p{cc.stride, cc.pad};
    Tensor x = rnd({N, cc.C, cc.H, cc.W}, rng, cc.lx), w = rnd({cc.K, cc.C, cc.R, cc.R}, rng);
    Tensor r = rnd({N, cc.K, OH, OW}, rng, cc.ly), y = empty64({N, cc.K, OH, OW}, cc.ly);
    auto loss = [&] {
      ref_backend().conv2d_fwd(p, x, w, y);
      return dot(r, y);
    };
    // Forward against the direct definition.
    ref_backend().conv2d_fwd(p, x, w, y);
    EXPECT_TRUE(
        test::all_close("conv fwd", y, conv_direct(x, w, cc.stride, cc.pad), {1e-13, 1e-13}));
    Tensor dx = empty64(x.shape(), cc.lx), dw = empty64(w.shape());
    ref_backend().conv2d_bwd_data(p, r, w, dx);
    ref_backend().conv2d_bwd_weights(p, x, r, dw);
    check_grad("conv dx", x, dx, loss);
    check_grad("conv dw", w, dw, loss);
  }
}

// ---------------------------------------------------------------- batch normalisation

TEST(RefGradcheck, BatchNormTrain) {
  std::mt19937_64 rng(2);
  for (bool relu : {false, true})
    for (Layout l : {NCHW, NHWC}) {
      SCOPED_TRACE(::testing::Message() << "relu " << relu << " " << layout_name(l));
      const int64_t C = 3;
      BatchNormParams p;
      p.relu = relu;
      Tensor x = rnd({2, C, 4, 5}, rng, l, -1, 2), gamma = rnd({C}, rng, NCHW, 0.5, 1.5);
      Tensor beta = rnd({C}, rng, NCHW, -0.5, 0.5), r = rnd(x.shape(), rng, l);
      Tensor rm = Tensor::zeros({C}, F64), rv = Tensor::zeros({C}, F64);
      Tensor sm = empty64({C}), sv = empty64({C}), y = empty64(x.shape(), l);
      auto loss = [&] {
        ref_backend().batchnorm_fwd_train(p, x, gamma, beta, rm, rv, y, sm, sv);
        return dot(r, y);
      };
      loss();
      if (relu) {  // the check is meaningful only if the mask is mixed
        int64_t pos = 0;
        for (int64_t i = 0; i < y.numel(); ++i) pos += y.data_as<double>()[i] > 0;
        EXPECT_GT(pos, 0);
        EXPECT_LT(pos, y.numel());
      }
      Tensor dx = empty64(x.shape(), l), dg = empty64({C}), db = empty64({C});
      ref_backend().batchnorm_bwd(p, x, y, r, gamma, sm, sv, dx, dg, db);
      check_grad("bn dx", x, dx, loss);
      check_grad("bn dgamma", gamma, dg, loss);
      check_grad("bn dbeta", beta, db, loss);
    }
}

TEST(RefForward, BatchNormStatisticsAndRunningUpdate) {
  std::mt19937_64 rng(3);
  const int64_t N = 3, C = 4, H = 3, W = 5, M = N * H * W;
  for (Layout l : {NCHW, NHWC}) {
    // f32 throughout, as the model uses it; running stats start from random values.
    Tensor x = test::random_tensor({N, C, H, W}, rng, -2, 3, DType::f32, l);
    Tensor gamma = test::random_tensor({C}, rng, 0.5, 1.5), beta = test::random_tensor({C}, rng);
    Tensor rm = test::random_tensor({C}, rng), rv = test::random_tensor({C}, rng, 0.5, 2);
    Tensor rm0 = rm.clone(), rv0 = rv.clone();
    Tensor y = Tensor::empty(x.shape(), DType::f32, l), sm = Tensor::empty({C}, DType::f32),
           sv = Tensor::empty({C}, DType::f32);
    BatchNormParams p;  // eps 1e-5, momentum 0.1
    ref_backend().batchnorm_fwd_train(p, x, gamma, beta, rm, rv, y, sm, sv);
    Tensor yi = Tensor::empty(x.shape(), DType::f32, l);
    ref_backend().batchnorm_fwd_infer(p, x, gamma, beta, rm, rv, yi);
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, s2 = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) s += x.data_as<float>()[x.offset4(n, c, h, w)];
      const double mean = s / M;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const double d = x.data_as<float>()[x.offset4(n, c, h, w)] - mean;
            s2 += d * d;
          }
      const double var = s2 / M;  // biased
      EXPECT_NEAR(sm.data_as<float>()[c], mean, 1e-6);
      EXPECT_NEAR(sv.data_as<float>()[c], var, 1e-6 * var);
      EXPECT_NEAR(rm.data_as<float>()[c], 0.9 * rm0.data_as<float>()[c] + 0.1 * mean, 1e-6);
      EXPECT_NEAR(rv.data_as<float>()[c], 0.9 * rv0.data_as<float>()[c] + 0.1 * var * M / (M - 1.0),
                  1e-6);
      const double g = gamma.data_as<float>()[c], b = beta.data_as<float>()[c];
      const double rmc = rm.data_as<float>()[c], rvc = rv.data_as<float>()[c];
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const int64_t o = x.offset4(n, c, h, w);
            const double xv = x.data_as<float>()[o];
            EXPECT_NEAR(y.data_as<float>()[o], g * (xv - mean) / std::sqrt(var + 1e-5) + b, 1e-5);
            EXPECT_NEAR(yi.data_as<float>()[o], g * (xv - rmc) / std::sqrt(rvc + 1e-5) + b, 1e-5);
          }
    }
    // Fused ReLU is max(bn(x), 0) of the unfused result.
    p.relu = true;
    Tensor yr = Tensor::empty(x.shape(), DType::f32, l);
    ref_backend().batchnorm_fwd_train(p, x, gamma, beta, rm, rv, yr, sm, sv);
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_EQ(yr.data_as<float>()[i], std::max(y.data_as<float>()[i], 0.f));
  }
}

// ---------------------------------------------------------------- elementwise

// Random values with |v| >= 0.1 so that finite differences never cross the ReLU kink.
Tensor rnd_away_from_zero(std::vector<int64_t> shape, std::mt19937_64& rng, Layout l = NCHW) {
  Tensor t = rnd(std::move(shape), rng, l, 0.1, 1.0);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (sign(rng)) t.data_as<double>()[i] = -t.data_as<double>()[i];
  return t;
}

TEST(RefGradcheck, ReluAddAddRelu) {
  std::mt19937_64 rng(4);
  for (Layout l : {NCHW, NHWC}) {
    SCOPED_TRACE(layout_name(l));
    const std::vector<int64_t> shape{2, 3, 4, 5};
    Tensor x = rnd_away_from_zero(shape, rng, l), r = rnd(shape, rng, l);
    Tensor y = empty64(shape, l), dx = empty64(shape, l);
    auto relu_loss = [&] {
      ref_backend().relu_fwd(x, y);
      return dot(r, y);
    };
    relu_loss();
    ref_backend().relu_bwd(y, r, dx);
    check_grad("relu dx", x, dx, relu_loss);

    // add_relu: a + b kept away from 0 by construction (b = s - a with |s| >= 0.1).
    Tensor a = rnd(shape, rng, l), s = rnd_away_from_zero(shape, rng, l), b = empty64(shape, l);
    for (int64_t i = 0; i < a.numel(); ++i)
      b.data_as<double>()[i] = s.data_as<double>()[i] - a.data_as<double>()[i];
    auto add_relu_loss = [&] {
      ref_backend().add_relu_fwd(a, b, y);
      return dot(r, y);
    };
    add_relu_loss();
    Tensor da = empty64(shape, l);
    ref_backend().relu_bwd(y, r, da);  // the documented backward of add_relu for a and b
    check_grad("add_relu da", a, da, add_relu_loss);
    check_grad("add_relu db", b, da, add_relu_loss);

    auto add_loss = [&] {
      ref_backend().add(a, b, y);
      return dot(r, y);
    };
    check_grad("add da", a, r, add_loss);
  }
  // Mixed layouts and non-4-D shapes: y = a + b in logical order.
  Tensor a = rnd({2, 3, 4, 5}, rng, NCHW), b = rnd({2, 3, 4, 5}, rng, NHWC);
  Tensor y = empty64({2, 3, 4, 5}, NHWC);
  ref_backend().add(a, b, y);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          EXPECT_EQ(y.data_as<double>()[y.offset4(n, c, h, w)],
                    a.data_as<double>()[a.offset4(n, c, h, w)] +
                        b.data_as<double>()[b.offset4(n, c, h, w)]);
  Tensor v = rnd({7, 3}, rng), vy = empty64({7, 3});
  ref_backend().relu_fwd(v, vy);
  for (int64_t i = 0; i < 21; ++i)
    EXPECT_EQ(vy.data_as<double>()[i], std::max(v.data_as<double>()[i], 0.0));
}

// ---------------------------------------------------------------- pooling

TEST(RefForward, MaxPoolMatchesTorchGolden) {
  // x[i] = sin(1.3 i) (1,1,5,6), kernel 3, stride 2, pad 1.
  const double want[9] = {0.998543345374605,  0.963558185417193,  0.9867719642746133,
                          0.998543345374605,  0.8273279005953786, 0.9867719642746133,
                          0.8838704235458307, 0.8838704235458307, 0.8273279005953786};
  Tensor x = empty64({1, 1, 5, 6}), y = empty64({1, 1, 3, 3});
  for (int i = 0; i < 30; ++i) x.data_as<double>()[i] = std::sin(1.3 * i);
  ref_backend().maxpool2d_fwd({3, 2, 1}, x, y);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(y.data_as<double>()[i], want[i]) << i;
}

TEST(RefForward, MaxPoolBackwardRoutesToFirstMaximum) {
  // All-equal window: the gradient goes to the first (top-left) element of each window.
  Tensor x = Tensor::empty({1, 1, 4, 4}, F64), y = empty64({1, 1, 2, 2});
  x.fill(0.5);
  Tensor dy = empty64({1, 1, 2, 2}), dx = empty64({1, 1, 4, 4});
  for (int i = 0; i < 4; ++i) dy.data_as<double>()[i] = i + 1.0;
  const Pool2dParams p{2, 2, 0};
  ref_backend().maxpool2d_fwd(p, x, y);
  ref_backend().maxpool2d_bwd(p, x, y, dy, dx);
  const double want[16] = {1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(dx.data_as<double>()[i], want[i]) << i;
  // Overlapping windows (kernel 3, stride 1, pad 1) sharing one maximum accumulate.
  x.data_as<double>()[5] = 2.0;
  Tensor y2 = empty64({1, 1, 4, 4}), dy2 = empty64({1, 1, 4, 4}), dx2 = empty64({1, 1, 4, 4});
  dy2.fill(1.0);
  ref_backend().maxpool2d_fwd({3, 1, 1}, x, y2);
  ref_backend().maxpool2d_bwd({3, 1, 1}, x, y2, dy2, dx2);
  EXPECT_EQ(dx2.data_as<double>()[5], 9.0);  // (1,1) is the max of the 9 windows around it
}

TEST(RefGradcheck, MaxPool) {
  std::mt19937_64 rng(5);
  const Pool2dParams params[] = {{3, 2, 1}, {2, 2, 0}, {3, 1, 1}, {3, 2, 0}};
  for (const Pool2dParams& p : params)
    for (Layout l : {NCHW, NHWC}) {
      SCOPED_TRACE(::testing::Message() << "k" << p.kernel << " s" << p.stride << " p" << p.pad
                                        << " " << layout_name(l));
      const int64_t N = 2, C = 3, H = 9, W = 8;
      const int64_t OH = (H + 2 * p.pad - p.kernel) / p.stride + 1;
      const int64_t OW = (W + 2 * p.pad - p.kernel) / p.stride + 1;
      // Distinct values at least 0.01 apart (a shuffled ramp): no ties, and the 1e-6
      // perturbations never change which element is the maximum.
      Tensor x = empty64({N, C, H, W}, l);
      std::vector<double> ramp(static_cast<size_t>(x.numel()));
      for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = 0.01 * static_cast<double>(i) - 1.5;
      std::shuffle(ramp.begin(), ramp.end(), rng);
      std::copy(ramp.begin(), ramp.end(), x.data_as<double>());
      Tensor r = rnd({N, C, OH, OW}, rng, l), y = empty64({N, C, OH, OW}, l);
      auto loss = [&] {
        ref_backend().maxpool2d_fwd(p, x, y);
        return dot(r, y);
      };
      loss();
      Tensor dx = empty64(x.shape(), l);
      ref_backend().maxpool2d_bwd(p, x, y, r, dx);
      check_grad("maxpool dx", x, dx, loss);
    }
}

TEST(RefGradcheck, GlobalAvgPool) {
  std::mt19937_64 rng(6);
  for (Layout l : {NCHW, NHWC}) {
    Tensor x = rnd({2, 3, 5, 4}, rng, l), r = rnd({2, 3}, rng), y = empty64({2, 3});
    auto loss = [&] {
      ref_backend().global_avgpool_fwd(x, y);
      return dot(r, y);
    };
    loss();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c) {
        double s = 0;
        for (int64_t h = 0; h < 5; ++h)
          for (int64_t w = 0; w < 4; ++w) s += x.data_as<double>()[x.offset4(n, c, h, w)];
        EXPECT_NEAR(y.data_as<double>()[n * 3 + c], s / 20, 1e-15);
      }
    Tensor dx = empty64(x.shape(), l);
    ref_backend().global_avgpool_bwd(r, dx);
    check_grad("avgpool dx", x, dx, loss);
  }
}

// ---------------------------------------------------------------- linear, loss

TEST(RefGradcheck, Linear) {
  std::mt19937_64 rng(7);
  Tensor x = rnd({3, 7}, rng), w = rnd({5, 7}, rng), b = rnd({5}, rng), r = rnd({3, 5}, rng);
  Tensor y = empty64({3, 5});
  auto loss = [&] {
    ref_backend().linear_fwd(x, w, b, y);
    return dot(r, y);
  };
  loss();
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t k = 0; k < 5; ++k) {
      double s = b.data_as<double>()[k];
      for (int64_t c = 0; c < 7; ++c)
        s += x.data_as<double>()[n * 7 + c] * w.data_as<double>()[k * 7 + c];
      EXPECT_NEAR(y.data_as<double>()[n * 5 + k], s, 1e-14);
    }
  Tensor dx = empty64({3, 7}), dw = empty64({5, 7}), db = empty64({5});
  ref_backend().linear_bwd(x, w, r, dx, dw, db);
  check_grad("linear dx", x, dx, loss);
  check_grad("linear dw", w, dw, loss);
  check_grad("linear db", b, db, loss);
  // dx undefined: skipped, dw/db still written.
  Tensor none, dw2 = empty64({5, 7}), db2 = empty64({5});
  ref_backend().linear_bwd(x, w, r, none, dw2, db2);
  EXPECT_TRUE(test::all_close("dw without dx", dw2, dw, {0, 0}));
  EXPECT_TRUE(test::all_close("db without dx", db2, db, {0, 0}));
}

TEST(RefForward, SoftmaxXentMatchesTorchGoldenAndFormula) {
  // logits[i] = 3 sin(i) (2,4), labels {2, 0}: torch.nn.CrossEntropyLoss(label_smoothing).
  Tensor z = Tensor::empty({2, 4}, DType::f32), lab = Tensor::empty({2}, DType::i32);
  for (int i = 0; i < 8; ++i) z.data_as<float>()[i] = static_cast<float>(3 * std::sin(1.0 * i));
  lab.data_as<int32_t>()[0] = 2;
  lab.data_as<int32_t>()[1] = 0;
  const std::pair<float, double> golden[] = {{0.0f, 2.502127520801807}, {0.1f, 2.5042367823953855}};
  for (auto [eps, want] : golden) {
    Tensor loss = Tensor::empty({1}, DType::f32), probs = Tensor::empty({2, 4}, DType::f32);
    ref_backend().softmax_xent_fwd(z, lab, eps, loss, probs);
    EXPECT_NEAR(loss.data_as<float>()[0], want, 2e-6) << "smoothing " << eps;
    // Direct formula: -mean_n sum_k q log p.
    double total = 0;
    for (int n = 0; n < 2; ++n) {
      double m = -1e300, se = 0;
      for (int k = 0; k < 4; ++k) m = std::max(m, double(z.data_as<float>()[n * 4 + k]));
      for (int k = 0; k < 4; ++k) se += std::exp(z.data_as<float>()[n * 4 + k] - m);
      for (int k = 0; k < 4; ++k) {
        const double logp = z.data_as<float>()[n * 4 + k] - m - std::log(se);
        const double q = (k == lab.data_as<int32_t>()[n] ? 1.0 - eps : 0.0) + eps / 4.0;
        total -= q * logp;
        EXPECT_NEAR(probs.data_as<float>()[n * 4 + k], std::exp(logp), 1e-7);
      }
    }
    EXPECT_NEAR(loss.data_as<float>()[0], total / 2, 1e-6);
  }
}

TEST(RefGradcheck, SoftmaxXent) {
  std::mt19937_64 rng(8);
  const int64_t N = 4, K = 6;
  Tensor lab = Tensor::empty({N}, DType::i32);
  for (int64_t n = 0; n < N; ++n) lab.data_as<int32_t>()[n] = static_cast<int32_t>((n * 5 + 1) % K);
  for (float eps : {0.0f, 0.1f}) {
    SCOPED_TRACE(::testing::Message() << "smoothing " << eps);
    Tensor z = rnd({N, K}, rng, NCHW, -3, 3), loss = empty64({1}), probs = empty64({N, K});
    auto f = [&] {
      ref_backend().softmax_xent_fwd(z, lab, eps, loss, probs);
      return loss.data_as<double>()[0];
    };
    f();
    Tensor dz = empty64({N, K});
    ref_backend().softmax_xent_bwd(probs, lab, eps, 1.0f, dz, Tensor());
    check_grad("xent dlogits", z, dz, f);
    // scale multiplies the gradient (AMP loss scaling).
    f();  // probs of the unperturbed logits again
    Tensor dz2 = empty64({N, K});
    ref_backend().softmax_xent_bwd(probs, lab, eps, 256.0f, dz2, Tensor());
    for (int64_t i = 0; i < N * K; ++i)
      EXPECT_NEAR(dz2.data_as<double>()[i], 256.0 * dz.data_as<double>()[i], 1e-12);
  }
}

// ---------------------------------------------------------------- SGD, input

TEST(RefForward, SgdMatchesTorchTwoSteps) {
  // torch.optim.SGD(lr 0.1, momentum 0.875), param groups [0,3) weight_decay 0.01 and [3,5)
  // weight_decay 0, float32; gradients given scaled by 128 and unscaled by grad_scale 1/128.
  const float p0[5] = {0.5f, -1.25f, 2.0f, 0.75f, -0.3f};
  const float g1[5] = {0.1f, 0.2f, -0.3f, 0.4f, -0.5f};
  const float g2[5] = {-0.6f, 0.05f, 0.25f, -0.125f, 0.9f};
  const float want_p[5] = {0.5398229956626892f, -1.2888875007629395f, 2.0254721641540527f, 0.6875f,
                           -0.29624998569488525f};
  const float want_b[5] = {-0.5032300353050232f, 0.20137500762939453f, 0.025279998779296875f,
                           0.22499999403953552f, 0.4624999761581421f};
  Tensor p = Tensor::empty({5}, DType::f32), g = Tensor::empty({5}, DType::f32);
  Tensor buf = Tensor::zeros({5}, DType::f32);
  std::copy(p0, p0 + 5, p.data_as<float>());
  SgdParams sp;
  sp.lr = 0.1f;
  sp.momentum = 0.875f;
  sp.weight_decay = 0.01f;
  sp.decay_count = 3;
  sp.grad_scale = 1.0f / 128;
  // Hand-computed float64 sequence of the same update.
  double hp[5], hb[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 5; ++i) hp[i] = p0[i];
  for (const float* gs : {g1, g2}) {
    for (int i = 0; i < 5; ++i) g.data_as<float>()[i] = gs[i] * 128.0f;
    ref_backend().sgd_update(sp, p, g, buf);
    for (int i = 0; i < 5; ++i) {
      double d = gs[i] + (i < 3 ? 0.01 * hp[i] : 0.0);
      hb[i] = 0.875 * hb[i] + d;
      hp[i] -= 0.1 * hb[i];
    }
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(p.data_as<float>()[i], want_p[i], 2e-7) << i;
    EXPECT_NEAR(buf.data_as<float>()[i], want_b[i], 2e-7) << i;
    EXPECT_NEAR(p.data_as<float>()[i], hp[i], 1e-6) << i;
    EXPECT_NEAR(buf.data_as<float>()[i], hb[i], 1e-6) << i;
  }
}

TEST(RefForward, NormalizeU8) {
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  Tensor src = Tensor::empty({2, 3, 3, 4}, DType::u8, NHWC);
  for (int64_t i = 0; i < src.numel(); ++i)
    src.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  for (Layout l : {NCHW, NHWC}) {
    Tensor dst = Tensor::empty(src.shape(), DType::f32, l);
    ref_backend().normalize_u8(src, mean, stdv, dst);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t w = 0; w < 4; ++w) {
            // torchvision: ToTensor (float32 divide by 255) then Normalize (sub, div).
            const float v = float(src.data_as<uint8_t>()[src.offset4(n, c, h, w)]) / 255.f;
            EXPECT_EQ(dst.data_as<float>()[dst.offset4(n, c, h, w)], (v - mean[c]) / stdv[c]);
          }
  }
}

// ---------------------------------------------------------------- memory, errors

TEST(RefBackendBasics, CopyConvertsLayoutAndDtype) {
  std::mt19937_64 rng(9);
  Backend& be = ref_backend();
  EXPECT_EQ(be.name(), "ref");
  EXPECT_TRUE(be.device() == Device{});
  EXPECT_TRUE(be.supports(Op::conv2d, DType::f32, NHWC));
  EXPECT_TRUE(be.supports(Op::conv2d, DType::f64, NCHW));
  // f16/bf16 operands are loaded exactly and results rounded once (AMP model tests on CPU).
  EXPECT_TRUE(be.supports(Op::conv2d, DType::f16, NCHW));
  EXPECT_TRUE(be.supports(Op::conv2d, DType::bf16, NHWC));
  EXPECT_FALSE(be.supports(Op::conv2d, DType::i32, NCHW));
  Tensor a = test::random_tensor({2, 3, 4, 5}, rng);
  Tensor b = be.alloc({2, 3, 4, 5}, DType::f32, NHWC);
  be.copy(a, b);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          EXPECT_EQ(b.data_as<float>()[b.offset4(n, c, h, w)],
                    a.data_as<float>()[a.offset4(n, c, h, w)]);
  Tensor d = be.alloc({2, 3, 4, 5}, DType::f64, NCHW);
  be.copy(b, d);
  EXPECT_TRUE(test::all_close("f32 NHWC -> f64 NCHW", d, a, {0, 0}));
  be.zero(d);
  for (int64_t i = 0; i < d.numel(); ++i) EXPECT_EQ(d.data_as<double>()[i], 0.0);
  // f16 / bf16 conversions: exact values, round-to-nearest-even, overflow, subnormals.
  Tensor f = Tensor::empty({8}, DType::f32);
  const float vals[8] = {
      1.0f,   -2.5f, 65504.f, 70000.f, 1.0f + 1.0f / 2048, 5.9604645e-8f, 1.0f + 3.0f / 2048,
      3.0e-5f};
  std::copy(vals, vals + 8, f.data_as<float>());
  Tensor h = be.alloc({8}, DType::f16), hb = be.alloc({8}, DType::bf16);
  be.copy(f, h);
  be.copy(f, hb);
  const uint16_t want_h[8] = {0x3c00, 0xc100, 0x7bff, 0x7c00, 0x3c00, 0x0001, 0x3c02, 0x01f7};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h.data_as<uint16_t>()[i], want_h[i]) << i;
  EXPECT_EQ(hb.data_as<uint16_t>()[0], 0x3f80);
  EXPECT_EQ(hb.data_as<uint16_t>()[1], 0xc020);
  Tensor back = be.alloc({8}, DType::f32);
  be.copy(h, back);
  EXPECT_EQ(back.data_as<float>()[1], -2.5f);
  EXPECT_EQ(back.data_as<float>()[5], 5.9604645e-8f);
  EXPECT_TRUE(std::isinf(back.data_as<float>()[3]));
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected rn50::Error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RefBackendBasics, ErrorsNameOpAndShapes) {
  Backend& be = ref_backend();
  Tensor x = Tensor::empty({2, 3, 8, 8}, DType::f32), w = Tensor::empty({4, 3, 3, 3}, DType::f32);
  x.fill(1);
  w.fill(1);
  Tensor bad_y = Tensor::empty({2, 4, 7, 7}, DType::f32);
  expect_error([&] { be.conv2d_fwd({1, 1}, x, w, bad_y); }, "conv2d_fwd");
  expect_error([&] { be.conv2d_fwd({1, 1}, x, w, bad_y); }, "[2,4,8,8]");
  Tensor w2 = Tensor::empty({4, 2, 3, 3}, DType::f32);
  Tensor y = Tensor::empty({2, 4, 8, 8}, DType::f32);
  expect_error([&] { be.conv2d_fwd({1, 1}, x, w2, y); }, "input channels");
  Tensor xi = Tensor::empty({2, 3, 8, 8}, DType::i32);
  expect_error([&] { be.conv2d_fwd({1, 1}, xi, w, y); }, "I32[2,3,8,8]");
  Tensor a = Tensor::empty({2, 3}, DType::f32), b = Tensor::empty({3, 2}, DType::f32);
  expect_error([&] { be.add(a, b, a); }, "add");
  Tensor lab = Tensor::empty({2}, DType::i32), loss = Tensor::empty({1}, DType::f32);
  lab.fill(5);
  Tensor z = Tensor::empty({2, 4}, DType::f32), pr = Tensor::empty({2, 4}, DType::f32);
  z.fill(0.5);
  expect_error([&] { be.softmax_xent_fwd(z, lab, 0.f, loss, pr); }, "outside [0, 4)");
  Tensor s1 = Tensor::empty({3}, DType::f32), s2 = Tensor::empty({4}, DType::f32);
  expect_error([&] { be.sgd_update(SgdParams{}, s1, s2, s1); }, "sgd_update");
  Tensor bnx = Tensor::empty({1, 3, 1, 1}, DType::f32), c3 = Tensor::empty({3}, DType::f32);
  expect_error([&] { be.batchnorm_fwd_train({}, bnx, c3, c3, c3, c3, bnx, c3, c3); },
               "more than 1 value per channel");
  expect_error([&] { be.batchnorm_fwd_train({}, x, s2, c3, c3, c3, x, c3, c3); }, "gamma");
}

}  // namespace
}  // namespace rn50
