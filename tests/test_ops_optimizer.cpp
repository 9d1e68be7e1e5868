// Op harness (see op_backend_fixture.h), the optimiser and AMP step ops: sgd_update on f32 slabs
// (momentum, weight decay over a prefix, gradient scale; the mask and the half-precision compute
// copy; lr and loss scale read from the device step state, and the skip on found_inf), pure fp16
// SGD against an oracle written out here (on "ref" too), check_finite and update_loss_scale
// against torch GradScaler semantics. Every backend but "ref" against "ref".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "op_backend_fixture.h"
#include "rn50/backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::test {
namespace {

// ---------------------------------------------------------------- optimiser

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

// bf16 gradients with f32 slabs (CPU AMP's optimiser reads the conv/fc gradients as backward
// wrote them): the same bits as the update from the exactly widened f32 gradients, mask and
// compute copy included; a backend that does not say it takes them refuses them.
TEST_P(OpsBackend, SgdUpdateBf16GradsEqualWidenedF32) {
  REQUIRE_F32("sgd_update");
  REQUIRE_OP(Op::sgd);
  const int64_t n = 6007;
  SgdParams sp;
  sp.lr = 0.256f;
  sp.decay_count = 3001;
  sp.grad_scale = 1.f / 8;
  Tensor p0 = rand({n}), b0 = rand({n});
  Tensor pa = up(p0, F32, NCHW), ba = up(b0, F32, NCHW);
  if (!be().sgd_takes_bf16_grads()) {
    Tensor g16 = up(rand({n}, -8, 8), DType::bf16, NCHW);
    EXPECT_THROW(be().sgd_update(sp, pa, g16, ba), Error)
        << "a backend whose sgd_takes_bf16_grads() is false refuses bf16 gradients";
    return;
  }
  Tensor pb = up(p0, F32, NCHW), bb = up(b0, F32, NCHW);
  Tensor mask = Tensor::empty({n}, DType::u8);
  std::mt19937_64 mg(5);
  for (int64_t i = 0; i < n; ++i) mask.data_as<uint8_t>()[i] = (mg() % 4) < 2 ? 0 : 1;
  sp.mask = up(mask, DType::u8, NCHW);
  SgdParams spb = sp;
  sp.compute_copy = be().alloc({n}, DType::bf16, NCHW);
  spb.compute_copy = be().alloc({n}, DType::bf16, NCHW);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Tensor g16 = up(rand({n}, -8, 8), DType::bf16, NCHW);
    Tensor g32 = be().alloc({n}, F32, NCHW);
    be().copy(g16, g32);  // bf16 -> f32 is exact
    be().sgd_update(sp, pa, g16, ba);
    be().sgd_update(spb, pb, g32, bb);
    check("sgd params (bf16 grads)", pa, test::download(be(), pb), kCopy);
    check("sgd momentum_buf (bf16 grads)", ba, test::download(be(), bb), kCopy);
    check("sgd compute copy (bf16 grads)", sp.compute_copy,
          test::download(be(), spb.compute_copy), kCopy);
  }
  EXPECT_THROW(be().sgd_update(sp, pa, up(rand({n}), DType::f16, NCHW), ba), Error)
      << "f16 gradients with f32 slabs";
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

// load_step_inputs against its definition (rn50/backend.h), written out here: a 3-row ring read
// 7 times from row 0 wraps twice; the other fields of the state are untouched; the host may
// rewrite a row once the step that read it has run. A ring that is not (R, 2) f32 is refused.
TEST_P(OpsBackend, LoadStepInputsWalksTheRing) {
  constexpr int64_t kRows = 3;
  Tensor ring = be().alloc_host({kRows, 2}, F32);
  Tensor st = up(step_state(0.f, 256.f), F32, NCHW);
  for (int step = 0; step < 7; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const int64_t row = step % kRows;
    ring.data_as<float>()[2 * row] = 0.01f * static_cast<float>(step + 1);
    ring.data_as<float>()[2 * row + 1] = 0.125f * static_cast<float>(step);
    be().load_step_inputs(ring, st);
    const Tensor h = state_host(st);  // waits for the device: the row may be rewritten next
    const float* s = h.data_as<float>();
    EXPECT_EQ(s[StepState::lr], 0.01f * static_cast<float>(step + 1));
    EXPECT_EQ(s[StepState::mixup_lambda], 0.125f * static_cast<float>(step));
    EXPECT_EQ(s[StepState::ring_pos], static_cast<float>((step + 1) % kRows));
    EXPECT_EQ(s[StepState::loss_scale], 256.f);
    EXPECT_EQ(s[StepState::inv_loss_scale], 1.f / 256.f);
  }
  Tensor bad = be().alloc_host({kRows, 3}, F32);
  EXPECT_THROW(be().load_step_inputs(bad, st), Error);
  Tensor on_device = be().alloc({kRows, 2}, F32);
  if (!on_device.is_cpu()) {
    EXPECT_THROW(be().load_step_inputs(on_device, st), Error);
  }
}

RN50_INSTANTIATE_OPS_BACKEND();

}  // namespace
}  // namespace rn50::test
