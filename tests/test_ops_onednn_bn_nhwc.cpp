// oneDNN backend: training batch normalisation of NHWC activations in bf16 and in f32, which
// runs our own loops (src/backend/cpu/batchnorm_nhwc.cpp) rather than oneDNN's kernel; every test
// runs for both dtypes. The op harness (test_ops_conv_bn.cpp) checks it on small shapes; here, on
// a shape with many chunks of rows per thread and a mean well away from zero: forward (y, batch
// and running statistics) and backward (dx, dgamma, dbeta) with and without the ReLU against the
// float64 reference, the result identical from call to call (the sums' order does not depend on
// timing), and x / y (dy / dx) given as one buffer (in place) giving the same answer as separate
// buffers; the forward's AVX-512 statistics tiles giving the row loops' bits; and the BN fused
// with a residual join (batchnorm_add_relu_fwd_train) against the reference's BN, add and ReLU
// (and in f32, bit for bit, the two ops), and its backward (batchnorm_add_relu_bwd) against the
// reference and, bit for bit, the two ops.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/batchnorm_nhwc.h"
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "rn50/error.h"
#include "op_backend_fixture.h"
#include "rn50/backend.h"

namespace rn50::test {
namespace {

constexpr DType B16 = DType::bf16;

/// Parameter: the activations' dtype (bf16 or f32).
class BnNhwc : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    dt_ = GetParam();
    if (dt_ == B16 && !onednn::OnednnBackend::bf16_available())
      GTEST_SKIP() << "no bf16 on this CPU";
    be_ = make_backend("onednn");
  }
  Tensor rand(std::vector<int64_t> shape, double lo, double hi) {
    return random_tensor(std::move(shape), rng_, lo, hi, F32, NCHW);
  }
  Tensor out(std::vector<int64_t> shape, DType d, Layout l = NCHW) {
    return nan_output(*be_, std::move(shape), d, l);
  }
  static Tensor rout(std::vector<int64_t> shape) { return Tensor::empty(std::move(shape), F64); }
  void check(const std::string& what, const Tensor& dev, const Tensor& want, Tol t) {
    EXPECT_TRUE(all_close(what, download(*be_, dev), want, t));
  }
  static bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  }
  std::unique_ptr<Backend> be_;
  std::mt19937_64 rng_{7};
  DType dt_ = B16;
};

// N=4, C=48, 30x30: M = 3600 rows, 57 chunks of 64 shared by the threads.
TEST_P(BnNhwc, ForwardAndBackwardMatchTheReference) {
  Backend& ref = ref_backend();
  const std::vector<int64_t> shape{4, 48, 30, 30};
  const int64_t C = shape[1];
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "relu" : "no relu");
    BatchNormParams p;
    p.relu = relu;
    Tensor x = rand(shape, 2.0, 6.0), dy = rand(shape, -1, 1);  // mean 4, spread 2
    Tensor g = rand({C}, 0.5, 1.5), b = rand({C}, -0.5, 0.5);
    Tensor rm0 = rand({C}, -0.2, 0.2), rv0 = rand({C}, 0.5, 2);
    Tensor rm = upload(*be_, rm0, F32, NCHW), rv = upload(*be_, rv0, F32, NCHW);
    Tensor xd = upload(*be_, x, dt_, NHWC), gd = upload(*be_, g, F32, NCHW);
    Tensor y = out(shape, dt_, NHWC), sm = out({C}, F32), sv = out({C}, F32);
    be_->batchnorm_fwd_train(p, xd, gd, upload(*be_, b, F32, NCHW), rm, rv, y, sm, sv);
    Tensor rmr = ref_input(rm0, F32, NCHW), rvr = ref_input(rv0, F32, NCHW);
    Tensor yr = rout(shape), smr = rout({C}), svr = rout({C});
    ref.batchnorm_fwd_train(p, ref_input(x, dt_, NHWC), ref_input(g, F32, NCHW),
                            ref_input(b, F32, NCHW), rmr, rvr, yr, smr, svr);
    const Tol fwd = for_dtype(kBnFwd, dt_);
    check("y", y, yr, fwd);
    // The statistics are f32 sums of exact values: held to f32 tolerances.
    check("save_mean", sm, smr, kBnFwd);
    check("save_var", sv, svr, kBnFwd);
    check("running_mean", rm, rmr, kBnFwd);
    check("running_var", rv, rvr, kBnFwd);

    Tensor dyd = upload(*be_, dy, dt_, NHWC);
    Tensor dx = out(shape, dt_, NHWC), dg = out({C}, F32), db = out({C}, F32);
    be_->batchnorm_bwd(p, xd, y, dyd, gd, sm, sv, dx, dg, db);
    // The reference gets the backend's own forward results (y rounded to dt_, statistics).
    Tensor dxr = rout(shape), dgr = rout({C}), dbr = rout({C});
    ref.batchnorm_bwd(p, ref_input(x, dt_, NHWC), convert(download(*be_, y), F64, NHWC),
                      ref_input(dy, dt_, NHWC), ref_input(g, F32, NCHW),
                      convert(download(*be_, sm), F64), convert(download(*be_, sv), F64), dxr, dgr,
                      dbr);
    const Tol bwd = for_dtype(kBnBwd, dt_);
    check("dx", dx, dxr, bwd);
    check("dgamma", dg, dgr, kBnBwd);
    check("dbeta", db, dbr, kBnBwd);

    // Again: bit for bit the same.
    Tensor y2 = out(shape, dt_, NHWC), dx2 = out(shape, dt_, NHWC);
    Tensor sm2 = out({C}, F32), sv2 = out({C}, F32);
    Tensor dg2 = out({C}, F32), db2 = out({C}, F32);
    be_->batchnorm_fwd_train(p, xd, gd, upload(*be_, b, F32, NCHW), rm, rv, y2, sm2, sv2);
    be_->batchnorm_bwd(p, xd, y2, dyd, gd, sm2, sv2, dx2, dg2, db2);
    EXPECT_TRUE(same_bytes(y, y2) && same_bytes(sm, sm2) && same_bytes(sv, sv2));
    EXPECT_TRUE(same_bytes(dx, dx2) && same_bytes(dg, dg2) && same_bytes(db, db2));
  }
}

TEST_P(BnNhwc, InPlaceEqualsOutOfPlace) {
  const std::vector<int64_t> shape{2, 32, 9, 11};
  const int64_t C = shape[1];
  BatchNormParams p;
  p.relu = true;
  Tensor x = rand(shape, -1, 2), dy = rand(shape, -1, 1), g = rand({C}, 0.5, 1.5);
  Tensor b = rand({C}, -0.5, 0.5), r0 = rand({C}, 0.5, 1);
  Tensor gd = upload(*be_, g, F32, NCHW), bd = upload(*be_, b, F32, NCHW);
  auto stats = [&] { return upload(*be_, r0, F32, NCHW); };
  // Out of place.
  Tensor xd = upload(*be_, x, dt_, NHWC), y = out(shape, dt_, NHWC);
  Tensor sm = out({C}, F32), sv = out({C}, F32), rm = stats(), rv = stats();
  be_->batchnorm_fwd_train(p, xd, gd, bd, rm, rv, y, sm, sv);
  Tensor dyd = upload(*be_, dy, dt_, NHWC), dx = out(shape, dt_, NHWC);
  Tensor dg = out({C}, F32), db = out({C}, F32);
  be_->batchnorm_bwd(p, xd, y, dyd, gd, sm, sv, dx, dg, db);
  // In place: y written over x's buffer (a copy of x kept for the backward), dx over dy's.
  Tensor buf = upload(*be_, x, dt_, NHWC), xkeep = upload(*be_, x, dt_, NHWC);
  Tensor sm2 = out({C}, F32), sv2 = out({C}, F32), rm2 = stats(), rv2 = stats();
  be_->batchnorm_fwd_train(p, buf, gd, bd, rm2, rv2, buf, sm2, sv2);
  EXPECT_TRUE(same_bytes(buf, y)) << "in-place forward";
  Tensor gbuf = upload(*be_, dy, dt_, NHWC);
  Tensor dg2 = out({C}, F32), db2 = out({C}, F32);
  be_->batchnorm_bwd(p, xkeep, buf, gbuf, gd, sm2, sv2, gbuf, dg2, db2);
  EXPECT_TRUE(same_bytes(gbuf, dx)) << "in-place backward";
  EXPECT_TRUE(same_bytes(dg2, dg) && same_bytes(db2, db));
}

/// Element type T's value of an f32 (bf16: the bits, rounded to nearest even).
template <class T>
T to_elem(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return float_to_bf16(v);
}

/// The forward of bn_nhwc_fwd_train<T> with the AVX-512 tiles and with the row loops, on random
/// M x C data with and without a residual: the same statistics and y, bit for bit.
template <class T>
void expect_tiles_give_the_row_loops_bits(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(2.f, 6.f), z(-2.f, 2.f);
  for (int64_t C : {16, 32, 64, 96, 160, 2048}) {
    const int64_t M = 3 * 64 + 17;
    std::vector<T> x(static_cast<size_t>(M * C)), r(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = to_elem<T>(u(rng));
      r[i] = to_elem<T>(z(rng));
    }
    std::vector<float> g(static_cast<size_t>(C)), b(g.size());
    for (size_t c = 0; c < g.size(); ++c) {
      g[c] = 0.5f + u(rng) / 6;
      b[c] = z(rng) / 4;
    }
    for (const T* res : {static_cast<const T*>(nullptr), std::as_const(r).data()}) {
      SCOPED_TRACE("C " + std::to_string(C) + (res ? " with residual" : ""));
      std::vector<T> y1(x.size()), y2(x.size());
      std::vector<float> m1(g.size()), v1(g.size()), m2(g.size()), v2(g.size());
      onednn::bn_nhwc_fwd_train(x.data(), res, y1.data(), M, C, g.data(), b.data(), 1e-5f, true,
                                m1.data(), v1.data(), onednn::BnLoops::fastest);
      onednn::bn_nhwc_fwd_train(x.data(), res, y2.data(), M, C, g.data(), b.data(), 1e-5f, true,
                                m2.data(), v2.data(), onednn::BnLoops::portable);
      EXPECT_EQ(m1, m2);
      EXPECT_EQ(v1, v2);
      EXPECT_EQ(y1, y2);
    }
  }
}

// The forward's statistics in AVX-512 tiles (C a multiple of the vector's 32 bf16 or 16 f32
// channels: 4-vector tiles, then single vectors) add each channel's terms in the row loops'
// order: the same bits, with and without a residual, over whole and partial chunks of rows.
TEST_P(BnNhwc, TiledStatisticsGiveTheRowLoopsBits) {
  if (dt_ == B16)
    expect_tiles_give_the_row_loops_bits<uint16_t>(rng_);
  else
    expect_tiles_give_the_row_loops_bits<float>(rng_);
}

// y = max(BN(x) + residual, 0) in one pass, rounded once: against the reference's batch norm,
// add and ReLU in float64 (statistics and running statistics as batchnorm_fwd_train's). In f32
// (nothing rounded between the BN and the add) the same bits as the two ops; in bf16 the two ops
// round BN(x) first. y may not be the residual's buffer. NCHW has no fused kernel.
TEST_P(BnNhwc, FusedResidualJoinMatchesTheReference) {
  ASSERT_TRUE(be_->supports(Op::batchnorm_add_relu, dt_, NHWC));
  EXPECT_FALSE(be_->supports(Op::batchnorm_add_relu, dt_, NCHW));
  Backend& ref = ref_backend();
  const std::vector<int64_t> shape{4, 64, 10, 12};
  const int64_t C = shape[1];
  BatchNormParams p;  // p.relu is ignored: the ReLU follows the add
  Tensor x = rand(shape, 2.0, 6.0), res = rand(shape, -2, 2);
  Tensor g = rand({C}, 0.5, 1.5), b = rand({C}, -0.5, 0.5);
  Tensor rm0 = rand({C}, -0.2, 0.2), rv0 = rand({C}, 0.5, 2);
  Tensor rm = upload(*be_, rm0, F32, NCHW), rv = upload(*be_, rv0, F32, NCHW);
  Tensor xd = upload(*be_, x, dt_, NHWC), zd = upload(*be_, res, dt_, NHWC);
  Tensor gd = upload(*be_, g, F32, NCHW), bd = upload(*be_, b, F32, NCHW);
  Tensor y = out(shape, dt_, NHWC), sm = out({C}, F32), sv = out({C}, F32);
  be_->batchnorm_add_relu_fwd_train(p, xd, zd, gd, bd, rm, rv, y, sm, sv);
  Tensor rmr = ref_input(rm0, F32, NCHW), rvr = ref_input(rv0, F32, NCHW);
  Tensor yr = rout(shape), smr = rout({C}), svr = rout({C});
  ref.batchnorm_fwd_train(p, ref_input(x, dt_, NHWC), ref_input(g, F32, NCHW),
                          ref_input(b, F32, NCHW), rmr, rvr, yr, smr, svr);
  ref.add_relu_fwd(yr, ref_input(res, dt_, NHWC), yr);
  check("y", y, yr, for_dtype(kBnFwd, dt_));
  check("save_mean", sm, smr, kBnFwd);
  check("save_var", sv, svr, kBnFwd);
  check("running_mean", rm, rmr, kBnFwd);
  check("running_var", rv, rvr, kBnFwd);
  EXPECT_THROW(be_->batchnorm_add_relu_fwd_train(p, xd, zd, gd, bd, rm, rv, zd, sm, sv), Error);

  // The two ops: the same statistics, and in f32 the same y.
  Tensor y2 = out(shape, dt_, NHWC), sm2 = out({C}, F32), sv2 = out({C}, F32);
  Tensor rm2 = upload(*be_, rm0, F32, NCHW), rv2 = upload(*be_, rv0, F32, NCHW);
  be_->batchnorm_fwd_train(p, xd, gd, bd, rm2, rv2, y2, sm2, sv2);
  be_->add_relu_fwd(y2, zd, y2);
  EXPECT_TRUE(same_bytes(sm, sm2) && same_bytes(sv, sv2));
  EXPECT_TRUE(same_bytes(rm, rm2) && same_bytes(rv, rv2));
  if (dt_ == F32) {
    EXPECT_TRUE(same_bytes(y, y2));
  }
}

// The join's ReLU backward and the BN's in one: dres = y > 0 ? g1 + g2 : 0 (or g1 alone),
// rounded once, and dx, dgamma, dbeta of batchnorm_bwd on it. Against the reference in float64
// (fed the backend's own forward results), and bit for bit against add_relu_bwd / relu_bwd
// then batchnorm_bwd (but for the sign of relu_bwd's masked zeros); dres in g1's buffer (in
// place) gives the same bits; dx in g2's or dres's buffer is refused.
TEST_P(BnNhwc, FusedResidualJoinBackwardMatchesTheReferenceAndTheTwoOps) {
  Backend& ref = ref_backend();
  const std::vector<int64_t> shape{4, 64, 10, 12};  // 480 rows: 8 chunks
  const int64_t C = shape[1];
  BatchNormParams p;
  Tensor x = rand(shape, 2.0, 6.0), res = rand(shape, -2, 2);
  Tensor g = rand({C}, 0.5, 1.5), b = rand({C}, -0.5, 0.5);
  Tensor xd = upload(*be_, x, dt_, NHWC), zd = upload(*be_, res, dt_, NHWC);
  Tensor gd = upload(*be_, g, F32, NCHW), bd = upload(*be_, b, F32, NCHW);
  Tensor rm = upload(*be_, rand({C}, -0.2, 0.2), F32, NCHW);
  Tensor rv = upload(*be_, rand({C}, 0.5, 2), F32, NCHW);
  Tensor y = out(shape, dt_, NHWC), sm = out({C}, F32), sv = out({C}, F32);
  be_->batchnorm_add_relu_fwd_train(p, xd, zd, gd, bd, rm, rv, y, sm, sv);
  const Tensor yr = convert(download(*be_, y), F64, NHWC);
  const Tensor smr = convert(download(*be_, sm), F64), svr = convert(download(*be_, sv), F64);
  for (bool two : {true, false}) {
    SCOPED_TRACE(two ? "two gradient parts" : "one gradient part");
    Tensor g1 = rand(shape, -1, 1), g2 = rand(shape, -1, 1);
    Tensor g1d = upload(*be_, g1, dt_, NHWC);
    Tensor g2d = two ? upload(*be_, g2, dt_, NHWC) : Tensor();
    Tensor dres = out(shape, dt_, NHWC), dx = out(shape, dt_, NHWC);
    Tensor dg = out({C}, F32), db = out({C}, F32);
    be_->batchnorm_add_relu_bwd(p, xd, y, g1d, g2d, gd, sm, sv, dres, dx, dg, db);

    Tensor dresr = rout(shape), dxr = rout(shape), dgr = rout({C}), dbr = rout({C});
    if (two)
      ref.add_relu_bwd(yr, ref_input(g1, dt_, NHWC), ref_input(g2, dt_, NHWC), dresr);
    else
      ref.relu_bwd(yr, ref_input(g1, dt_, NHWC), dresr);
    check("dres", dres, dresr, for_dtype(kExact1, dt_));
    // The BN part gets the backend's dres (rounded to dt_), as batchnorm_bwd's test gets dy.
    ref.batchnorm_bwd(p, ref_input(x, dt_, NHWC), Tensor(),
                      convert(download(*be_, dres), F64, NHWC), ref_input(g, F32, NCHW), smr, svr,
                      dxr, dgr, dbr);
    check("dx", dx, dxr, for_dtype(kBnBwd, dt_));
    check("dgamma", dg, dgr, kBnBwd);
    check("dbeta", db, dbr, kBnBwd);

    // The separate ops: the same bits.
    Tensor dres2 = out(shape, dt_, NHWC), dx2 = out(shape, dt_, NHWC);
    Tensor dg2 = out({C}, F32), db2 = out({C}, F32);
    if (two)
      be_->add_relu_bwd(y, g1d, g2d, dres2);
    else
      be_->relu_bwd(y, g1d, dres2);
    be_->batchnorm_bwd(p, xd, Tensor(), dres2, gd, sm, sv, dx2, dg2, db2);
    // The same values; bit for bit but for the sign of a masked zero (oneDNN's relu_bwd gives
    // dy * 0, -0 for a negative dy; the fused op and add_relu_bwd give +0).
    if (two) {
      EXPECT_TRUE(same_bytes(dres, dres2));
    }
    check("dres vs the separate ops", dres, convert(download(*be_, dres2), F64, NHWC), kCopy);
    EXPECT_TRUE(same_bytes(dx, dx2) && same_bytes(dg, dg2) && same_bytes(db, db2));

    // In place: dres in g1's buffer.
    Tensor g1d2 = upload(*be_, g1, dt_, NHWC), dx3 = out(shape, dt_, NHWC);
    be_->batchnorm_add_relu_bwd(p, xd, y, g1d2, g2d, gd, sm, sv, g1d2, dx3, dg2, db2);
    EXPECT_TRUE(same_bytes(g1d2, dres) && same_bytes(dx3, dx));
    EXPECT_TRUE(same_bytes(dg, dg2) && same_bytes(db, db2));
    EXPECT_THROW(be_->batchnorm_add_relu_bwd(p, xd, y, g1d, g2d, gd, sm, sv, dres, dres, dg, db),
                 Error);
    if (two) {
      EXPECT_THROW(be_->batchnorm_add_relu_bwd(p, xd, y, g1d, g2d, gd, sm, sv, dres, g2d, dg, db),
                   Error);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BnNhwc, ::testing::Values(DType::bf16, DType::f32),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

}  // namespace
}  // namespace rn50::test
