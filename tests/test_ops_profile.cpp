// The per-op profile (rn50/profile.h): OpProfiler's exclusive times and merging, the profiling
// backend (results unchanged, ops and FLOPs counted, nothing counted without an active
// profiler), and the oneDNN backend's weight reorders showing as ops of their own.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "rn50/backend.h"
#include "rn50/profile.h"

namespace rn50 {
namespace {

constexpr ProfileOp kOuter{"outer", "fam_a", "fwd"};
constexpr ProfileOp kInner{"inner", "fam_b", "-"};
// A second object with the same name: rows of equal names merge.
constexpr ProfileOp kInnerAgain{"inner", "fam_b", "-"};

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const OpProfiler::Row* row(const std::vector<OpProfiler::Row>& rows, const std::string& op) {
  for (const OpProfiler::Row& r : rows)
    if (r.op == op) return &r;
  return nullptr;
}

// A nested op's time is taken out of the op around it: the rows add up to the wall time.
TEST(OpProfiler, ExclusiveTimesAddUpToTheWallTime) {
  OpProfiler p;
  const auto t0 = std::chrono::steady_clock::now();
  {
    OpProfiler::Activation on(p);
    OpProfiler::Scope outer(kOuter, 100);
    sleep_ms(10);
    {
      OpProfiler::Scope inner(kInner, 7);
      sleep_ms(40);
    }
    {
      OpProfiler::Scope inner(kInnerAgain);
      sleep_ms(40);
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto rows = p.rows();
  ASSERT_EQ(rows.size(), 2u);
  const OpProfiler::Row* in = row(rows, "inner");
  const OpProfiler::Row* out = row(rows, "outer");
  ASSERT_TRUE(in && out);
  EXPECT_EQ(in->calls, 2);
  EXPECT_EQ(out->calls, 1);
  EXPECT_EQ(in->family, "fam_b");
  EXPECT_DOUBLE_EQ(in->flops, 7);
  EXPECT_DOUBLE_EQ(out->flops, 100);
  EXPECT_GE(in->seconds, 0.080);
  EXPECT_GE(out->seconds, 0.010);
  EXPECT_LT(out->seconds, in->seconds) << "the nested 80 ms belong to 'inner'";
  EXPECT_NEAR(p.op_seconds(), wall, 0.005);
  EXPECT_EQ(rows.front().op, "inner") << "longest first";
}

TEST(OpProfiler, NothingIsCountedWithoutAnActiveProfiler) {
  OpProfiler p;
  EXPECT_EQ(OpProfiler::current(), nullptr);
  { OpProfiler::Scope s(kOuter, 1); }
  {
    OpProfiler::Activation on(p);
    EXPECT_EQ(OpProfiler::current(), &p);
    OpProfiler other;
    {
      OpProfiler::Activation inner(other);
      EXPECT_EQ(OpProfiler::current(), &other);
    }
    EXPECT_EQ(OpProfiler::current(), &p) << "the previous profiler comes back";
  }
  EXPECT_EQ(OpProfiler::current(), nullptr);
  EXPECT_TRUE(p.rows().empty());
  EXPECT_THROW(summarize_profile(p), Error) << "no step counted";
}

TEST(OpProfiler, SummaryPerStepAndFamily) {
  OpProfiler p;
  {
    OpProfiler::Activation on(p);
    for (int i = 0; i < 2; ++i) {
      OpProfiler::Scope s(kOuter, 1e9);
      sleep_ms(5);
    }
  }
  p.add_step(0.010);
  p.add_step(0.012);
  const ProfileSummary s = summarize_profile(p);
  EXPECT_EQ(s.steps, 2);
  EXPECT_DOUBLE_EQ(s.step_ms, 11.0);
  ASSERT_EQ(s.ops.size(), 1u);
  EXPECT_DOUBLE_EQ(s.ops[0].calls_per_step, 1.0);
  EXPECT_NEAR(s.ops[0].ms_per_step, s.ops_ms, 1e-12);
  EXPECT_NEAR(s.ops[0].share, s.ops[0].ms_per_step / 11.0, 1e-12);
  // 2e9 operations in at least 10 ms (sleeps may oversleep): at most 200 GFLOP/s.
  EXPECT_GT(s.ops[0].gflops, 0);
  EXPECT_LE(s.ops[0].gflops, 200);
  EXPECT_NEAR(s.ops[0].gflops, 2e9 / (2 * s.ops[0].ms_per_step * 1e-3) / 1e9, 1e-9);
  ASSERT_EQ(s.families.size(), 1u);
  EXPECT_EQ(s.families[0].family, "fam_a");
  const std::string t = profile_table(s, "title");
  EXPECT_NE(t.find("| outer | fam_a | fwd | 1.0 |"), std::string::npos) << t;
  EXPECT_NE(t.find("(between ops: host code)"), std::string::npos) << t;
  const auto ops = profile_ops_json(s);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]["op"], "outer");
  EXPECT_EQ(profile_families_json(s)[0]["family"], "fam_a");
}

// The roofline time of each call is max(FLOP / peak of its precision, bytes / bandwidth);
// a call without a peak for its precision leaves the op (and the step) without one; overhead
// (no precision) asks for no time.
TEST(OpProfiler, RooflineTimesPerOpAndStep) {
  constexpr ProfileOp kCompute{"compute", "conv", "fwd"};
  constexpr ProfileOp kStream{"stream", "batchnorm", "fwd"};
  constexpr ProfileOp kOverhead{"overhead", "reorder", "-"};
  constexpr ProfileOp kOdd{"odd", "qat", "-"};
  Roof roof;
  roof.gflops["fp32"] = 100;  // 1e11 FLOP/s
  roof.gflops["bf16"] = 400;
  roof.gbps = 10;  // 1e10 B/s
  OpProfiler p;
  p.set_roof(roof);
  {
    OpProfiler::Activation on(p);
    { OpProfiler::Scope s(kCompute, 1e9, 1e6, "fp32"); }  // compute-bound: 10 ms
    { OpProfiler::Scope s(kCompute, 4e9, 1e6, "bf16"); }  // compute-bound: 10 ms
    { OpProfiler::Scope s(kStream, 1e6, 2e8, "fp32"); }   // memory-bound: 20 ms
    { OpProfiler::Scope s(kOverhead, 0, 5e8, nullptr); }  // overhead: 0
  }
  p.add_step(1.0);
  auto rows = p.rows();
  EXPECT_NEAR(row(rows, "compute")->roof_seconds, 0.020, 1e-12);
  EXPECT_NEAR(row(rows, "stream")->roof_seconds, 0.020, 1e-12);
  EXPECT_DOUBLE_EQ(row(rows, "overhead")->roof_seconds, 0);
  EXPECT_DOUBLE_EQ(row(rows, "overhead")->bytes, 5e8);
  ProfileSummary s = summarize_profile(p);
  ASSERT_TRUE(s.roof.has_value());
  EXPECT_NEAR(s.roof_ms, 40.0, 1e-9);
  for (const ProfileSummary::Op& o : s.ops) {
    if (o.op == "overhead") {
      EXPECT_DOUBLE_EQ(o.roof_ms, 0);
      EXPECT_LT(o.roof_share, 0) << "no share for what the limits do not ask for";
      EXPECT_GT(o.gbps, 0);
    } else {
      EXPECT_NEAR(o.roof_ms, 20.0, 1e-9) << o.op;
      EXPECT_NEAR(o.roof_share, o.roof_ms / o.ms_per_step, 1e-9 * o.roof_share) << o.op;
    }
  }
  std::string t = profile_table(s, "title");
  EXPECT_NE(t.find("| roof ms | % of roof |"), std::string::npos) << t;
  EXPECT_NE(t.find("the step needs 40.000 ms"), std::string::npos) << t;
  EXPECT_NE(t.find("memory 10.0 GB/s"), std::string::npos) << t;
  nlohmann::ordered_json j = profile_roof_json(s);
  EXPECT_DOUBLE_EQ(j["roof_ms_per_step"].get<double>(), s.roof_ms);
  EXPECT_NEAR(j["roof_share"].get<double>(), s.roof_ms / s.step_ms, 1e-12);
  EXPECT_DOUBLE_EQ(j["peak_gflops"]["bf16"].get<double>(), 400);
  EXPECT_TRUE(profile_ops_json(s)[0].contains("roof_share"));

  // An int8 op with no int8 peak: that op, and so the step, have no roofline time.
  {
    OpProfiler::Activation on(p);
    OpProfiler::Scope odd(kOdd, 1e6, 0, "int8");
  }
  rows = p.rows();
  EXPECT_EQ(row(rows, "odd")->unbounded_calls, 1);
  s = summarize_profile(p);
  EXPECT_LT(s.roof_ms, 0);
  t = profile_table(s, "title");
  EXPECT_NE(t.find("no measured peak"), std::string::npos) << t;
  EXPECT_TRUE(profile_roof_json(s)["roof_ms_per_step"].is_null());

  // Without a roof: no roofline columns, no roofline object.
  OpProfiler plain;
  {
    OpProfiler::Activation on(plain);
    OpProfiler::Scope c(kCompute, 1e9, 1e6, "fp32");
  }
  plain.add_step(0.1);
  const ProfileSummary ps = summarize_profile(plain);
  EXPECT_FALSE(ps.roof.has_value());
  EXPECT_LT(ps.ops[0].roof_ms, 0);
  EXPECT_EQ(profile_table(ps, "t").find("% of roof"), std::string::npos);
  EXPECT_TRUE(profile_roof_json(ps).is_null());
  EXPECT_FALSE(profile_ops_json(ps)[0].contains("roof_share"));
}

Tensor random_tensor(std::vector<int64_t> shape, Layout l, std::mt19937& rng) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32, l);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

// The profiling backend computes what its backend computes, and counts each op with its
// FLOPs; the oneDNN conv's weight reorders (OIHW <-> oneDNN's blocked layout) are their own
// rows, taken out of the conv's time.
TEST(ProfilingBackend, SameResultsOpsAndFlopsCounted) {
  std::mt19937 rng(3);
  auto plain = make_backend("onednn");
  auto prof_be = make_profiling_backend(make_backend("onednn"));
  EXPECT_EQ(prof_be->name(), "onednn");
  EXPECT_EQ(prof_be->capture([] {}), nullptr) << "no graphs: every op runs where it is timed";
  const int64_t N = 2, C = 16, H = 9, W = 9, K = 32;
  const Tensor x = random_tensor({N, C, H, W}, Layout::NHWC, rng);
  const Tensor w = random_tensor({K, C, 3, 3}, Layout::NCHW, rng);
  const Tensor dy = random_tensor({N, K, 5, 5}, Layout::NHWC, rng);
  Conv2dParams cp;
  cp.stride = 2;
  cp.pad = 1;
  Tensor y1 = Tensor::empty({N, K, 5, 5}, DType::f32, Layout::NHWC), y2 = y1.clone();
  Tensor dx1 = Tensor::empty(x.shape(), DType::f32, Layout::NHWC), dx2 = dx1.clone();
  Tensor dw1 = Tensor::empty(w.shape(), DType::f32), dw2 = dw1.clone();
  plain->conv2d_fwd(cp, x, w, y1);
  plain->conv2d_bwd_data(cp, dy, w, dx1);
  plain->conv2d_bwd_weights(cp, x, dy, dw1);
  OpProfiler p;
  {
    OpProfiler::Activation on(p);
    prof_be->conv2d_fwd(cp, x, w, y2);
    prof_be->conv2d_bwd_data(cp, dy, w, dx2);
    prof_be->conv2d_bwd_weights(cp, x, dy, dw2);
    Tensor z = Tensor::empty({N, C, H, W}, DType::f32, Layout::NCHW);
    prof_be->copy(x, z);  // NHWC -> NCHW: a oneDNN reorder
  }
  for (const auto& [a, b] : {std::pair{&y1, &y2}, {&dx1, &dx2}, {&dw1, &dw2}})
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->nbytes()), 0);
  const auto rows = p.rows();
  const double flops = 2.0 * N * K * 5 * 5 * C * 3 * 3;
  for (const char* op : {"conv fwd", "conv bwd_data", "conv bwd_weights"}) {
    const OpProfiler::Row* r = row(rows, op);
    ASSERT_NE(r, nullptr) << op;
    EXPECT_EQ(r->calls, 1) << op;
    EXPECT_DOUBLE_EQ(r->flops, flops) << op;
    EXPECT_EQ(r->family, "conv");
  }
  // Bytes: each tensor the op reads or writes, once.
  EXPECT_DOUBLE_EQ(row(rows, "conv fwd")->bytes, double(x.nbytes() + w.nbytes() + y2.nbytes()));
  EXPECT_DOUBLE_EQ(row(rows, "conv bwd_data")->bytes,
                   double(dy.nbytes() + w.nbytes() + dx2.nbytes()));
  EXPECT_DOUBLE_EQ(row(rows, "conv bwd_weights")->bytes,
                   double(x.nbytes() + dy.nbytes() + dw2.nbytes()));
  EXPECT_EQ(row(rows, "conv bwd_data")->phase, "bwd_data");
  EXPECT_EQ(row(rows, "conv bwd_weights")->phase, "bwd_weights");
  const OpProfiler::Row* copy = row(rows, "copy");
  const OpProfiler::Row* reorder = row(rows, "reorder activations (layout/dtype)");
  ASSERT_TRUE(copy && reorder);
  EXPECT_EQ(reorder->family, "reorder");
  // The layout change is the reorder's work (its bytes), not the copy's around it.
  EXPECT_DOUBLE_EQ(copy->bytes, 0);
  EXPECT_DOUBLE_EQ(reorder->bytes, 2.0 * x.nbytes());
  // oneDNN keeps f32 conv weights in a blocked layout on AVX-512 and AVX2 CPUs: the reorders
  // into it (and of the weight gradient out of it) are rows of their own.
  // The weight gradient comes out of oneDNN's direct conv through such a reorder, or (f32 on
  // CPUs without AVX-512, src/backend/cpu/conv_algo.h) from im2col + matmuls, whose im2col is
  // a row of its own.
  if (row(rows, "reorder conv weights (fwd)")) {
    EXPECT_EQ(row(rows, "reorder conv weights (fwd)")->calls, 1);
    EXPECT_EQ(row(rows, "reorder conv weights (bwd_data)")->calls, 1);
    const OpProfiler::Row* dwre = row(rows, "reorder conv dweights (bwd_weights)");
    const OpProfiler::Row* im2col = row(rows, "im2col activations (conv bwd_weights)");
    ASSERT_TRUE(dwre != nullptr || im2col != nullptr);
    if (dwre != nullptr) EXPECT_EQ(dwre->calls, 1);
    if (im2col != nullptr) EXPECT_GE(im2col->calls, 1);
  }
  // Outside an active profiler the decorator times nothing.
  const size_t n = rows.size();
  prof_be->conv2d_fwd(cp, x, w, y2);
  EXPECT_EQ(p.rows().size(), n);
  EXPECT_EQ(row(p.rows(), "conv fwd")->calls, 1);
}

TEST(ProfilingBackend, LinearFlops) {
  std::mt19937 rng(5);
  auto be = make_profiling_backend(make_backend("onednn"));
  const Tensor x = random_tensor({4, 8}, Layout::NCHW, rng);
  const Tensor w = random_tensor({3, 8}, Layout::NCHW, rng);
  const Tensor b = random_tensor({3}, Layout::NCHW, rng);
  Tensor y = Tensor::empty({4, 3}, DType::f32), dx = Tensor::empty({4, 8}, DType::f32);
  Tensor dw = Tensor::empty({3, 8}, DType::f32), db = Tensor::empty({3}, DType::f32);
  OpProfiler p;
  {
    OpProfiler::Activation on(p);
    be->linear_fwd(x, w, b, y);
    be->linear_bwd(x, w, y, dx, dw, db);
    Tensor none;
    be->linear_bwd(x, w, y, none, dw, db);  // no input gradient: one product
  }
  const auto rows = p.rows();
  EXPECT_DOUBLE_EQ(row(rows, "linear fwd")->flops, 2.0 * 4 * 3 * 8);
  EXPECT_DOUBLE_EQ(row(rows, "linear bwd (data + weights)")->flops, 3 * 2.0 * 4 * 3 * 8);
}

}  // namespace
}  // namespace rn50
