// Op harness (see op_backend_fixture.h), convolution and batch normalisation: conv2d forward,
// backward data and backward weights over ResNet-50 shapes (1x1, 3x3 stride 1 and 2, the 7x7
// stride-2 stem with 3 input channels, odd sizes and channel counts) with the weights in both
// layouts; batchnorm training forward (y, saved and running statistics), inference forward and
// backward, each with and without the fused ReLU, and the backward after the backend's own
// forward (where it may reuse the forward's ReLU mask); where a backend fuses a block's last BN
// with its residual join (supports(Op::batchnorm_add_relu)), the fused forward and backward
// against the reference's BN, add_relu and add_relu_bwd. Every backend but "ref" against "ref".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "op_backend_fixture.h"
#include "rn50/backend.h"

namespace rn50::test {
namespace {

// ---------------------------------------------------------------- convolution

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

// The backend's own training forward, then its backward on the forward's y and statistics, three
// times: the first backward may use state the forward kept (the oneDNN backend's ReLU mask), the
// second runs after that state is used up, the third gets a copy of y in another buffer. Each
// must match the reference backward on the same values.
TEST_P(OpsBackend, BatchNormFwdThenBwd) {
  REQUIRE_OP(Op::batchnorm);
  for (const BnShape& s : kBnShapes)
    for (bool relu : {false, true}) {
      SCOPED_TRACE(bn_name(s, relu));
      BatchNormParams p;
      p.relu = relu;
      Tensor x = rand({s.N, s.C, s.H, s.W}, -0.5, 1.5), g = rand({s.C}, 0.5, 1.5);
      Tensor b = rand({s.C}, -0.5, 0.5), dy = rand(x.shape());
      Tensor xd = up(x, dt(), lay()), gd = up(g, F32, NCHW), bd = up(b, F32, NCHW);
      Tensor rm = up(rand({s.C}, -0.2, 0.2), F32, NCHW);
      Tensor rv = up(rand({s.C}, 0.5, 2), F32, NCHW);
      Tensor y = out(x.shape(), dt(), lay()), sm = out({s.C}, F32), sv = out({s.C}, F32);
      be().batchnorm_fwd_train(p, xd, gd, bd, rm, rv, y, sm, sv);
      // The reference on exactly the values the backend holds.
      const Tensor yh = test::download(be(), y), smh = test::download(be(), sm);
      const Tensor svh = test::download(be(), sv);
      Tensor dxr = rout(x.shape()), dgr = rout({s.C}), dbr = rout({s.C});
      ref().batchnorm_bwd(p, rin(x, dt(), lay()), convert(yh, F64, lay()),
                          rin(dy, dt(), lay()), rin(g, F32, NCHW), convert(smh, F64, NCHW),
                          convert(svh, F64, NCHW), dxr, dgr, dbr);
      const Tensor dyd = up(dy, dt(), lay()), y_copy = up(yh, dt(), lay());
      const char* runs[] = {"first backward", "second backward", "backward on a copy of y"};
      for (int r = 0; r < 3; ++r) {
        SCOPED_TRACE(runs[r]);
        Tensor dx = out(x.shape(), dt(), lay()), dg = out({s.C}, F32), db = out({s.C}, F32);
        be().batchnorm_bwd(p, xd, r < 2 ? y : y_copy, dyd, gd, sm, sv, dx, dg, db);
        check("batchnorm_bwd dx", dx, dxr, tol(kBnBwd));
        check("batchnorm_bwd dgamma", dg, dgr, tol(kBnBwd));
        check("batchnorm_bwd dbeta", db, dbr, tol(kBnBwd));
      }
    }
}

// A block's last BN fused with its residual join: y = max(BN(x) + residual, 0), rounded once;
// against the reference's BN (no ReLU) then add_relu, in f64 on the same rounded inputs.
TEST_P(OpsBackend, BatchNormAddReluFwdTrain) {
  REQUIRE_OP(Op::batchnorm_add_relu);
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(bn_name(s, true));
    BatchNormParams p;  // p.relu is ignored by the fused op: the ReLU follows the add
    Tensor x = rand({s.N, s.C, s.H, s.W}, -0.5, 1.5), res = rand(x.shape());
    Tensor g = rand({s.C}, 0.5, 1.5), b = rand({s.C}, -0.5, 0.5);
    Tensor rm0 = rand({s.C}, -0.2, 0.2), rv0 = rand({s.C}, 0.5, 2);
    Tensor rm = up(rm0, F32, NCHW), rv = up(rv0, F32, NCHW);
    Tensor y = out(x.shape(), dt(), lay()), sm = out({s.C}, F32), sv = out({s.C}, F32);
    be().batchnorm_add_relu_fwd_train(p, up(x, dt(), lay()), up(res, dt(), lay()),
                                      up(g, F32, NCHW), up(b, F32, NCHW), rm, rv, y, sm, sv);
    Tensor rmr = rin(rm0, F32, NCHW), rvr = rin(rv0, F32, NCHW);
    Tensor bn = rout(x.shape()), yr = rout(x.shape()), smr = rout({s.C}), svr = rout({s.C});
    ref().batchnorm_fwd_train(p, rin(x, dt(), lay()), rin(g, F32, NCHW), rin(b, F32, NCHW), rmr,
                              rvr, bn, smr, svr);
    ref().add_relu_fwd(bn, rin(res, dt(), lay()), yr);
    check("batchnorm_add_relu_fwd_train y", y, yr, tol(kBnFwd));
    check("batchnorm_add_relu_fwd_train save_mean", sm, smr, tol(kBnFwd));
    check("batchnorm_add_relu_fwd_train save_var", sv, svr, tol(kBnFwd));
    check("batchnorm_add_relu_fwd_train running_mean", rm, rmr, tol(kBnFwd));
    check("batchnorm_add_relu_fwd_train running_var", rv, rvr, tol(kBnFwd));
  }
}

// Its backward: dres = y > 0 ? g1 + g2 : 0 (g2 given or not), and BN's backward on dres, against
// the reference's add_relu_bwd / relu_bwd then batchnorm_bwd (no ReLU), on the same y.
TEST_P(OpsBackend, BatchNormAddReluBwd) {
  REQUIRE_OP(Op::batchnorm_add_relu);
  for (const BnShape& s : kBnShapes)
    for (bool two_parts : {true, false}) {
      SCOPED_TRACE(bn_name(s, true) + (two_parts ? " g1 + g2" : " g1 only"));
      BatchNormParams p;
      Tensor x = rand({s.N, s.C, s.H, s.W}, -0.5, 1.5), res = rand(x.shape());
      Tensor g = rand({s.C}, 0.5, 1.5), b = rand({s.C}, -0.5, 0.5);
      Tensor g1 = rand(x.shape()), g2 = rand(x.shape());
      // The join's forward on the reference; both sides get the same y and statistics.
      Tensor rm = Tensor::zeros({s.C}, F64), rv = Tensor::zeros({s.C}, F64);
      Tensor bn = rout(x.shape()), y64 = rout(x.shape()), sm64 = rout({s.C}), sv64 = rout({s.C});
      ref().batchnorm_fwd_train(p, rin(x, dt(), NCHW), rin(g, F32, NCHW), rin(b, F32, NCHW), rm,
                                rv, bn, sm64, sv64);
      ref().add_relu_fwd(bn, rin(res, dt(), NCHW), y64);
      Tensor y = host32(y64), sm = host32(sm64), sv = host32(sv64);
      Tensor dres = out(x.shape(), dt(), lay()), dx = out(x.shape(), dt(), lay());
      Tensor dg = out({s.C}, F32), db = out({s.C}, F32);
      be().batchnorm_add_relu_bwd(p, up(x, dt(), lay()), up(y, dt(), lay()),
                                  up(g1, dt(), lay()), two_parts ? up(g2, dt(), lay()) : Tensor(),
                                  up(g, F32, NCHW), up(sm, F32, NCHW), up(sv, F32, NCHW), dres, dx,
                                  dg, db);
      Tensor dresr = rout(x.shape()), dxr = rout(x.shape()), dgr = rout({s.C}), dbr = rout({s.C});
      const Tensor yr = rin(y, dt(), lay());
      if (two_parts)
        ref().add_relu_bwd(yr, rin(g1, dt(), lay()), rin(g2, dt(), lay()), dresr);
      else
        ref().relu_bwd(yr, rin(g1, dt(), lay()), dresr);
      ref().batchnorm_bwd(p, rin(x, dt(), lay()), yr, dresr, rin(g, F32, NCHW),
                          rin(sm, F32, NCHW), rin(sv, F32, NCHW), dxr, dgr, dbr);
      check("batchnorm_add_relu_bwd dres", dres, dresr, tol(kExact1));
      check("batchnorm_add_relu_bwd dx", dx, dxr, tol(kBnBwd));
      check("batchnorm_add_relu_bwd dgamma", dg, dgr, tol(kBnBwd));
      check("batchnorm_add_relu_bwd dbeta", db, dbr, tol(kBnBwd));
    }
}

// The fused forward, then its backward on the forward's y and statistics (g1 + g2, and g1 alone
// in place: dres aliasing g1, as the schedule calls it): a backend may keep state between the two
// (CUDA with RN50_CUDA_BN=cudnn: cuDNN's reserve space), which the backward tests above, on the
// reference's forward, never reach. Against the reference's add_relu_bwd / relu_bwd then
// batchnorm_bwd on exactly the values the backend holds.
TEST_P(OpsBackend, BatchNormAddReluFwdThenBwd) {
  REQUIRE_OP(Op::batchnorm_add_relu);
  for (const BnShape& s : kBnShapes)
    for (bool two_parts : {true, false}) {
      SCOPED_TRACE(bn_name(s, true) + (two_parts ? " g1 + g2" : " g1 only, in place"));
      BatchNormParams p;
      Tensor x = rand({s.N, s.C, s.H, s.W}, -0.5, 1.5), res = rand(x.shape());
      Tensor g = rand({s.C}, 0.5, 1.5), b = rand({s.C}, -0.5, 0.5);
      Tensor g1 = rand(x.shape()), g2 = rand(x.shape());
      Tensor xd = up(x, dt(), lay()), gd = up(g, F32, NCHW), bd = up(b, F32, NCHW);
      Tensor rm = up(rand({s.C}, -0.2, 0.2), F32, NCHW);
      Tensor rv = up(rand({s.C}, 0.5, 2), F32, NCHW);
      Tensor y = out(x.shape(), dt(), lay()), sm = out({s.C}, F32), sv = out({s.C}, F32);
      be().batchnorm_add_relu_fwd_train(p, xd, up(res, dt(), lay()), gd, bd, rm, rv, y, sm, sv);
      const Tensor yh = test::download(be(), y), smh = test::download(be(), sm);
      const Tensor svh = test::download(be(), sv);
      Tensor g1d = up(g1, dt(), lay());
      Tensor dres = two_parts ? out(x.shape(), dt(), lay()) : g1d;
      Tensor dx = out(x.shape(), dt(), lay()), dg = out({s.C}, F32), db = out({s.C}, F32);
      be().batchnorm_add_relu_bwd(p, xd, y, g1d, two_parts ? up(g2, dt(), lay()) : Tensor(), gd,
                                  sm, sv, dres, dx, dg, db);
      Tensor dresr = rout(x.shape()), dxr = rout(x.shape()), dgr = rout({s.C}), dbr = rout({s.C});
      const Tensor yr = convert(yh, F64, lay());
      if (two_parts)
        ref().add_relu_bwd(yr, rin(g1, dt(), lay()), rin(g2, dt(), lay()), dresr);
      else
        ref().relu_bwd(yr, rin(g1, dt(), lay()), dresr);
      ref().batchnorm_bwd(p, rin(x, dt(), lay()), yr, dresr, rin(g, F32, NCHW),
                          convert(smh, F64, NCHW), convert(svh, F64, NCHW), dxr, dgr, dbr);
      check("batchnorm_add_relu_bwd dres", dres, dresr, tol(kExact1));
      check("batchnorm_add_relu_bwd dx", dx, dxr, tol(kBnBwd));
      check("batchnorm_add_relu_bwd dgamma", dg, dgr, tol(kBnBwd));
      check("batchnorm_add_relu_bwd dbeta", db, dbr, tol(kBnBwd));
    }
}

RN50_INSTANTIATE_OPS_BACKEND();

}  // namespace
}  // namespace rn50::test
