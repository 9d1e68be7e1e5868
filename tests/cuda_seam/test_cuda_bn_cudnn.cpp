// RN50_CUDA_BN=cudnn on the link-seam stubs (see test_cuda_host_calls.cpp for the seam;
// cuda_stubs_bn.h for what the BN stubs record): the host logic of training batch norm on cuDNN
// (src/backend/cuda/batchnorm_cudnn.cpp). What it holds the backend to:
//  * unset or "own", no cudnnBatchNormalization* call is made (our kernels run);
//  * "cudnn" on NHWC f16/bf16 with C % 4 == 0: the training forward is one
//    cudnnBatchNormalizationForwardTrainingEx in SPATIAL_PERSISTENT mode with bnOps BN,
//    BN_ACTIVATION (a ReLU descriptor) or BN_ADD_ACTIVATION (the residual as z), p.eps as epsilon,
//    p.momentum as exponentialAverageFactor, save_mean as resultSaveMean, a workspace and a
//    reserve space at least as large as the getters reported (in buffers that large), then the
//    kernel that fills save_var from cuDNN's inverse std, and none of our BN kernels; the
//    backward is one cudnnBatchNormalizationBackwardEx with the same op, the forward's reserve
//    space, inverse std and beta, writing dx, dgamma, dbeta (and dz = dres for the join, from a
//    dy that is g1 + g2, or g1 copied away when dres aliases it);
//  * NCHW, f32, C % 4 != 0, and a backward without its forward's state (another save_mean, or
//    a copy of y with the ReLU) run our kernels;
//  * supports(Op::batchnorm_add_relu) claims exactly the configurations whose fused op runs
//    cuDNN's BN_ADD_ACTIVATION (and an odd C still runs fused, on our kernels);
//  * a training step with it still replays as one cudaGraphLaunch, with cuDNN's BN calls inside
//    the capture and no allocation there;
//  * any other value is refused by name.
// Test names contain HostCalls (--gtest_filter='*HostCalls*').
#include <cudnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cuda_stubs.h"
#include "cuda_stubs_bn.h"
#include "host_calls_util.h"
#include "model/input_stage.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "step_test_util.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

using cuda_stub::BnCall;
using cuda_stub::count;
using cuda_stub::count_in_capture;
using cuda_stub::StubCall;
using namespace seam_test;

const char kFwd[] = "cudnnBatchNormalizationForwardTrainingEx";
const char kBwd[] = "cudnnBatchNormalizationBackwardEx";

/// RN50_CUDA_BN set to `v` (unset when null) for the scope.
struct BnEnv : ScopedEnv {
  explicit BnEnv(const char* v) : ScopedEnv("RN50_CUDA_BN", v) {}
};

/// The BN calls of function `fn` in `bs`.
std::vector<BnCall> of(const std::vector<BnCall>& bs, const std::string& fn) {
  std::vector<BnCall> out;
  for (const BnCall& b : bs)
    if (b.fn == fn) out.push_back(b);
  return out;
}

/// The size the getter `fn` reported last for `ops`, and whether it was asked.
size_t last_size(const std::string& fn, int ops, bool* asked = nullptr) {
  const auto qs = cuda_stub::bn_size_queries();
  for (auto it = qs.rbegin(); it != qs.rend(); ++it)
    if (it->fn == fn && it->ops == ops) {
      if (asked) *asked = true;
      return it->bytes;
    }
  if (asked) *asked = false;
  return 0;
}

/// One BatchNorm layer's buffers: activations (shape, dtype, layout) and f32 (C) vectors.
struct Layer {
  std::unique_ptr<Backend>& be;
  Tensor x, res, y, g1, g2, dres, dx;
  Tensor gamma, beta, rm, rv, sm, sv, dg, db;
  Layer(std::unique_ptr<Backend>& b, const std::vector<int64_t>& shape, DType dt, Layout l)
      : be(b) {
    auto act = [&] { return be->alloc(shape, dt, l); };
    auto vec = [&] { return be->alloc({shape[1]}, DType::f32, Layout::NCHW); };
    x = act(), res = act(), y = act(), g1 = act(), g2 = act(), dres = act(), dx = act();
    gamma = vec(), beta = vec(), rm = vec(), rv = vec(), sm = vec(), sv = vec();
    dg = vec(), db = vec();
  }
};

/// What one layer does: BN, BN + ReLU, or BN + residual join + ReLU (with g2 or without, then
/// in place: dres aliasing g1, as the schedule calls it).
enum class Kind { bn, bn_relu, join_g2, join_in_place };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::bn: return "bn";
    case Kind::bn_relu: return "bn+relu";
    case Kind::join_g2: return "bn+add+relu, g1 + g2";
    case Kind::join_in_place: return "bn+add+relu, dres aliasing g1";
  }
  return "?";
}
int expected_ops(Kind k) {
  switch (k) {
    case Kind::bn: return CUDNN_BATCHNORM_OPS_BN;
    case Kind::bn_relu: return CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
    default: return CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  }
}

void forward(Layer& L, Kind k, const BatchNormParams& p0) {
  BatchNormParams p = p0;
  p.relu = k == Kind::bn_relu;
  if (k == Kind::join_g2 || k == Kind::join_in_place)
    L.be->batchnorm_add_relu_fwd_train(p, L.x, L.res, L.gamma, L.beta, L.rm, L.rv, L.y, L.sm,
                                       L.sv);
  else
    L.be->batchnorm_fwd_train(p, L.x, L.gamma, L.beta, L.rm, L.rv, L.y, L.sm, L.sv);
}

void backward(Layer& L, Kind k, const BatchNormParams& p0, const Tensor* y_other = nullptr) {
  BatchNormParams p = p0;
  p.relu = k == Kind::bn_relu;
  const Tensor& y = y_other ? *y_other : L.y;
  switch (k) {
    case Kind::bn:  // as the schedule: no y without a ReLU
      L.be->batchnorm_bwd(p, L.x, Tensor(), L.g1, L.gamma, L.sm, L.sv, L.dx, L.dg, L.db);
      break;
    case Kind::bn_relu:
      L.be->batchnorm_bwd(p, L.x, y, L.g1, L.gamma, L.sm, L.sv, L.dx, L.dg, L.db);
      break;
    case Kind::join_g2:
      L.be->batchnorm_add_relu_bwd(p, L.x, y, L.g1, L.g2, L.gamma, L.sm, L.sv, L.dres, L.dx,
                                   L.dg, L.db);
      break;
    case Kind::join_in_place:
      L.be->batchnorm_add_relu_bwd(p, L.x, y, L.g1, Tensor(), L.gamma, L.sm, L.sv, L.g1, L.dx,
                                   L.dg, L.db);
      break;
  }
}

/// Our BN kernels (batchnorm.cu) launched in `cs`.
int own_bn_kernels(const std::vector<StubCall>& cs) {
  const auto k = kernel_names(cs);
  return count_named(k, "bn_fwd_stats") + count_named(k, "bn_fwd_apply") +
         count_named(k, "bn_bwd_stats") + count_named(k, "bn_bwd_apply");
}

const Kind kKinds[] = {Kind::bn, Kind::bn_relu, Kind::join_g2, Kind::join_in_place};

TEST(CudaBnCudnnHostCalls, OwnMakesNoCudnnBatchNormCall) {
  for (const char* v : {static_cast<const char*>(nullptr), "own"}) {
    SCOPED_TRACE(v ? v : "unset");
    BnEnv env(v);
    auto be = make_backend("cuda");
    Layer L(be, {4, 64, 8, 8}, DType::f16, Layout::NHWC);
    const size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
    for (Kind k : kKinds) {
      forward(L, k, {});
      backward(L, k, {});
    }
    const std::vector<StubCall> cs = cuda_stub::calls(c0);
    EXPECT_EQ(cuda_stub::num_bn_calls(), b0);
    EXPECT_EQ(count(cs, kFwd) + count(cs, kBwd), 0) << dump(cs);
    EXPECT_GT(own_bn_kernels(cs), 0);
    // And it does not claim cuDNN's fused join.
    EXPECT_FALSE(be->supports(Op::batchnorm_add_relu, DType::f16, Layout::NHWC));
  }
}

TEST(CudaBnCudnnHostCalls, TrainingRunsCudnnWithTheLayersState) {
  BnEnv env("cudnn");
  const int64_t N = 4, C = 64, H = 8, W = 6;
  BatchNormParams p;
  p.eps = 1e-3;        // not the defaults: the calls must carry these
  p.momentum = 0.25;
  for (DType dt : {DType::f16, DType::bf16})
    for (Kind k : kKinds) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + kind_name(k));
      auto be = make_backend("cuda");
      Layer L(be, {N, C, H, W}, dt, Layout::NHWC);
      const int ops = expected_ops(k);
      const bool act = ops != CUDNN_BATCHNORM_OPS_BN;
      const bool join = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;

      // ---- forward
      size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
      forward(L, k, p);
      std::vector<StubCall> cs = cuda_stub::calls(c0);
      std::vector<BnCall> bs = cuda_stub::bn_calls(b0);
      ASSERT_EQ(of(bs, kFwd).size(), 1u) << dump(cs, true);
      EXPECT_EQ(of(bs, kBwd).size(), 0u);
      const BnCall f = of(bs, kFwd)[0];
      EXPECT_EQ(f.mode, CUDNN_BATCHNORM_SPATIAL_PERSISTENT);
      EXPECT_EQ(f.ops, ops);
      EXPECT_EQ(f.eps, p.eps);
      EXPECT_EQ(f.factor, p.momentum);
      EXPECT_EQ(f.act_mode, act ? CUDNN_ACTIVATION_RELU : -1);
      EXPECT_EQ(f.format, CUDNN_TENSOR_NHWC);
      EXPECT_EQ(f.dtype, dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
      EXPECT_EQ(std::vector<int>({f.n, f.c, f.h, f.w}), std::vector<int>({4, 64, 8, 6}));
      EXPECT_EQ(f.bn_dtype, CUDNN_DATA_FLOAT);
      EXPECT_EQ(f.bn_c, C);
      EXPECT_EQ(f.alpha, 1.f);
      EXPECT_EQ(f.beta, 0.f);
      EXPECT_EQ(f.x, L.x.data());
      EXPECT_EQ(f.y, L.y.data());
      EXPECT_EQ(f.z_desc, join);
      EXPECT_EQ(f.z, join ? L.res.data() : nullptr);
      EXPECT_EQ(f.scale, L.gamma.data());
      EXPECT_EQ(f.bias, L.beta.data());
      EXPECT_EQ(f.running_mean, L.rm.data());
      EXPECT_EQ(f.running_var, L.rv.data());
      EXPECT_EQ(f.save_mean, L.sm.data());  // the batch mean, as the contract's
      // cuDNN's inverse std goes to the layer's own buffer, never to save_var (the variance).
      ASSERT_NE(f.save_inv_std, nullptr);
      EXPECT_NE(f.save_inv_std, L.sv.data());
      EXPECT_GE(cuda_stub::device_bytes_from(f.save_inv_std), size_t(C) * sizeof(float));
      // Workspace and reserve space: at least what the getters reported, in buffers that large.
      bool asked = false;
      const size_t ws = last_size("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", ops,
                                  &asked);
      EXPECT_TRUE(asked);
      ASSERT_NE(f.workspace, nullptr);
      EXPECT_GE(f.ws_bytes, ws);
      EXPECT_GE(cuda_stub::device_bytes_from(f.workspace), f.ws_bytes);
      const size_t rs =
          last_size("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", ops, &asked);
      EXPECT_TRUE(asked);
      ASSERT_NE(f.reserve, nullptr);  // non-null even where the getter says 0 bytes (BN)
      EXPECT_GE(f.reserve_bytes, rs);
      EXPECT_GE(cuda_stub::device_bytes_from(f.reserve), f.reserve_bytes);
      if (ops != CUDNN_BATCHNORM_OPS_BN) {
        EXPECT_GT(rs, 0u);
      }
      // None of our BN kernels; then the one kernel that writes save_var from the inverse std.
      const auto kf = kernel_names(cs);
      EXPECT_EQ(own_bn_kernels(cs), 0) << dump(cs, true);
      EXPECT_EQ(count_named(kf, "bn_var_from_inv_std"), 1) << dump(cs, true);
      EXPECT_EQ(kf.size(), 1u) << dump(cs, true);  // no join kernel either
      const auto fwd_at = std::find_if(cs.begin(), cs.end(),
                                       [](const StubCall& c) { return c.fn == kFwd; });
      const auto var_at = std::find_if(cs.begin(), cs.end(), [](const StubCall& c) {
        return c.fn == "kernel" && c.detail.find("bn_var_from_inv_std") != std::string::npos;
      });
      EXPECT_LT(fwd_at - cs.begin(), var_at - cs.begin()) << "save_var written before cuDNN ran";

      // ---- backward: the same op on the forward's reserve space, inverse std and beta
      c0 = cuda_stub::num_calls();
      b0 = cuda_stub::num_bn_calls();
      backward(L, k, p);
      cs = cuda_stub::calls(c0);
      bs = cuda_stub::bn_calls(b0);
      ASSERT_EQ(of(bs, kBwd).size(), 1u) << dump(cs, true);
      EXPECT_EQ(of(bs, kFwd).size(), 0u);
      const BnCall b = of(bs, kBwd)[0];
      EXPECT_EQ(b.mode, CUDNN_BATCHNORM_SPATIAL_PERSISTENT);
      EXPECT_EQ(b.ops, ops);
      EXPECT_EQ(b.eps, p.eps);
      EXPECT_EQ(b.act_mode, act ? CUDNN_ACTIVATION_RELU : -1);
      EXPECT_EQ(b.alpha, 1.f);
      EXPECT_EQ(b.beta, 0.f);  // -1 when the parameter gradients' factors differ
      EXPECT_EQ(b.reserve, f.reserve);
      EXPECT_EQ(b.reserve_bytes, f.reserve_bytes);
      EXPECT_EQ(b.save_mean, L.sm.data());
      EXPECT_EQ(b.save_inv_std, f.save_inv_std);
      EXPECT_EQ(b.scale, L.gamma.data());
      EXPECT_EQ(b.bias, L.beta.data());  // the forward's beta: batchnorm_bwd has none
      EXPECT_EQ(b.dscale, L.dg.data());
      EXPECT_EQ(b.dbias, L.db.data());
      EXPECT_EQ(b.x, L.x.data());
      EXPECT_EQ(b.dx, L.dx.data());
      EXPECT_EQ(b.y_desc, act);
      EXPECT_EQ(b.y, act ? L.y.data() : nullptr);
      EXPECT_EQ(b.dz_desc, join);
      const size_t bws =
          last_size("cudnnGetBatchNormalizationBackwardExWorkspaceSize", ops, &asked);
      EXPECT_TRUE(asked);
      ASSERT_NE(b.workspace, nullptr);
      EXPECT_GE(b.ws_bytes, bws);
      EXPECT_GE(cuda_stub::device_bytes_from(b.workspace), b.ws_bytes);
      const auto kb = kernel_names(cs);
      EXPECT_EQ(own_bn_kernels(cs), 0) << dump(cs, true);
      switch (k) {
        case Kind::bn:
        case Kind::bn_relu:
          EXPECT_EQ(b.dy, L.g1.data());
          EXPECT_EQ(b.dz, nullptr);
          EXPECT_TRUE(kb.empty()) << dump(cs, true);
          break;
        case Kind::join_g2:
          // g1 + g2 summed by our add kernel into a buffer of x's size, read as dy; dres is dz.
          EXPECT_EQ(b.dz, L.dres.data());
          EXPECT_NE(b.dy, L.g1.data());
          EXPECT_NE(b.dy, L.g2.data());
          EXPECT_NE(b.dy, b.dz);
          EXPECT_GE(cuda_stub::device_bytes_from(b.dy), L.x.nbytes());
          EXPECT_EQ(count_named(kb, "AddOp"), 1) << dump(cs, true);
          EXPECT_EQ(kb.size(), 1u) << dump(cs, true);
          break;
        case Kind::join_in_place: {
          // dres aliases g1: g1 is copied away first, so that dy and dz never alias.
          EXPECT_EQ(b.dz, L.g1.data());
          EXPECT_NE(b.dy, b.dz);
          EXPECT_GE(cuda_stub::device_bytes_from(b.dy), L.x.nbytes());
          int copies = 0;
          for (const StubCall& c : cs)
            if (c.fn == "cudaMemcpyAsync" && c.detail == "D2D" && c.ptr == b.dy &&
                c.bytes == L.x.nbytes())
              ++copies;
          EXPECT_EQ(copies, 1) << dump(cs);
          EXPECT_TRUE(kb.empty()) << dump(cs, true);
          break;
        }
      }
    }
}

TEST(CudaBnCudnnHostCalls, OtherConfigurationsRunOurKernels) {
  BnEnv env("cudnn");
  struct Case {
    std::vector<int64_t> shape;
    DType dt;
    Layout l;
    const char* why;
  };
  const Case cases[] = {
      {{4, 64, 8, 8}, DType::f16, Layout::NCHW, "NCHW"},
      {{4, 64, 8, 8}, DType::f32, Layout::NHWC, "f32"},
      {{4, 6, 8, 8}, DType::f16, Layout::NHWC, "C % 4 != 0"},
      {{4, 6, 8, 8}, DType::bf16, Layout::NHWC, "C % 4 != 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    auto be = make_backend("cuda");
    Layer L(be, c.shape, c.dt, c.l);
    const size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
    for (Kind k : kKinds) {
      forward(L, k, {});
      backward(L, k, {});
    }
    const std::vector<StubCall> cs = cuda_stub::calls(c0);
    EXPECT_EQ(cuda_stub::num_bn_calls(), b0) << dump(cs);
    EXPECT_GT(own_bn_kernels(cs), 0);
    // Inference never runs cuDNN, whatever the configuration.
    Layer I(be, {4, 64, 8, 8}, DType::f16, Layout::NHWC);
    const size_t b1 = cuda_stub::num_bn_calls();
    I.be->batchnorm_fwd_infer({}, I.x, I.gamma, I.beta, I.rm, I.rv, I.y);
    EXPECT_EQ(cuda_stub::num_bn_calls(), b1);
  }
}

// The backward runs cuDNN only on the state of a cuDNN forward of the same op on the same x (and
// y, with the ReLU): without it, our kernels on save_mean and save_var.
TEST(CudaBnCudnnHostCalls, BackwardWithoutItsForwardsStateRunsOurKernels) {
  BnEnv env("cudnn");
  auto be = make_backend("cuda");
  Layer L(be, {4, 64, 8, 8}, DType::f16, Layout::NHWC);
  auto bwd_calls = [&](auto&& fn) {
    const size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
    fn();
    const std::vector<StubCall> cs = cuda_stub::calls(c0);
    const int n = static_cast<int>(of(cuda_stub::bn_calls(b0), kBwd).size());
    if (n == 0) {
      EXPECT_GT(own_bn_kernels(cs), 0) << dump(cs, true);
    }
    return n;
  };
  // No forward at all on this save_mean.
  EXPECT_EQ(bwd_calls([&] { backward(L, Kind::bn_relu, {}); }), 0);
  forward(L, Kind::bn_relu, {});
  // A copy of y (another buffer): cuDNN's reserve space was written for the forward's y.
  Tensor y2 = be->alloc(L.y.shape(), L.y.dtype(), L.y.layout());
  EXPECT_EQ(bwd_calls([&] { backward(L, Kind::bn_relu, {}, &y2); }), 0);
  // Another op than the forward's (no ReLU now).
  EXPECT_EQ(bwd_calls([&] { backward(L, Kind::bn, {}); }), 0);
  // Another eps.
  BatchNormParams q;
  q.eps = 2e-5;
  EXPECT_EQ(bwd_calls([&] { backward(L, Kind::bn_relu, q); }), 0);
  // The matching backward, twice (the state is read, not used up).
  EXPECT_EQ(bwd_calls([&] { backward(L, Kind::bn_relu, {}); }), 1);
  EXPECT_EQ(bwd_calls([&] { backward(L, Kind::bn_relu, {}); }), 1);
}

// supports(Op::batchnorm_add_relu) is true exactly where the fused op runs cuDNN's
// BN_ADD_ACTIVATION (C a multiple of 4); where it is false the separate ops run (BN, then the
// join's add_relu kernel). An odd C under a claim still runs fused, on our kernels.
TEST(CudaBnCudnnHostCalls, SupportsClaimsExactlyWhatRuns) {
  BnEnv env("cudnn");
  auto be = make_backend("cuda");
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Layout l : {Layout::NHWC, Layout::NCHW}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + layout_name(l));
      const bool claimed = be->supports(Op::batchnorm_add_relu, dt, l);
      EXPECT_EQ(claimed, l == Layout::NHWC && dt != DType::f32);
      Layer L(be, {4, 64, 8, 8}, dt, l);
      const size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
      forward(L, Kind::join_g2, {});
      const std::vector<StubCall> cs = cuda_stub::calls(c0);
      const std::vector<BnCall> fs = of(cuda_stub::bn_calls(b0), kFwd);
      const bool ran_cudnn = fs.size() == 1 && fs[0].ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
      EXPECT_EQ(ran_cudnn, claimed) << dump(cs, true);
      EXPECT_EQ(count_named(kernel_names(cs), "AddReluOp") > 0, !claimed) << dump(cs, true);
    }
  // C % 4 != 0 under the claim: our fused kernels (BN's three, the join inside), no cuDNN.
  Layer L(be, {4, 6, 8, 8}, DType::f16, Layout::NHWC);
  const size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
  forward(L, Kind::join_g2, {});
  backward(L, Kind::join_g2, {});
  const std::vector<StubCall> cs = cuda_stub::calls(c0);
  EXPECT_EQ(cuda_stub::num_bn_calls(), b0);
  const auto k = kernel_names(cs);
  EXPECT_EQ(count_named(k, "AddReluOp"), 0) << dump(cs, true);
  EXPECT_EQ(count_named(k, "bn_fwd_apply"), 1) << dump(cs, true);
  EXPECT_EQ(k.size(), 6u) << dump(cs, true);
}

// A TrainStep (the small net, NHWC fp16 with loss scaling, graphs) with RN50_CUDA_BN=cudnn: every
// BN runs on cuDNN, all three ops occur, and each steady-state step is one graph launch whose
// capture holds cuDNN's BN calls and no allocation.
TEST(CudaBnCudnnHostCalls, TrainStepReplaysAsOneGraphLaunch) {
  BnEnv env("cudnn");
  auto be = make_backend("cuda");
  ModelOptions mo;
  mo.num_classes = 10;
  mo.layout = Layout::NHWC;
  mo.compute_dtype = DType::f16;
  ResNet m(*be, kNet, mo);
  m.init(11);
  InputStage in(*be, Layout::NHWC, DType::f16, 10, 2);
  StepOptions so;
  so.loss_scaling = true;
  so.initial_loss_scale = 128.f;
  so.use_graphs = true;
  SgdOptimizer opt(*be, m, {});
  TrainStep step(*be, m, in, opt, so);
  constexpr int kSteps = 6, kBatch = 4, kHw = 32;
  std::vector<std::vector<StubCall>> steps;
  std::vector<std::vector<BnCall>> bn;
  for (int i = 0; i < kSteps; ++i) {
    const Batch b = random_batch(kBatch, kHw, 10, 100 + i);
    const size_t c0 = cuda_stub::num_calls(), b0 = cuda_stub::num_bn_calls();
    const int s = in.upload(b);
    step.run(s, 0.05 + 0.01 * i);
    in.release(s);
    steps.push_back(cuda_stub::calls(c0));
    bn.push_back(cuda_stub::bn_calls(b0));
  }
  EXPECT_EQ(step.replayed_steps(), kSteps - 2);
  for (int i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const std::vector<StubCall>& cs = steps[static_cast<size_t>(i)];
    const std::vector<BnCall>& bs = bn[static_cast<size_t>(i)];
    if (i < 2) {  // eager: every BN on cuDNN, forward and backward, all three ops
      EXPECT_EQ(count(cs, "cudaStreamBeginCapture"), 0);
      EXPECT_EQ(own_bn_kernels(cs), 0) << dump(cs, true);
      const auto fs = of(bs, kFwd), ws = of(bs, kBwd);
      EXPECT_GT(fs.size(), 3u);
      EXPECT_EQ(fs.size(), ws.size());
      for (int ops : {CUDNN_BATCHNORM_OPS_BN, CUDNN_BATCHNORM_OPS_BN_ACTIVATION,
                      CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION})
        EXPECT_TRUE(
            std::any_of(fs.begin(), fs.end(), [&](const BnCall& c) { return c.ops == ops; }))
            << "no forward with bnOps " << ops;
      // Each backward reads the reserve space of a forward of this step.
      for (const BnCall& w : ws)
        EXPECT_TRUE(std::any_of(fs.begin(), fs.end(), [&](const BnCall& f) {
          return f.reserve == w.reserve && f.ops == w.ops && f.x == w.x;
        })) << "a backward without its forward";
      continue;
    }
    if (i < 4) {  // the recording of the slot's step, then its first replay
      const std::vector<StubCall> region = capture_region(cs);
      ASSERT_FALSE(region.empty()) << dump(cs);
      expect_no_alloc_or_sync(region, "inside the step's capture");
      EXPECT_GT(count_in_capture(region, kFwd), 3);
      EXPECT_EQ(count_in_capture(region, kFwd), count_in_capture(region, kBwd));
      EXPECT_EQ(own_bn_kernels(region), 0);
      EXPECT_FALSE(region.back().failed) << dump(region);
      EXPECT_EQ(count(cs, "cudaGraphLaunch"), 1);
      continue;
    }
    // Steady state: one launch of the recorded step, no BN call or kernel outside it.
    EXPECT_EQ(count(cs, "cudaGraphLaunch"), 1) << dump(cs);
    EXPECT_EQ(count(cs, "cudaStreamBeginCapture"), 0) << dump(cs);
    EXPECT_EQ(count(cs, "kernel"), 0) << dump(cs, true);
    EXPECT_TRUE(bs.empty());
    for (const char* fn : kAllocFns) EXPECT_EQ(count(cs, fn), 0) << fn << dump(cs);
  }
}

TEST(CudaBnCudnnHostCalls, OtherValuesAreRefusedByName) {
  BnEnv env("fast");
  try {
    make_backend("cuda");
    ADD_FAILURE() << "RN50_CUDA_BN=fast was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RN50_CUDA_BN is 'fast'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rn50
