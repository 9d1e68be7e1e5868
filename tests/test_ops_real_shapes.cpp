// The op harness at ResNet-50's real training shapes, for a GPU window: batch 256 (the DLE
// recipe's per-GPU batch), the stem at 224 px (3 and 4 input channels), one convolution of
// each kind the network has (1x1, 3x3 with v1.5's stride 2, the 1x1 stride-2 downsample, 3x3 at
// 7x7), BatchNorm + ReLU at the largest activation (64 x 112 x 112) and at 2048 x 7 x 7, the
// fused BatchNorm + residual join at 256 x 56 x 56 where the backend claims it, max pooling
// 112 -> 56, the global average pool, and input normalisation into 3 and 4 channels. The small
// shapes of tests/test_ops_*.cpp leave out what only real sizes reach: the algorithms cuDNN
// picks for them, grid caps and grid-stride loops that wrap, 32-bit index ranges, the
// fixed-channel BN kernels' grids, the L2-resident cases.
//
// The tested backend runs in the AMP configuration (f16 NHWC activations, KRSC weights, f32
// BatchNorm parameters and statistics); the oracle is the oneDNN backend in f32 NHWC on the
// same values (inputs are multiples of 1/128 in [-1, 1], exact in f16 and bf16), and the
// backward ops get the tested backend's own forward results on both sides, as in the op
// harness. Tolerances are the op harness's for f16 (op_backend_fixture.h: at least 4e-3 in
// atol, relative to the reference's rms, and in rtol).
//
// GPU-only: the tests skip unless the backend is usable (a failure instead when RN50_REQUIRE
// names gpu, as scripts/gpu-window.sh sets it). Names contain RealShapes. For a check of the
// harness itself without a GPU: RN50_REAL_SHAPES_BACKEND=onednn RN50_REAL_SHAPES_DTYPE=bf16
// RN50_REAL_SHAPES_BATCH=4 (any backend, f32/f16/bf16, any batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "op_backend_fixture.h"
#include "require.h"
#include "rn50/backend.h"

namespace rn50 {
namespace {

using test::for_dtype;
using test::Tol;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

/// Host f32 tensor of `shape` in `layout`, element i (in memory order) = a multiple of 1/128 in
/// [-1, 1) from a 64-bit mix of (seed, i): exact in f16 and bf16.
Tensor exact_random(std::vector<int64_t> shape, Layout layout, uint64_t seed) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32, layout);
  float* p = t.data_as<float>();
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;  // xorshift64
    p[i] = static_cast<float>(static_cast<int>(z >> 56) - 128) / 128.f;
  }
  return t;
}

class RealShapes : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = env_or("RN50_REAL_SHAPES_BACKEND", "cuda");
    const std::vector<std::string> av = available_backends();
    const bool usable = std::find(av.begin(), av.end(), name) != av.end();
    RN50_REQUIRE_OR_SKIP("gpu", usable,
                         "the " << name << " backend is not usable here: the real-shape op "
                                           "cases are for a GPU window");
    be_ = make_backend(name);
    oracle_ = make_backend("onednn");
    const std::string d = env_or("RN50_REAL_SHAPES_DTYPE", "f16");
    dt_ = d == "f32" ? DType::f32 : d == "bf16" ? DType::bf16 : DType::f16;
    n_ = std::stoll(env_or("RN50_REAL_SHAPES_BATCH", "256"));
    ASSERT_GT(n_, 1);
  }

  /// The tested backend's copy of a host f32 tensor, in dtype d (its layout).
  Tensor dev(const Tensor& host, DType d) {
    Tensor t = be_->alloc(host.shape(), d, host.layout());
    be_->copy(host, t);
    return t;
  }
  /// An output on the tested backend, every element NaN (an unwritten output fails).
  Tensor dev_out(std::vector<int64_t> shape, DType d, Layout l) {
    Tensor h = Tensor::empty(shape, DType::f32, l);
    h.fill(std::numeric_limits<double>::quiet_NaN());
    return dev(h, d);
  }
  /// The oracle's f32 copy of a host f32 tensor.
  Tensor orc(const Tensor& host) {
    Tensor t = oracle_->alloc(host.shape(), DType::f32, host.layout());
    oracle_->copy(host, t);
    return t;
  }
  Tensor orc_out(std::vector<int64_t> shape, Layout l) {
    return oracle_->alloc(std::move(shape), DType::f32, l);
  }
  /// Host f32 copy (same layout) of a tensor on the tested backend.
  Tensor back(const Tensor& d) {
    Tensor h = Tensor::empty(d.shape(), DType::f32, d.layout());
    be_->copy(d, h);
    be_->synchronize();
    return h;
  }
  /// The tested backend's result (f32 host, via back()) against the oracle's f32 tensor of the
  /// same shape and layout: |got - want| <= atol * max(1, rms(want)) + rtol * |want| for every
  /// element (test::all_close's rule, without its f64 copies of tensors this size).
  void expect_close(const std::string& what, const Tensor& got_dev, const Tensor& want, Tol t) {
    const Tensor got = back(got_dev);
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.layout(), want.layout()) << what;
    const float* g = got.data_as<float>();
    const float* w = want.data_as<float>();
    const int64_t n = got.numel();
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(w[i]) * w[i];
    const double rms = n ? std::sqrt(ss / static_cast<double>(n)) : 0.0;
    const double atol = t.atol * std::max(1.0, rms);
    int64_t bad = 0, worst = -1;
    double worst_err = -1;
    for (int64_t i = 0; i < n; ++i) {
      const double err = std::fabs(static_cast<double>(g[i]) - w[i]);
      if (!(err <= atol + t.rtol * std::fabs(w[i]))) {
        ++bad;
        if (!(err <= worst_err)) worst_err = err, worst = i;
      }
    }
    std::ostringstream os;
    if (bad) {
      os << bad << " of " << n << " elements outside " << atol << " + " << t.rtol
         << " * |want| (rms " << rms << "); worst at memory index " << worst << ": got "
         << g[worst] << " want " << w[worst];
    }
    EXPECT_EQ(bad, 0) << what << " [" << be_->name() << " " << dtype_name(dt_) << " "
                      << got_dev.str() << "]: " << os.str();
  }
  Tol tol(Tol t) const { return for_dtype(t, dt_); }

  std::unique_ptr<Backend> be_, oracle_;
  DType dt_ = DType::f16;
  int64_t n_ = 256;
};

struct ConvCase {
  const char* name;
  int64_t C, H, W, K, R;
  int stride, pad;
  bool data_grad;  ///< the first layer's input needs no gradient
};

TEST_F(RealShapes, Conv2dFwdBwdDataBwdWeights) {
  const ConvCase cases[] = {
      {"stem 7x7/2 3->64 @224", 3, 224, 224, 64, 7, 2, 3, false},
      {"stem 7x7/2 4->64 @224 (--image-shape 4)", 4, 224, 224, 64, 7, 2, 3, false},
      {"1x1 64->256 @56", 64, 56, 56, 256, 1, 1, 0, true},
      {"3x3/2 128 @56->28 (v1.5)", 128, 56, 56, 128, 3, 2, 1, true},
      {"1x1/2 1024->2048 @14->7 (downsample)", 1024, 14, 14, 2048, 1, 2, 0, true},
      {"3x3 512 @7", 512, 7, 7, 512, 3, 1, 1, true},
  };
  uint64_t seed = 1;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dParams p{c.stride, c.pad};
    const int64_t oh = (c.H + 2 * c.pad - c.R) / c.stride + 1;
    const int64_t ow = (c.W + 2 * c.pad - c.R) / c.stride + 1;
    const Layout wl = be_->preferred_weight_layout(Layout::NHWC);
    const Tensor x = exact_random({n_, c.C, c.H, c.W}, Layout::NHWC, seed++);
    const Tensor w = exact_random({c.K, c.C, c.R, c.R}, wl, seed++);
    const Tensor dy = exact_random({n_, c.K, oh, ow}, Layout::NHWC, seed++);
    const Tensor xd = dev(x, dt_), wd = dev(w, dt_), dyd = dev(dy, dt_);
    const Tensor xo = orc(x), wo = orc(w), dyo = orc(dy);

    Tensor y = dev_out({n_, c.K, oh, ow}, dt_, Layout::NHWC);
    Tensor yo = orc_out({n_, c.K, oh, ow}, Layout::NHWC);
    be_->conv2d_fwd(p, xd, wd, y);
    oracle_->conv2d_fwd(p, xo, wo, yo);
    expect_close("conv2d_fwd y", y, yo, tol(test::kConv));

    if (c.data_grad) {
      Tensor dx = dev_out({n_, c.C, c.H, c.W}, dt_, Layout::NHWC);
      Tensor dxo = orc_out({n_, c.C, c.H, c.W}, Layout::NHWC);
      be_->conv2d_bwd_data(p, dyd, wd, dx);
      oracle_->conv2d_bwd_data(p, dyo, wo, dxo);
      expect_close("conv2d_bwd_data dx", dx, dxo, tol(test::kConv));
    }
    Tensor dw = dev_out({c.K, c.C, c.R, c.R}, dt_, wl);
    Tensor dwo = orc_out({c.K, c.C, c.R, c.R}, wl);
    be_->conv2d_bwd_weights(p, xd, dyd, dw);
    oracle_->conv2d_bwd_weights(p, xo, dyo, dwo);
    expect_close("conv2d_bwd_weights dw", dw, dwo, tol(test::kConv));
  }
}

// BatchNorm forward (training) and backward; the join case is the fused BatchNorm + residual
// join (Backend::batchnorm_add_relu_*), run where the tested backend claims it (with
// RN50_CUDA_BN_JOIN=fused or RN50_CUDA_BN=cudnn on CUDA).
TEST_F(RealShapes, BatchNormTrainFwdBwd) {
  struct Case {
    const char* name;
    int64_t C, H;
    bool relu, join;
  };
  const bool join_ok = be_->supports(Op::batchnorm_add_relu, dt_, Layout::NHWC);
  const Case cases[] = {
      {"64 @112 + ReLU (the stem's)", 64, 112, true, false},
      {"2048 @7", 2048, 7, false, false},
      {"256 @56 + residual + ReLU (a block's join)", 256, 56, true, true},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    if (c.join && !join_ok) {
      std::cout << "[ SKIPPED  ] " << c.name << ": " << be_->name()
                << " does not claim Op::batchnorm_add_relu here\n";
      continue;
    }
    const std::vector<int64_t> shape{n_, c.C, c.H, c.H};
    BatchNormParams p;
    p.relu = c.relu;
    const Tensor x = exact_random(shape, Layout::NHWC, seed++);
    const Tensor gamma = exact_random({c.C}, Layout::NCHW, seed++);
    const Tensor beta = exact_random({c.C}, Layout::NCHW, seed++);
    const Tensor rm = exact_random({c.C}, Layout::NCHW, seed++);
    Tensor rv = exact_random({c.C}, Layout::NCHW, seed++);
    for (int64_t i = 0; i < c.C; ++i)
      rv.data_as<float>()[i] = 1.f + std::fabs(rv.data_as<float>()[i]);
    const Tensor res = exact_random(shape, Layout::NHWC, seed++);
    const Tensor xd = dev(x, dt_), gd = dev(gamma, DType::f32), bd = dev(beta, DType::f32);
    Tensor rmd = dev(rm, DType::f32), rvd = dev(rv, DType::f32);
    const Tensor xo = orc(x), go = orc(gamma), bo = orc(beta);
    Tensor rmo = orc(rm), rvo = orc(rv);
    Tensor y = dev_out(shape, dt_, Layout::NHWC), yo = orc_out(shape, Layout::NHWC);
    Tensor sm = dev_out({c.C}, DType::f32, Layout::NCHW);
    Tensor sv = dev_out({c.C}, DType::f32, Layout::NCHW);
    Tensor smo = orc_out({c.C}, Layout::NCHW), svo = orc_out({c.C}, Layout::NCHW);
    const Tol fwd = tol(test::kBnFwd), bwd = tol(test::kBnBwd);
    if (c.join) {
      const Tensor resd = dev(res, dt_), reso = orc(res);
      be_->batchnorm_add_relu_fwd_train(p, xd, resd, gd, bd, rmd, rvd, y, sm, sv);
      oracle_->batchnorm_add_relu_fwd_train(p, xo, reso, go, bo, rmo, rvo, yo, smo, svo);
    } else {
      be_->batchnorm_fwd_train(p, xd, gd, bd, rmd, rvd, y, sm, sv);
      oracle_->batchnorm_fwd_train(p, xo, go, bo, rmo, rvo, yo, smo, svo);
    }
    expect_close("bn fwd y", y, yo, fwd);
    expect_close("bn fwd save_mean", sm, smo, fwd);
    expect_close("bn fwd save_var", sv, svo, fwd);
    expect_close("bn fwd running_mean", rmd, rmo, fwd);
    expect_close("bn fwd running_var", rvd, rvo, fwd);

    // Backward on the tested backend's own forward results, on both sides.
    const Tensor yb = orc(back(y)), smb = orc(back(sm)), svb = orc(back(sv));
    const Tensor dy = exact_random(shape, Layout::NHWC, seed++);
    const Tensor dyd = dev(dy, dt_), dyo = orc(dy);
    Tensor dx = dev_out(shape, dt_, Layout::NHWC), dxo = orc_out(shape, Layout::NHWC);
    Tensor dg = dev_out({c.C}, DType::f32, Layout::NCHW), dgo = orc_out({c.C}, Layout::NCHW);
    Tensor db = dev_out({c.C}, DType::f32, Layout::NCHW), dbo = orc_out({c.C}, Layout::NCHW);
    if (c.join) {
      const Tensor g2 = exact_random(shape, Layout::NHWC, seed++);
      const Tensor g2d = dev(g2, dt_), g2o = orc(g2);
      Tensor dres = dev_out(shape, dt_, Layout::NHWC), dreso = orc_out(shape, Layout::NHWC);
      be_->batchnorm_add_relu_bwd(p, xd, y, dyd, g2d, gd, sm, sv, dres, dx, dg, db);
      oracle_->batchnorm_add_relu_bwd(p, xo, yb, dyo, g2o, go, smb, svb, dreso, dxo, dgo, dbo);
      expect_close("bn join bwd dres", dres, dreso, bwd);
    } else {
      be_->batchnorm_bwd(p, xd, y, dyd, gd, sm, sv, dx, dg, db);
      oracle_->batchnorm_bwd(p, xo, yb, dyo, go, smb, svb, dxo, dgo, dbo);
    }
    expect_close("bn bwd dx", dx, dxo, bwd);
    expect_close("bn bwd dgamma", dg, dgo, bwd);
    expect_close("bn bwd dbeta", db, dbo, bwd);
  }
}

TEST_F(RealShapes, PoolingAndInput) {
  // Max pooling 3x3/2 pad 1, 64 x 112 x 112 -> 56 x 56 (the stem's), on values distinct within
  // every window (so that both sides route each gradient to the same element): element
  // (n, c, h, w) = ((7 * (112 h + w) + 13 c + n) mod 256 - 128) / 128; two elements of one
  // window differ by 7 (112 dh + dw) mod 256 with 0 < |112 dh + dw| <= 113, never 0.
  const std::vector<int64_t> xs{n_, 64, 112, 112}, ys{n_, 64, 56, 56};
  Tensor x = Tensor::empty(xs, DType::f32, Layout::NHWC);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t c = 0; c < 64; ++c)
      for (int64_t h = 0; h < 112; ++h)
        for (int64_t w = 0; w < 112; ++w)
          x.data_as<float>()[x.offset4(n, c, h, w)] =
              static_cast<float>((7 * (112 * h + w) + 13 * c + n) % 256 - 128) / 128.f;
  const Pool2dParams pp{3, 2, 1};
  const Tensor xd = dev(x, dt_), xo = orc(x);
  Tensor y = dev_out(ys, dt_, Layout::NHWC), yo = orc_out(ys, Layout::NHWC);
  be_->maxpool2d_fwd(pp, xd, y);
  oracle_->maxpool2d_fwd(pp, xo, yo);
  expect_close("maxpool fwd y", y, yo, tol(test::kExact1));
  const Tensor dy = exact_random(ys, Layout::NHWC, 300);
  Tensor dx = dev_out(xs, dt_, Layout::NHWC), dxo = orc_out(xs, Layout::NHWC);
  be_->maxpool2d_bwd(pp, xd, y, dev(dy, dt_), dx);
  oracle_->maxpool2d_bwd(pp, xo, orc(back(y)), orc(dy), dxo);
  expect_close("maxpool bwd dx", dx, dxo, tol(test::kMaxPoolBwd));

  // Global average pool, 2048 x 7 x 7 -> (N, 2048).
  const std::vector<int64_t> as{n_, 2048, 7, 7}, gs{n_, 2048};
  const Tensor a = exact_random(as, Layout::NHWC, 301), ga = exact_random(gs, Layout::NCHW, 302);
  Tensor ay = dev_out(gs, dt_, Layout::NCHW), ayo = orc_out(gs, Layout::NCHW);
  be_->global_avgpool_fwd(dev(a, dt_), ay);
  oracle_->global_avgpool_fwd(orc(a), ayo);
  expect_close("global avgpool fwd", ay, ayo, tol(test::kAvgPool));
  Tensor adx = dev_out(as, dt_, Layout::NHWC), adxo = orc_out(as, Layout::NHWC);
  be_->global_avgpool_bwd(dev(ga, dt_), adx);
  oracle_->global_avgpool_bwd(orc(ga), adxo);
  expect_close("global avgpool bwd", adx, adxo, tol(test::kAvgPool));

  // Input normalisation of 224 px u8 images into 3 and 4 channels (the 4-channel stem's).
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  Tensor u8 = Tensor::empty({n_, 3, 224, 224}, DType::u8, Layout::NHWC);
  for (int64_t i = 0; i < u8.numel(); ++i)
    u8.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  Tensor u8d = be_->alloc(u8.shape(), DType::u8, Layout::NHWC);
  be_->copy(u8, u8d);
  Tensor u8o = oracle_->alloc(u8.shape(), DType::u8, Layout::NHWC);
  oracle_->copy(u8, u8o);
  for (int64_t c : {3, 4}) {
    SCOPED_TRACE(std::to_string(c) + " channels");
    const std::vector<int64_t> s{n_, c, 224, 224};
    Tensor nd = dev_out(s, dt_, Layout::NHWC), no = orc_out(s, Layout::NHWC);
    be_->normalize_u8(u8d, mean, stdv, nd);
    oracle_->normalize_u8(u8o, mean, stdv, no);
    expect_close("normalize_u8", nd, no, tol(test::kNormalize));
  }
}

}  // namespace
}  // namespace rn50
