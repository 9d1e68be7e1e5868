// THE op test harness: every backend in available_backends() other than "ref" is run op by op,
// forward and backward, against the reference backend on identical random inputs, for shapes
// typical of ResNet-50 (1x1 convs, 3x3 stride 1 and 2, the 7x7 stride-2 stem with 3 input
// channels, odd spatial sizes and channel counts), in both activation layouts and in each
// compute dtype the backend claims in supports(). A new backend ("onednn", "cuda") is covered
// by adding it to available_backends(); nothing here names a backend except "ref".
//
// Method: inputs are generated on the host in f32, converted to the tested dtype (the values
// the backend sees), moved to the backend with Backend::alloc + Backend::copy, and results
// come back with Backend::copy into host tensors (so device backends work unchanged). The
// reference runs in float64 on exactly the same (rounded) input values. Backend outputs are
// pre-filled with NaN, so unwritten or accumulated-into outputs fail. Backward ops get the same
// forward results (y, save_mean, save_var, probs) as inputs on both sides.
//
// Tolerances: |got - ref| <= atol * max(1, rms(ref)) + rtol * |ref| (test::all_close). For f32:
//   conv2d fwd / bwd_data / bwd_weights   atol 5e-5  rtol 1e-4   (dot products of length up
//                                          to 600; leaves room for blocked/Winograd kernels)
//   linear fwd / bwd                      atol 5e-5  rtol 1e-4   (C up to 2048)
//   batchnorm fwd (y, save_*, running_*)  atol 1e-5  rtol 1e-4
//   batchnorm bwd (dx, dgamma, dbeta)     atol 5e-5  rtol 1e-4   (cancellation in dx)
//   relu, add, add_relu, maxpool fwd,     atol 0     rtol 1.2e-7 (one f32 rounding at most)
//     relu bwd
//   maxpool bwd                           atol 1e-7  rtol 1e-6   (<= 4 summed contributions)
//   global avgpool fwd / bwd              atol 1e-6  rtol 1e-5
//   softmax xent (plain, mixup): loss     atol 1e-6  rtol 1e-5
//                 probs, dlogits          atol 1e-9  rtol 1e-5
//   mixup_images                          atol 5e-7  rtol 1e-6   (f32 products and sum; the
//                                          two terms may cancel)
//   normalize_u8                          atol 1e-6  rtol 1e-6
//   sgd_update (params, momentum)         atol 1e-7  rtol 1e-6
//   copy / zero                           exact
// For f16 / bf16 compute (AMP backends) each tolerance is raised to at least 4e-3 (f16) or
// 3e-2 (bf16) in both atol and rtol: outputs are rounded to 11 / 8 significant bits. Tensor
// dtypes under f16/bf16: every activation, weight and gradient of conv, linear, the
// elementwise ops and pooling, and x/y/dy/dx of batchnorm (gamma, beta and statistics stay
// f32); the loss and SGD are f32-only and are skipped for other dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "op_harness.h"
#include "rn50/backend.h"
#include "require.h"
#include "backend/ref/ref_util.h"

namespace rn50 {
namespace {

using test::all_close;
using test::convert;
using test::Tol;

constexpr DType F32 = DType::f32;
constexpr DType F64 = DType::f64;
constexpr Layout NCHW = Layout::NCHW;
constexpr Layout NHWC = Layout::NHWC;

// ---------------------------------------------------------------- tolerances (see above)

constexpr Tol kConv{5e-5, 1e-4};
constexpr Tol kLinear{5e-5, 1e-4};
constexpr Tol kBnFwd{1e-5, 1e-4};
constexpr Tol kBnBwd{5e-5, 1e-4};
constexpr Tol kExact1{0, 1.2e-7};
constexpr Tol kMaxPoolBwd{1e-7, 1e-6};
constexpr Tol kAvgPool{1e-6, 1e-5};
constexpr Tol kLoss{1e-6, 1e-5};
constexpr Tol kProbs{1e-9, 1e-5};
constexpr Tol kNormalize{1e-6, 1e-6};
constexpr Tol kSgd{1e-7, 1e-6};
constexpr Tol kMixup{5e-7, 1e-6};
constexpr Tol kCopy{0, 0};

Tol for_dtype(Tol t, DType dt) {
  const double floor = dt == DType::f16 ? 4e-3 : dt == DType::bf16 ? 3e-2 : 0.0;
  return {std::max(t.atol, floor), std::max(t.rtol, floor)};
}

// ---------------------------------------------------------------- parameters

struct HarnessParam {
  std::string backend;
  Layout layout = NCHW;
  DType dtype = F32;
};

std::vector<HarnessParam> harness_params() {
  std::vector<HarnessParam> v;
  for (const std::string& name : available_backends()) {
    if (name == "ref") continue;
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (Layout l : {NCHW, NHWC}) v.push_back({name, l, dt});
  }
  return v;
}

std::string param_name(const ::testing::TestParamInfo<HarnessParam>& info) {
  return info.param.backend + "_" + layout_name(info.param.layout) + "_" +
         dtype_name(info.param.dtype);
}

class OpsBackend : public ::testing::TestWithParam<HarnessParam> {
 protected:
  void SetUp() override {
    // Strict f32 tolerances: no TF32 tensor cores (CUDA) for f32 convolutions and GEMMs.
    BackendOptions bo;
    bo.allow_tf32 = false;
    be_ = make_backend(GetParam().backend, bo);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(std::hash<std::string>{}(info->name()));
  }

  Backend& be() { return *be_; }
  Backend& ref() { return test::ref_backend(); }
  DType dt() const { return GetParam().dtype; }
  Layout lay() const { return GetParam().layout; }
  Layout other() const { return lay() == NCHW ? NHWC : NCHW; }
  Tol tol(Tol t) const { return for_dtype(t, dt()); }
  // Conv weight layouts to test: the backend's preferred one first, then the other (every
  // backend accepts both OIHW and KRSC).
  std::vector<Layout> weight_layouts() const {
    const Layout pw = be_->preferred_weight_layout(lay());
    return {pw, pw == NCHW ? NHWC : NCHW};
  }
  std::string cfg() const {
    return GetParam().backend + " " + layout_name(lay()) + " " + dtype_name(dt());
  }

  // Random host f32 tensor (logical values; layout NCHW).
  Tensor rand(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    return test::random_tensor(std::move(shape), rng_, lo, hi, F32, NCHW);
  }
  // Backend tensor holding `host` converted to dtype `d` and layout `l`.
  Tensor up(const Tensor& host, DType d, Layout l) { return test::upload(*be_, host, d, l); }
  // Backend output tensor pre-filled with NaN.
  Tensor out(std::vector<int64_t> shape, DType d, Layout l = NCHW) {
    Tensor h = Tensor::empty(shape, F32, NCHW);
    h.fill(std::numeric_limits<double>::quiet_NaN());
    return test::upload(*be_, h, d, l);
  }
  // Reference operand: f64 host tensor with the values a backend storing `host` in `d` sees.
  static Tensor rin(const Tensor& host, DType d, Layout l) {
    return convert(test::rounded(host, d), F64, l);
  }
  static Tensor rout(std::vector<int64_t> shape, Layout l = NCHW) {
    return Tensor::empty(std::move(shape), F64, l);
  }
  // Compares a backend tensor with a reference host tensor.
  void check(const std::string& what, const Tensor& dev, const Tensor& want, Tol t) {
    EXPECT_TRUE(all_close(what + " [" + cfg() + ", backend tensor " + dev.str() + "]",
                          test::download(*be_, dev), want, t));
  }
  // Host step state (see StepState) with the given lr and loss scale, nothing found/skipped.
  static Tensor step_state(float lr, float loss_scale) {
    Tensor st = Tensor::zeros({StepState::size}, F32);
    float* s = st.data_as<float>();
    s[StepState::lr] = lr;
    s[StepState::loss_scale] = loss_scale;
    s[StepState::inv_loss_scale] = 1.f / loss_scale;
    return st;
  }
  // Host copy of a backend step state.
  Tensor state_host(const Tensor& dev) {
    Tensor h = Tensor::empty({StepState::size}, F32);
    be_->copy(dev, h);
    be_->synchronize();
    return h;
  }
  // Host f32 copy (NCHW) of a reference result, as input for the next op.
  static Tensor host32(const Tensor& t) { return convert(t, F32, NCHW); }

  std::unique_ptr<Backend> be_;
  std::mt19937_64 rng_;
};

#define REQUIRE_OP(op)                                                                            \
  do {                                                                                            \
    if (!be().supports(op, dt(), lay()))                                                          \
      GTEST_SKIP() << GetParam().backend << " does not support " #op " with " << dtype_name(dt()) \
                   << " " << layout_name(lay()) << " (supports() false)";                         \
  } while (0)

#define REQUIRE_F32(what)                                                \
  do {                                                                   \
    if (dt() != F32) GTEST_SKIP() << what << " is f32-only by contract"; \
  } while (0)

// ---------------------------------------------------------------- convolution

struct ConvShape {
  const char* name;
  int64_t N, C, H, W, K, R;
  int stride, pad;
  int64_t OH() const { return (H + 2 * pad - R) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - R) / stride + 1; }
};

const ConvShape kConvShapes[] = {
    {"1x1 s1 (bottleneck reduce)", 2, 64, 14, 14, 32, 1, 1, 0},
    {"1x1 s1 (bottleneck expand)", 2, 32, 7, 7, 128, 1, 1, 0},
    {"1x1 s2 (downsample, odd)", 2, 64, 15, 15, 96, 1, 2, 0},
    {"3x3 s1 p1 (odd)", 2, 32, 13, 13, 32, 3, 1, 1},
    {"3x3 s2 p1 (v1.5 stride, odd)", 2, 32, 15, 15, 48, 3, 2, 1},
    {"3x3 s2 p1 (even)", 2, 16, 16, 16, 24, 3, 2, 1},
    {"3x3 s1 p1 (odd channels)", 1, 17, 9, 11, 19, 3, 1, 1},
    {"7x7 s2 p3 (stem, C=3)", 2, 3, 33, 33, 64, 7, 2, 3},
    {"7x7 s2 p3 (stem, even)", 2, 3, 32, 32, 16, 7, 2, 3},
};

std::string conv_name(const ConvShape& s) {
  return std::string(s.name) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C) + " " +
         std::to_string(s.H) + "x" + std::to_string(s.W) + " K" + std::to_string(s.K);
}

TEST_P(OpsBackend, Conv2dFwd) {
  REQUIRE_OP(Op::conv2d);
  for (const ConvShape& s : kConvShapes) {
    SCOPED_TRACE(conv_name(s));
    const double ws = 1.0 / std::sqrt(double(s.C * s.R * s.R));
    Tensor x = rand({s.N, s.C, s.H, s.W}), w = rand({s.K, s.C, s.R, s.R}, -ws, ws);
    const Conv2dParams p{s.stride, s.pad};
    Tensor yr = rout({s.N, s.K, s.OH(), s.OW()});
    ref().conv2d_fwd(p, rin(x, dt(), lay()), rin(w, dt(), NCHW), yr);
    for (Layout wl : weight_layouts()) {
      Tensor y = out({s.N, s.K, s.OH(), s.OW()}, dt(), lay());
      be().conv2d_fwd(p, up(x, dt(), lay()), up(w, dt(), wl), y);
      check(std::string("conv2d_fwd y (weights ") + layout_name(wl) + ")", y, yr, tol(kConv));
    }
  }
}

TEST_P(OpsBackend, Conv2dBwdData) {
  REQUIRE_OP(Op::conv2d);
  for (const ConvShape& s : kConvShapes) {
    SCOPED_TRACE(conv_name(s));
    const double ws = 1.0 / std::sqrt(double(s.C * s.R * s.R));
    Tensor dy = rand({s.N, s.K, s.OH(), s.OW()}), w = rand({s.K, s.C, s.R, s.R}, -ws, ws);
    const Conv2dParams p{s.stride, s.pad};
    Tensor dxr = rout({s.N, s.C, s.H, s.W});
    ref().conv2d_bwd_data(p, rin(dy, dt(), lay()), rin(w, dt(), NCHW), dxr);
    for (Layout wl : weight_layouts()) {
      Tensor dx = out({s.N, s.C, s.H, s.W}, dt(), lay());
      be().conv2d_bwd_data(p, up(dy, dt(), lay()), up(w, dt(), wl), dx);
      check(std::string("conv2d_bwd_data dx (weights ") + layout_name(wl) + ")", dx, dxr,
            tol(kConv));
    }
  }
}

TEST_P(OpsBackend, Conv2dBwdWeights) {
  REQUIRE_OP(Op::conv2d);
  for (const ConvShape& s : kConvShapes) {
    SCOPED_TRACE(conv_name(s));
    Tensor x = rand({s.N, s.C, s.H, s.W}), dy = rand({s.N, s.K, s.OH(), s.OW()});
    const Conv2dParams p{s.stride, s.pad};
    Tensor dwr = rout({s.K, s.C, s.R, s.R});
    ref().conv2d_bwd_weights(p, rin(x, dt(), lay()), rin(dy, dt(), lay()), dwr);
    for (Layout wl : weight_layouts()) {
      Tensor dw = out({s.K, s.C, s.R, s.R}, dt(), wl);
      be().conv2d_bwd_weights(p, up(x, dt(), lay()), up(dy, dt(), lay()), dw);
      check(std::string("conv2d_bwd_weights dw (weights ") + layout_name(wl) + ")", dw, dwr,
            tol(kConv));
    }
  }
}

// ---------------------------------------------------------------- batch normalisation

struct BnShape {
  int64_t N, C, H, W;
};
const BnShape kBnShapes[] = {{2, 64, 7, 7}, {2, 256, 3, 3}, {4, 24, 5, 5}, {1, 16, 9, 11}};

std::string bn_name(const BnShape& s, bool relu) {
  return "(" + std::to_string(s.N) + "," + std::to_string(s.C) + "," + std::to_string(s.H) + "," +
         std::to_string(s.W) + ") relu " + (relu ? "on" : "off");
}

TEST_P(OpsBackend, BatchNormFwdTrain) {
  REQUIRE_OP(Op::batchnorm);
  for (const BnShape& s : kBnShapes)
    for (bool relu : {false, true}) {
      SCOPED_TRACE(bn_name(s, relu));
      BatchNormParams p;
      p.relu = relu;
      // Mean offset 0.5 so that one-pass variance formulas are exercised.
      Tensor x = rand({s.N, s.C, s.H, s.W}, -0.5, 1.5), g = rand({s.C}, 0.5, 1.5);
      Tensor b = rand({s.C}, -0.5, 0.5), rm0 = rand({s.C}, -0.2, 0.2), rv0 = rand({s.C}, 0.5, 2);
      Tensor rm = up(rm0, F32, NCHW), rv = up(rv0, F32, NCHW);
      Tensor y = out(x.shape(), dt(), lay()), sm = out({s.C}, F32), sv = out({s.C}, F32);
      be().batchnorm_fwd_train(p, up(x, dt(), lay()), up(g, F32, NCHW), up(b, F32, NCHW), rm, rv, y,
                               sm, sv);
      Tensor rmr = rin(rm0, F32, NCHW), rvr = rin(rv0, F32, NCHW);
      Tensor yr = rout(x.shape()), smr = rout({s.C}), svr = rout({s.C});
      ref().batchnorm_fwd_train(p, rin(x, dt(), lay()), rin(g, F32, NCHW), rin(b, F32, NCHW), rmr,
                                rvr, yr, smr, svr);
      check("batchnorm_fwd_train y", y, yr, tol(kBnFwd));
      check("batchnorm_fwd_train save_mean", sm, smr, tol(kBnFwd));
      check("batchnorm_fwd_train save_var", sv, svr, tol(kBnFwd));
      check("batchnorm_fwd_train running_mean", rm, rmr, tol(kBnFwd));
      check("batchnorm_fwd_train running_var", rv, rvr, tol(kBnFwd));
    }
}

TEST_P(OpsBackend, BatchNormFwdInfer) {
  REQUIRE_OP(Op::batchnorm);
  for (const BnShape& s : kBnShapes)
    for (bool relu : {false, true}) {
      SCOPED_TRACE(bn_name(s, relu));
      BatchNormParams p;
      p.relu = relu;
      Tensor x = rand({s.N, s.C, s.H, s.W}), g = rand({s.C}, 0.5, 1.5), b = rand({s.C});
      Tensor rm = rand({s.C}, -0.3, 0.3), rv = rand({s.C}, 0.3, 2);
      Tensor y = out(x.shape(), dt(), lay());
      be().batchnorm_fwd_infer(p, up(x, dt(), lay()), up(g, F32, NCHW), up(b, F32, NCHW),
                               up(rm, F32, NCHW), up(rv, F32, NCHW), y);
      Tensor yr = rout(x.shape());
      ref().batchnorm_fwd_infer(p, rin(x, dt(), lay()), rin(g, F32, NCHW), rin(b, F32, NCHW),
                                rin(rm, F32, NCHW), rin(rv, F32, NCHW), yr);
      check("batchnorm_fwd_infer y", y, yr, tol(kBnFwd));
    }
}

TEST_P(OpsBackend, BatchNormBwd) {
  REQUIRE_OP(Op::batchnorm);
  for (const BnShape& s : kBnShapes)
    for (bool relu : {false, true}) {
      SCOPED_TRACE(bn_name(s, relu));
      BatchNormParams p;
      p.relu = relu;
      Tensor x = rand({s.N, s.C, s.H, s.W}, -0.5, 1.5), g = rand({s.C}, 0.5, 1.5);
      Tensor b = rand({s.C}, -0.5, 0.5), dy = rand(x.shape());
      // Forward on the reference (on the rounded x); both sides get the same y and stats.
      Tensor rm = Tensor::zeros({s.C}, F64), rv = Tensor::zeros({s.C}, F64);
      Tensor y64 = rout(x.shape()), sm64 = rout({s.C}), sv64 = rout({s.C});
      ref().batchnorm_fwd_train(p, rin(x, dt(), NCHW), rin(g, F32, NCHW), rin(b, F32, NCHW), rm, rv,
                                y64, sm64, sv64);
      Tensor y = host32(y64), sm = host32(sm64), sv = host32(sv64);
      Tensor dx = out(x.shape(), dt(), lay()), dg = out({s.C}, F32), db = out({s.C}, F32);
      be().batchnorm_bwd(p, up(x, dt(), lay()), up(y, dt(), lay()), up(dy, dt(), lay()),
                         up(g, F32, NCHW), up(sm, F32, NCHW), up(sv, F32, NCHW), dx, dg, db);
      Tensor dxr = rout(x.shape()), dgr = rout({s.C}), dbr = rout({s.C});
      ref().batchnorm_bwd(p, rin(x, dt(), lay()), rin(y, dt(), lay()), rin(dy, dt(), lay()),
                          rin(g, F32, NCHW), rin(sm, F32, NCHW), rin(sv, F32, NCHW), dxr, dgr, dbr);
      check("batchnorm_bwd dx", dx, dxr, tol(kBnBwd));
      check("batchnorm_bwd dgamma", dg, dgr, tol(kBnBwd));
      check("batchnorm_bwd dbeta", db, dbr, tol(kBnBwd));
    }
}

// ---------------------------------------------------------------- elementwise

const std::vector<int64_t> kEltShapes[] = {{2, 64, 7, 7}, {1, 17, 5, 9}, {2, 256, 4, 4}};

TEST_P(OpsBackend, Relu) {
  REQUIRE_OP(Op::relu);
  for (const auto& shape : kEltShapes) {
    Tensor x = rand(shape), dy = rand(shape);
    Tensor y = out(shape, dt(), lay());
    be().relu_fwd(up(x, dt(), lay()), y);
    Tensor yr = rout(shape);
    ref().relu_fwd(rin(x, dt(), lay()), yr);
    check("relu_fwd y", y, yr, tol(kExact1));
    Tensor yh = host32(yr), dx = out(shape, dt(), lay());
    be().relu_bwd(up(yh, dt(), lay()), up(dy, dt(), lay()), dx);
    Tensor dxr = rout(shape);
    ref().relu_bwd(rin(yh, dt(), lay()), rin(dy, dt(), lay()), dxr);
    check("relu_bwd dx", dx, dxr, tol(kExact1));
  }
}

TEST_P(OpsBackend, AddAndAddRelu) {
  REQUIRE_OP(Op::add);
  for (const auto& shape : kEltShapes) {
    Tensor a = rand(shape), b = rand(shape);
    Tensor y = out(shape, dt(), lay());
    be().add(up(a, dt(), lay()), up(b, dt(), lay()), y);
    Tensor yr = rout(shape);
    ref().add(rin(a, dt(), lay()), rin(b, dt(), lay()), yr);
    check("add y", y, yr, tol(kExact1));
    if (!be().supports(Op::add_relu, dt(), lay())) continue;
    Tensor y2 = out(shape, dt(), lay());
    be().add_relu_fwd(up(a, dt(), lay()), up(b, dt(), lay()), y2);
    ref().add_relu_fwd(rin(a, dt(), lay()), rin(b, dt(), lay()), yr);
    check("add_relu_fwd y", y2, yr, tol(kExact1));
  }
}

// dx = y > 0 ? g1 + g2 : 0 against the reference, against its definition (add then relu_bwd on
// the backend itself: bit-identical), in place on g1, and with y in the other layout.
TEST_P(OpsBackend, AddReluBwd) {
  REQUIRE_OP(Op::add_relu);
  for (const auto& shape : kEltShapes) {
    Tensor y = rand(shape), g1 = rand(shape), g2 = rand(shape);
    Tensor yd = up(y, dt(), lay()), g1d = up(g1, dt(), lay()), g2d = up(g2, dt(), lay());
    Tensor dx = out(shape, dt(), lay());
    be().add_relu_bwd(yd, g1d, g2d, dx);
    Tensor dxr = rout(shape);
    ref().add_relu_bwd(rin(y, dt(), lay()), rin(g1, dt(), lay()), rin(g2, dt(), lay()), dxr);
    check("add_relu_bwd dx", dx, dxr, tol(kExact1));
    Tensor sum = out(shape, dt(), lay()), two = out(shape, dt(), lay());
    be().add(g1d, g2d, sum);
    be().relu_bwd(yd, sum, two);
    EXPECT_TRUE(all_close("add_relu_bwd = add + relu_bwd [" + cfg() + "]",
                          test::download(be(), dx), test::download(be(), two), {0, 0}));
    be().add_relu_bwd(yd, g1d, g2d, g1d);  // in place on g1
    EXPECT_TRUE(all_close("add_relu_bwd in place [" + cfg() + "]", test::download(be(), g1d),
                          test::download(be(), two), {0, 0}));
    const Layout other = lay() == NCHW ? NHWC : NCHW;
    Tensor dx2 = out(shape, dt(), lay());
    be().add_relu_bwd(up(y, dt(), other), up(g1, dt(), lay()), g2d, dx2);
    check("add_relu_bwd dx (y in the other layout)", dx2, dxr, tol(kExact1));
  }
}

// Inputs and outputs in different layouts (allowed by the Backend contract).
TEST_P(OpsBackend, MixedLayouts) {
  REQUIRE_OP(Op::conv2d);
  if (!be().supports(Op::conv2d, dt(), other()) || !be().supports(Op::add, dt(), other()))
    GTEST_SKIP() << "backend supports only " << layout_name(lay());
  const ConvShape s{"3x3 s2 p1", 2, 16, 11, 11, 24, 3, 2, 1};
  const double ws = 1.0 / std::sqrt(double(s.C * 9));
  Tensor x = rand({s.N, s.C, s.H, s.W}), w = rand({s.K, s.C, 3, 3}, -ws, ws);
  Tensor y = out({s.N, s.K, s.OH(), s.OW()}, dt(), other());
  be().conv2d_fwd({2, 1}, up(x, dt(), lay()), up(w, dt(), NCHW), y);
  Tensor yr = rout(y.shape());
  ref().conv2d_fwd({2, 1}, rin(x, dt(), lay()), rin(w, dt(), NCHW), yr);
  check("conv2d_fwd x " + std::string(layout_name(lay())) + " -> y other layout", y, yr,
        tol(kConv));
  Tensor b = rand(x.shape()), ya = out(x.shape(), dt(), lay());
  be().add(up(x, dt(), lay()), up(b, dt(), other()), ya);
  Tensor yar = rout(x.shape());
  ref().add(rin(x, dt(), lay()), rin(b, dt(), other()), yar);
  check("add with b in the other layout", ya, yar, tol(kExact1));
}

// ---------------------------------------------------------------- pooling

struct PoolCase {
  int64_t N, C, H, W;
  Pool2dParams p;
};
const PoolCase kPoolCases[] = {
    {2, 64, 17, 17, {3, 2, 1}},  // the ResNet stem pool, odd input
    {2, 16, 16, 16, {3, 2, 1}},  // even input
    {1, 8, 9, 7, {2, 2, 0}},
    {1, 8, 6, 6, {3, 1, 1}},
};

TEST_P(OpsBackend, MaxPool) {
  REQUIRE_OP(Op::maxpool2d);
  for (const PoolCase& pc : kPoolCases) {
    const Pool2dParams& p = pc.p;
    SCOPED_TRACE(::testing::Message() << "(" << pc.N << "," << pc.C << "," << pc.H << "," << pc.W
                                      << ") k" << p.kernel << " s" << p.stride << " p" << p.pad);
    const int64_t OH = (pc.H + 2 * p.pad - p.kernel) / p.stride + 1;
    const int64_t OW = (pc.W + 2 * p.pad - p.kernel) / p.stride + 1;
    // Distinct values (a shuffled ramp, exact in f32): no ties in f32.
    Tensor x = Tensor::empty({pc.N, pc.C, pc.H, pc.W}, F32);
    std::vector<float> ramp(static_cast<size_t>(x.numel()));
    for (size_t i = 0; i < ramp.size(); ++i)
      ramp[i] = (static_cast<float>(i) - static_cast<float>(ramp.size() / 2)) / 1024.f;
    std::shuffle(ramp.begin(), ramp.end(), rng_);
    std::copy(ramp.begin(), ramp.end(), x.data_as<float>());
    Tensor y = out({pc.N, pc.C, OH, OW}, dt(), lay());
    be().maxpool2d_fwd(p, up(x, dt(), lay()), y);
    Tensor yr = rout(y.shape());
    ref().maxpool2d_fwd(p, rin(x, dt(), lay()), yr);
    check("maxpool2d_fwd y", y, yr, tol(kExact1));
    Tensor dy = rand(y.shape()), yh = host32(yr), dx = out(x.shape(), dt(), lay());
    be().maxpool2d_bwd(p, up(x, dt(), lay()), up(yh, dt(), lay()), up(dy, dt(), lay()), dx);
    Tensor dxr = rout(x.shape());
    ref().maxpool2d_bwd(p, rin(x, dt(), lay()), rin(yh, dt(), lay()), rin(dy, dt(), lay()), dxr);
    check("maxpool2d_bwd dx", dx, dxr, tol(kMaxPoolBwd));
  }
}

TEST_P(OpsBackend, GlobalAvgPool) {
  REQUIRE_OP(Op::global_avgpool);
  const std::vector<int64_t> shapes[] = {{2, 2048, 2, 2}, {2, 64, 7, 7}, {3, 5, 3, 5}};
  for (const auto& shape : shapes) {
    Tensor x = rand(shape), dy = rand({shape[0], shape[1]});
    Tensor y = out({shape[0], shape[1]}, dt());
    be().global_avgpool_fwd(up(x, dt(), lay()), y);
    Tensor yr = rout(y.shape());
    ref().global_avgpool_fwd(rin(x, dt(), lay()), yr);
    check("global_avgpool_fwd y", y, yr, tol(kAvgPool));
    Tensor dx = out(shape, dt(), lay());
    be().global_avgpool_bwd(up(dy, dt(), NCHW), dx);
    Tensor dxr = rout(shape);
    ref().global_avgpool_bwd(rin(dy, dt(), NCHW), dxr);
    check("global_avgpool_bwd dx", dx, dxr, tol(kAvgPool));
  }
}

// ---------------------------------------------------------------- linear

TEST_P(OpsBackend, Linear) {
  REQUIRE_OP(Op::linear);
  struct LinShape {
    int64_t N, C, K;
  };
  for (const LinShape& s : {LinShape{3, 2048, 1000}, LinShape{5, 256, 100}, LinShape{1, 7, 3}}) {
    SCOPED_TRACE(::testing::Message() << "N" << s.N << " C" << s.C << " K" << s.K);
    const double ws = 1.0 / std::sqrt(double(s.C));
    Tensor x = rand({s.N, s.C}), w = rand({s.K, s.C}, -ws, ws), b = rand({s.K}, -ws, ws);
    Tensor dy = rand({s.N, s.K});
    Tensor y = out({s.N, s.K}, dt());
    be().linear_fwd(up(x, dt(), NCHW), up(w, dt(), NCHW), up(b, dt(), NCHW), y);
    Tensor yr = rout(y.shape());
    ref().linear_fwd(rin(x, dt(), NCHW), rin(w, dt(), NCHW), rin(b, dt(), NCHW), yr);
    check("linear_fwd y", y, yr, tol(kLinear));
    Tensor dx = out({s.N, s.C}, dt()), dw = out({s.K, s.C}, dt()), db = out({s.K}, dt());
    Tensor xd = up(x, dt(), NCHW), wd = up(w, dt(), NCHW), dyd = up(dy, dt(), NCHW);
    be().linear_bwd(xd, wd, dyd, dx, dw, db);
    Tensor dxr = rout(dx.shape()), dwr = rout(dw.shape()), dbr = rout(db.shape());
    ref().linear_bwd(rin(x, dt(), NCHW), rin(w, dt(), NCHW), rin(dy, dt(), NCHW), dxr, dwr, dbr);
    check("linear_bwd dx", dx, dxr, tol(kLinear));
    check("linear_bwd dw", dw, dwr, tol(kLinear));
    check("linear_bwd db", db, dbr, tol(kLinear));
    // dx undefined: skipped; dw and db still overwritten.
    Tensor none, dw2 = out({s.K, s.C}, dt()), db2 = out({s.K}, dt());
    be().linear_bwd(xd, wd, dyd, none, dw2, db2);
    check("linear_bwd dw (dx skipped)", dw2, dwr, tol(kLinear));
    check("linear_bwd db (dx skipped)", db2, dbr, tol(kLinear));
  }
}

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

// ---------------------------------------------------------------- input, optimiser

TEST_P(OpsBackend, NormalizeU8) {
  REQUIRE_OP(Op::normalize_u8);
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{2, 3, 17, 19}, std::vector<int64_t>{1, 3, 64, 64}}) {
    Tensor src = Tensor::empty(shape, DType::u8, NHWC);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int64_t i = 0; i < src.numel(); ++i) src.data_as<uint8_t>()[i] = uint8_t(byte(rng_));
    Tensor srcd = be().alloc(shape, DType::u8, NHWC);
    be().copy(src, srcd);
    Tensor dst = out(shape, dt(), lay());
    be().normalize_u8(srcd, mean, stdv, dst);
    Tensor dstr = rout(shape, lay());
    ref().normalize_u8(src, mean, stdv, dstr);
    check("normalize_u8 dst", dst, dstr, tol(kNormalize));
    // A 4-channel destination (--image-shape 4,H,W): the same three channels and a zero fourth.
    const std::vector<int64_t> shape4{shape[0], 4, shape[2], shape[3]};
    Tensor dst4 = out(shape4, dt(), lay());
    be().normalize_u8(srcd, mean, stdv, dst4);
    Tensor d4 = convert(test::download(be(), dst4), F64, NCHW), d3 = convert(dstr, F64, NCHW);
    const int64_t plane = shape[2] * shape[3];
    Tensor first3 = rout(shape), want3 = d3;
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t i = 0; i < 3 * plane; ++i)
        first3.data_as<double>()[n * 3 * plane + i] = d4.data_as<double>()[n * 4 * plane + i];
    EXPECT_TRUE(all_close("normalize_u8 4-channel dst, channels 0-2 [" + cfg() + "]", first3,
                          want3, tol(kNormalize)));
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t i = 0; i < plane; ++i)
        ASSERT_EQ(d4.data_as<double>()[(n * 4 + 3) * plane + i], 0.0) << "the fourth channel";
  }
}

TEST_P(OpsBackend, SgdUpdate) {
  REQUIRE_F32("sgd_update");
  REQUIRE_OP(Op::sgd);
  const int64_t n = 10007;
  SgdParams sp;
  sp.lr = 0.256f;
  sp.momentum = 0.875f;
  sp.weight_decay = 3.0517578125e-05f;
  sp.decay_count = 6001;
  sp.grad_scale = 1.0f / 128;
  Tensor p0 = rand({n}), buf0 = Tensor::zeros({n}, F32);
  Tensor p = up(p0, F32, NCHW), buf = up(buf0, F32, NCHW);
  Tensor pr = p0.clone(), bufr = buf0.clone();  // ref runs in f32 like the real slab
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Tensor g = rand({n}, -128, 128);
    be().sgd_update(sp, p, up(g, F32, NCHW), buf);
    ref().sgd_update(sp, pr, g, bufr);
    check("sgd params", p, pr, kSgd);
    check("sgd momentum_buf", buf, bufr, kSgd);
  }
}

// The mask (masked weights and momentum held at exactly zero) and, where the backend computes in
// half precision, the compute copy written in the same pass; a skipped step writes neither.
TEST_P(OpsBackend, SgdUpdateMaskAndComputeCopy) {
  REQUIRE_F32("sgd_update");
  REQUIRE_OP(Op::sgd);
  const int64_t n = 5003;
  SgdParams sp;
  sp.lr = 0.1f;
  sp.decay_count = 2500;
  Tensor p0 = rand({n}), b0 = rand({n}), g = rand({n}, -4, 4);
  Tensor mask = Tensor::empty({n}, DType::u8);
  std::mt19937_64 mg(17);
  for (int64_t i = 0; i < n; ++i) mask.data_as<uint8_t>()[i] = (mg() % 4) < 2 ? 0 : 1;
  Tensor p = up(p0, F32, NCHW), buf = up(b0, F32, NCHW);
  Tensor pr = p0.clone(), bufr = b0.clone();
  sp.mask = up(mask, DType::u8, NCHW);
  SgdParams rp = sp;
  rp.mask = mask;
  std::vector<DType> copies;
  for (DType d : {DType::f16, DType::bf16})
    if (be().supports(Op::conv2d, d, NCHW)) copies.push_back(d);
  for (size_t step = 0; step < std::max<size_t>(1, copies.size()); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Tensor copy, copyr;
    if (step < copies.size()) {
      sp.compute_copy = copy = be().alloc({n}, copies[step], NCHW);
      rp.compute_copy = copyr = Tensor::empty({n}, copies[step]);
    }
    be().sgd_update(sp, p, up(g, F32, NCHW), buf);
    ref().sgd_update(rp, pr, g, bufr);
    check("masked sgd params", p, pr, kSgd);
    check("masked sgd momentum_buf", buf, bufr, kSgd);
    const Tensor hp = test::download(be(), p), hb = test::download(be(), buf);
    for (int64_t i = 0; i < n; ++i)
      if (mask.data_as<uint8_t>()[i] == 0) {
        ASSERT_EQ(hp.data_as<double>()[i], 0.0) << "masked param " << i;
        ASSERT_EQ(hb.data_as<double>()[i], 0.0) << "masked momentum " << i;
      }
    if (copy.defined()) check("sgd compute copy", copy, convert(copyr, F64), kCopy);
  }
  if (copies.empty()) {
    SgdParams bad = sp;
    bad.compute_copy = Tensor::empty({n}, DType::f16);
    EXPECT_THROW(be().sgd_update(bad, p, up(g, F32, NCHW), buf), Error)
        << "a backend without half compute refuses a compute copy";
  }
  SgdParams wrong = sp;
  wrong.mask = up(Tensor::zeros({n - 1}, DType::u8), DType::u8, NCHW);
  EXPECT_THROW(be().sgd_update(wrong, p, up(g, F32, NCHW), buf), Error) << "mask length";
}

TEST_P(OpsBackend, SgdUpdateFromStepState) {
  REQUIRE_F32("sgd_update");
  REQUIRE_OP(Op::sgd);
  const int64_t n = 4099;
  SgdParams sp;
  sp.lr = 123.f;           // ignored: lr comes from the state
  sp.grad_scale = 77.f;    // ignored: 1 / loss_scale comes from the state
  sp.decay_count = 1000;
  Tensor p0 = rand({n}), b0 = rand({n});
  Tensor p = up(p0, F32, NCHW), buf = up(b0, F32, NCHW);
  Tensor pr = p0.clone(), bufr = b0.clone();
  Tensor g = rand({n}, -1024, 1024);
  Tensor st = up(step_state(0.05f, 256.f), F32, NCHW);
  sp.state = st;
  be().sgd_update(sp, p, up(g, F32, NCHW), buf);
  SgdParams rp = sp;
  rp.state = Tensor();
  rp.lr = 0.05f;
  rp.grad_scale = 1.f / 256.f;
  ref().sgd_update(rp, pr, g, bufr);
  check("sgd params (state lr, 1/loss_scale)", p, pr, kSgd);
  check("sgd momentum_buf (state)", buf, bufr, kSgd);
  // found_inf set: the whole update is skipped.
  Tensor sth = step_state(0.05f, 256.f);
  sth.data_as<float>()[StepState::found_inf] = 1.f;
  be().copy(sth, st);
  Tensor before_p = test::download(be(), p), before_b = test::download(be(), buf);
  be().sgd_update(sp, p, up(g, F32, NCHW), buf);
  check("sgd params unchanged on found_inf", p, before_p, kCopy);
  check("sgd momentum unchanged on found_inf", buf, before_b, kCopy);
}

// Pure fp16 SGD (--use-pure-fp16): f16 params, grads and momentum, each element updated in f32
// in torch's order and rounded to f16 when stored, p with the unrounded buf (Paddle's momentum
// kernel). Oracle: the same arithmetic written out here, each f32 operation rounded once (a
// product of two floats is exact in double). Also: the mask, the skip on found_inf, and the
// accuracy risk itself: an update below half an f16 ulp of p is lost.
namespace pure_half {
float f16(float v) { return ref::half_to_float(ref::float_to_half(v)); }
float mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * b); }
float add(float a, float b) { return static_cast<float>(static_cast<double>(a) + b); }
/// One oracle step over host f32 tensors holding f16 values.
void step(const SgdParams& sp, Tensor& p, const Tensor& g, Tensor& b, const Tensor& mask) {
  for (int64_t i = 0; i < p.numel(); ++i) {
    float& w = p.data_as<float>()[i];
    float& m = b.data_as<float>()[i];
    float d = mul(g.data_as<const float>()[i], sp.grad_scale);
    if (i < sp.decay_count) d = add(d, mul(sp.weight_decay, w));
    const float bi = add(mul(sp.momentum, m), d);
    float wi = add(w, -mul(sp.lr, bi));
    float bs = bi;
    if (mask.defined() && mask.data_as<const uint8_t>()[i] == 0) wi = 0.f, bs = 0.f;
    w = f16(wi);
    m = f16(bs);
  }
}
/// A host f32 tensor of n values drawn from [lo, hi) and rounded to f16.
Tensor rand_half(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = f16(u(rng));
  return t;
}
/// Elements of `got` (f64 download) more than one f16 ulp from `want` (f32), and exact matches.
std::pair<int64_t, int64_t> compare(const Tensor& got, const Tensor& want) {
  int64_t far = 0, exact = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.data_as<const double>()[i], w = want.data_as<const float>()[i];
    const double ulp = std::max(std::ldexp(1.0, std::ilogb(std::max(std::fabs(w), 6.1e-5)) - 10),
                                std::ldexp(1.0, -24));
    if (a == w) ++exact;
    else if (std::fabs(a - w) > ulp) ++far;
  }
  return {far, exact};
}
}  // namespace pure_half

/// The pure fp16 SGD checks on one backend (the harness runs the other backends against ref;
/// here ref itself is checked too, against the oracle above).
void check_pure_half_sgd(Backend& be) {
  const DType F16 = DType::f16;
  auto up = [&](const Tensor& host, DType dt) {
    Tensor d = be.alloc(host.shape(), dt);
    be.copy(host, d);
    return d;
  };
  auto down = [&](const Tensor& t) { return test::download(be, t); };
  const int64_t n = 6007;
  SgdParams sp;
  sp.lr = 0.256f;
  sp.decay_count = 3001;
  sp.grad_scale = 1.f / 1024;
  std::mt19937_64 rng(31);
  if (!be.supports(Op::sgd, F16, NCHW)) {
    Tensor p = up(pure_half::rand_half(rng, n, -1, 1), F32);
    Tensor b = up(Tensor::zeros({n}, F32), F32);
    Tensor g = up(pure_half::rand_half(rng, n, -1, 1), F32);
    // Build f16 slabs on the host side of the backend's own allocation when it can hold them.
    Tensor p16 = be.alloc({n}, F16), b16 = be.alloc({n}, F16), g16 = be.alloc({n}, F16);
    EXPECT_THROW(be.sgd_update(sp, p16, g16, b16), Error)
        << be.name() << " says it has no f16 SGD: it must refuse f16 slabs";
    be.sgd_update(sp, p, g, b);  // f32 still works
    return;
  }
  Tensor ph = pure_half::rand_half(rng, n, -0.5f, 0.5f);
  Tensor bh = pure_half::rand_half(rng, n, -0.1f, 0.1f);
  Tensor mask = Tensor::empty({n}, DType::u8);
  for (int64_t i = 0; i < n; ++i) mask.data_as<uint8_t>()[i] = (rng() % 4) < 1 ? 0 : 1;
  Tensor p = up(ph, F16), b = up(bh, F16);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << be.name() << " step " << step);
    Tensor gh = pure_half::rand_half(rng, n, -256, 256);  // scaled gradients (x1024)
    SgdParams dp = sp;
    Tensor none;
    if (step == 2) dp.mask = up(mask, DType::u8);
    be.sgd_update(dp, p, up(gh, F16), b);
    pure_half::step(sp, ph, gh, bh, step == 2 ? mask : none);
    const auto [pfar, pexact] = pure_half::compare(down(p), ph);
    const auto [bfar, bexact] = pure_half::compare(down(b), bh);
    EXPECT_EQ(pfar, 0) << "params more than 1 f16 ulp from the oracle";
    EXPECT_EQ(bfar, 0) << "momentum more than 1 f16 ulp from the oracle";
    EXPECT_GE(pexact, n * 999 / 1000) << "params bit-equal to the oracle";
    EXPECT_GE(bexact, n * 999 / 1000) << "momentum bit-equal to the oracle";
    if (step == 2) {
      const Tensor hp = down(p), hb = down(b);
      for (int64_t i = 0; i < n; ++i)
        if (mask.data_as<uint8_t>()[i] == 0) {
          ASSERT_EQ(hp.data_as<double>()[i], 0.0) << "masked param " << i;
          ASSERT_EQ(hb.data_as<double>()[i], 0.0) << "masked momentum " << i;
        }
    }
  }
  // An overflowing step (found_inf in the device step state) leaves both slabs untouched.
  Tensor sth = Tensor::zeros({StepState::size}, F32);
  sth.data_as<float>()[StepState::lr] = 0.05f;
  sth.data_as<float>()[StepState::loss_scale] = 256.f;
  sth.data_as<float>()[StepState::inv_loss_scale] = 1.f / 256;
  sth.data_as<float>()[StepState::found_inf] = 1.f;
  SgdParams sk = sp;
  sk.state = up(sth, F32);
  const Tensor before_p = down(p), before_b = down(b);
  be.sgd_update(sk, p, up(pure_half::rand_half(rng, n, -1, 1), F16), b);
  EXPECT_TRUE(all_close("pure fp16 params unchanged on found_inf", down(p), before_p, kCopy));
  EXPECT_TRUE(all_close("pure fp16 momentum unchanged on found_inf", down(b), before_b, kCopy));
  // The accuracy risk: w = 1 (f16 ulp 2^-10), an update lr * buf = 1e-4 < 2^-11 rounds away in
  // f16 (the momentum keeps it); the f32 slab moves.
  SgdParams tiny;
  tiny.lr = 1e-3f;
  tiny.momentum = 0.f;
  tiny.weight_decay = 0.f;
  Tensor one = Tensor::zeros({4}, F32), g4 = Tensor::zeros({4}, F32);
  for (int i = 0; i < 4; ++i) one.data_as<float>()[i] = 1.f, g4.data_as<float>()[i] = 0.1f;
  Tensor p16 = up(one, F16), b16 = up(Tensor::zeros({4}, F32), F16);
  Tensor p32 = up(one, F32), b32 = up(Tensor::zeros({4}, F32), F32);
  be.sgd_update(tiny, p16, up(g4, F16), b16);
  be.sgd_update(tiny, p32, up(g4, F32), b32);
  EXPECT_EQ(down(p16).data_as<double>()[0], 1.0) << "a 1e-4 update of an f16 1 is lost";
  EXPECT_NEAR(down(b16).data_as<double>()[0], 0.1, 1e-4) << "the f16 momentum keeps it";
  EXPECT_NEAR(down(p32).data_as<double>()[0], 1.0 - 1e-4, 1e-7) << "in f32";
  // A compute copy and mixed dtypes are refused.
  SgdParams cc = sp;
  cc.compute_copy = up(Tensor::zeros({n}, F32), F16);
  EXPECT_THROW(be.sgd_update(cc, p, up(pure_half::rand_half(rng, n, -1, 1), F16), b), Error)
      << "f16 slabs take no compute copy";
  Tensor b32n = up(Tensor::zeros({n}, F32), F32);
  EXPECT_THROW(be.sgd_update(sp, p, up(pure_half::rand_half(rng, n, -1, 1), F16), b32n), Error)
      << "f16 params with f32 momentum";
}

TEST_P(OpsBackend, SgdUpdatePureHalf) {
  REQUIRE_F32("sgd_update");
  check_pure_half_sgd(be());
}

TEST(OpsRef, SgdUpdatePureHalf) { check_pure_half_sgd(*make_backend("ref")); }

TEST_P(OpsBackend, AmpCheckFiniteAndLossScale) {
  REQUIRE_F32("the AMP step-state ops");
  REQUIRE_OP(Op::amp);
  // check_finite on every float dtype the backend stores: clean data leaves found_inf alone,
  // one inf or NaN anywhere sets it.
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    if (d != F32 && !be().supports(Op::conv2d, d, lay())) continue;
    SCOPED_TRACE(dtype_name(d));
    for (double bad : {0.0, std::numeric_limits<double>::infinity(),
                       -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      Tensor h = rand({3, 1001}, -1000, 1000);
      if (bad != 0.0) h.data_as<float>()[2 * 1001 + 517] = static_cast<float>(bad);
      Tensor st = up(step_state(0.1f, 8.f), F32, NCHW);
      be().check_finite(up(h, d, NCHW), st);
      const float found = state_host(st).data_as<float>()[StepState::found_inf];
      EXPECT_EQ(found, bad == 0.0 ? 0.f : 1.f) << "inserted value " << bad;
      // A later clean slab must not clear the flag.
      be().check_finite(up(rand({17}), d, NCHW), st);
      EXPECT_EQ(state_host(st).data_as<float>()[StepState::found_inf], found);
    }
  }
  // update_loss_scale against torch.cuda.amp.GradScaler.update semantics, written out here:
  // growth interval 3, found_inf on steps 2 and 7.
  LossScaleParams lp;
  lp.growth_interval = 3;
  Tensor st = up(step_state(0.1f, 1024.f), F32, NCHW);
  float scale = 1024.f, tracker = 0.f, skipped = 0.f;
  for (int step = 0; step < 10; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const bool inf = step == 2 || step == 7;
    Tensor grads = rand({64}, -4, 4);
    if (inf) grads.data_as<float>()[9] = std::numeric_limits<float>::infinity();
    be().check_finite(up(grads, F32, NCHW), st);
    be().update_loss_scale(lp, st);
    if (inf) {
      scale *= 0.5f, tracker = 0.f, skipped += 1.f;
    } else if (++tracker == 3.f) {
      scale *= 2.f, tracker = 0.f;
    }
    const Tensor h = state_host(st);
    const float* s = h.data_as<float>();
    EXPECT_EQ(s[StepState::loss_scale], scale);
    EXPECT_EQ(s[StepState::inv_loss_scale], 1.f / scale);
    EXPECT_EQ(s[StepState::growth_tracker], tracker);
    EXPECT_EQ(s[StepState::skipped_steps], skipped);
    EXPECT_EQ(s[StepState::found_inf], 0.f);
    EXPECT_EQ(s[StepState::lr], 0.1f) << "update_loss_scale must not touch the lr";
  }
  // A static scale (dynamic = false) never changes but still counts skipped steps.
  lp.dynamic = false;
  Tensor h = step_state(0.1f, 128.f);
  h.data_as<float>()[StepState::found_inf] = 1.f;
  Tensor st2 = up(h, F32, NCHW);
  be().update_loss_scale(lp, st2);
  const Tensor h2 = state_host(st2);
  EXPECT_EQ(h2.data_as<float>()[StepState::loss_scale], 128.f);
  EXPECT_EQ(h2.data_as<float>()[StepState::skipped_steps], 1.f);
}

// ---------------------------------------------------------------- memory

TEST_P(OpsBackend, CopyAndZero) {
  if (dt() != F32 && !be().supports(Op::conv2d, dt(), lay()))
    GTEST_SKIP() << GetParam().backend << " has no " << dtype_name(dt()) << " tensors";
  Tensor h = rand({2, 5, 3, 7});
  Tensor hd = convert(h, dt(), NCHW);
  Tensor a = be().alloc(h.shape(), dt(), lay());
  be().copy(hd, a);  // host NCHW -> device in the tested layout
  check("copy host -> device", a, rin(h, dt(), NCHW), kCopy);
  Tensor b = be().alloc(h.shape(), dt(), other());
  be().copy(a, b);  // device -> device, layout change
  check("copy device -> device (layout change)", b, rin(h, dt(), NCHW), kCopy);
  Tensor v = be().alloc({37}, dt());
  Tensor hv = convert(rand({37}), dt());
  be().copy(hv, v);
  check("copy 1-D", v, convert(hv, F64), kCopy);
  be().zero(b);
  check("zero", b, Tensor::zeros(h.shape(), F64), kCopy);
  Tensor bad = be().alloc({2, 5, 3, 6}, dt(), lay());
  EXPECT_ANY_THROW(be().copy(a, bad)) << "copy with a shape mismatch must throw";
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsBackend, ::testing::ValuesIn(harness_params()), param_name);

// Says, in the test log, whether the CUDA backend took part: compiled but no GPU (CI) is a
// skip with the reason, never a silent pass.
TEST(OpsBackendCuda, CudaBackendPresence) {
  const auto built = compiled_backends();
  if (std::find(built.begin(), built.end(), "cuda") == built.end())
    GTEST_SKIP() << "CUDA backend not built: " << cuda_unavailable_reason();
  if (cuda_device_count() == 0)
    EXPECT_ANY_THROW(make_backend("cuda")) << "creating the cuda backend without a GPU must throw";
  RN50_REQUIRE_OR_SKIP("gpu", cuda_device_count() > 0,
                       "CUDA backend built but not run (no usable GPU: "
                           << cuda_unavailable_reason() << "); the harness ran only the CPU backends");
  const auto avail = available_backends();
  EXPECT_NE(std::find(avail.begin(), avail.end(), "cuda"), avail.end());
}

// The harness must have something to test: the oneDNN backend is always built.
TEST(OpsBackendList, OnednnIsUnderTest) {
  bool onednn = false;
  for (const HarnessParam& p : harness_params()) onednn = onednn || p.backend == "onednn";
  EXPECT_TRUE(onednn) << "available_backends() lacks onednn: the op harness would test nothing";
}

}  // namespace
}  // namespace rn50
