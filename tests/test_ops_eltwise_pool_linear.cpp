// Op harness (see op_backend_fixture.h), elementwise ops, pooling and the linear layer: relu
// forward and backward, add and add_relu (forward and backward, also in place), inputs and
// outputs in mixed layouts, max pooling (forward and backward, no ties; the backward also after
// the backend's own forward) and global average pooling, linear forward and backward (also
// without dx). Every backend but "ref" against "ref".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "op_backend_fixture.h"
#include "rn50/backend.h"

namespace rn50::test {
namespace {

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
    {1, 80, 8, 8, {3, 2, 1}},   // two channel blocks, the second partial
    {1, 80, 7, 9, {2, 3, 0}},   // stride above the kernel: rows 2, 5 and 6 get no gradient
};

/// Host f32 tensor of distinct values (a shuffled ramp, exact in f32): max pooling has no ties.
Tensor distinct_values(std::vector<int64_t> shape, std::mt19937_64& rng) {
  Tensor x = Tensor::empty(std::move(shape), F32);
  std::vector<float> ramp(static_cast<size_t>(x.numel()));
  for (size_t i = 0; i < ramp.size(); ++i)
    ramp[i] = (static_cast<float>(i) - static_cast<float>(ramp.size() / 2)) / 1024.f;
  std::shuffle(ramp.begin(), ramp.end(), rng);
  std::copy(ramp.begin(), ramp.end(), x.data_as<float>());
  return x;
}

TEST_P(OpsBackend, MaxPool) {
  REQUIRE_OP(Op::maxpool2d);
  for (const PoolCase& pc : kPoolCases) {
    const Pool2dParams& p = pc.p;
    SCOPED_TRACE(::testing::Message() << "(" << pc.N << "," << pc.C << "," << pc.H << "," << pc.W
                                      << ") k" << p.kernel << " s" << p.stride << " p" << p.pad);
    const int64_t OH = (pc.H + 2 * p.pad - p.kernel) / p.stride + 1;
    const int64_t OW = (pc.W + 2 * p.pad - p.kernel) / p.stride + 1;
    const Tensor x = distinct_values({pc.N, pc.C, pc.H, pc.W}, rng_);
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

// The backend's own forward, then its backward on the same x and on the forward's y (where a
// backend may read argmax indices its forward saved: CUDA's RN50_CUDA_MAXPOOL_BWD=indices), and
// again on a copy of y (where it must not), each against the reference backward.
TEST_P(OpsBackend, MaxPoolFwdThenBwd) {
  REQUIRE_OP(Op::maxpool2d);
  for (const PoolCase& pc : kPoolCases) {
    const Pool2dParams& p = pc.p;
    SCOPED_TRACE(::testing::Message() << "(" << pc.N << "," << pc.C << "," << pc.H << "," << pc.W
                                      << ") k" << p.kernel << " s" << p.stride << " p" << p.pad);
    const int64_t OH = (pc.H + 2 * p.pad - p.kernel) / p.stride + 1;
    const int64_t OW = (pc.W + 2 * p.pad - p.kernel) / p.stride + 1;
    const Tensor x = distinct_values({pc.N, pc.C, pc.H, pc.W}, rng_);
    const Tensor xd = up(x, dt(), lay());
    Tensor y = out({pc.N, pc.C, OH, OW}, dt(), lay());
    be().maxpool2d_fwd(p, xd, y);
    const Tensor yh = test::download(be(), y), dy = rand(y.shape());
    const Tensor dyd = up(dy, dt(), lay()), y_copy = up(yh, dt(), lay());
    Tensor dxr = rout(x.shape());
    ref().maxpool2d_bwd(p, rin(x, dt(), lay()), convert(yh, F64, lay()), rin(dy, dt(), lay()),
                        dxr);
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(r == 0 ? "the forward's y" : "a copy of y");
      Tensor dx = out(x.shape(), dt(), lay());
      be().maxpool2d_bwd(p, xd, r == 0 ? y : y_copy, dyd, dx);
      check("maxpool2d_bwd dx", dx, dxr, tol(kMaxPoolBwd));
    }
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

RN50_INSTANTIATE_OPS_BACKEND();

}  // namespace
}  // namespace rn50::test
