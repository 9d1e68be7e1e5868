// The CUDA backend's host logic without a GPU: its own compiled code (librn50_cuda.a) linked
// against stub definitions of the CUDA runtime, cuDNN and cuBLASLt (cuda_stubs.cpp: fake device
// memory in host memory, kernel launches recorded but never run, streams, events and graphs as
// small host objects, stream capture emulated). Built only where the CUDA backend is
// (RN50_HAVE_CUDA); runs in CI on the CPU. What it holds the backend to:
//  * the cuDNN algorithm search (conv.cpp): cudnnFind*AlgorithmEx of every direction gets a
//    workspace as large as the largest size cudnnGet*WorkspaceSize reported for the plan (under
//    the 1 GiB cap), in a buffer at least that large (the first GPU run searched with 0 bytes:
//    bench/results/gpu/2026-11-26/README.md), and the convolution then runs the policy's pick
//    (the fastest deterministic result) with its workspace;
//  * choices are memoised for the process (a second convolution with the same key, on the same
//    or another backend, searches nothing; another shape searches), and persisted with
//    RN50_CUDNN_CACHE (a fresh ChoiceStore on the file, standing for the next process, takes
//    the choice without searching);
//  * a captured region (Backend::capture after one eager call) has no cudaMalloc, cudaFree,
//    pinned allocation or synchronisation, and replays with one cudaGraphLaunch; capturing a
//    convolution that never ran eagerly fails (the stubs refuse its allocation);
//  * a TrainStep on the stubbed backend (the small net, fp16 with loss scaling, graphs): each
//    steady-state step is one cudaGraphLaunch and the batch's two uploads (no copy of the lr:
//    the step's first kernel reads it from the pinned step-input ring), no allocation, no
//    stream or device synchronisation, no kernel outside the graph; a batch in pinned memory
//    (the loader's, from alloc_host) is the upload's source itself, a pageable one is staged;
//    run() waits for the device once every TrainStep::kRingRows steps, before it rewrites a
//    ring row, and at no other step;
//  * RN50_CUDA_BN_JOIN: unset, the fused BN + residual join is not claimed (the separate
//    kernels run); "fused" claims it, and the fused forward and backward launch BN's three
//    kernels and nothing else, where the separate ops launch an add_relu kernel besides; a
//    training step then runs no separate join kernel and still replays as one graph launch;
//    any other value is refused by name;
//  * RN50_CUDA_BN_COEFFS=registers: the NHWC apply passes launch their fixed-channel kernels
//    on a grid capped at the SMs x 8 and rounded so that the stride is a multiple of C; NCHW
//    and the default keep the per-element kernels;
//  * RN50_CUDA_MAXPOOL_BWD=indices: max pooling's backward reads the indices its forward saved
//    when it gets that forward's x and y buffers, and recomputes otherwise (or by default);
//  * input normalisation into a 4-channel NHWC tensor (--image-shape 4,H,W) launches the
//    one-pixel-per-thread kernel on a grid covering the pixels; 3 channels or NCHW keep the
//    per-element kernel;
//  * RN50_CUDA_BN=cudnn: in test_cuda_bn_cudnn.cpp, RN50_CUDNN_API=graph: in
//    test_cuda_conv_graph.cpp (same executable).
// Test names contain HostCalls (--gtest_filter='*HostCalls*').
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv_choices.h"
#include "cuda_stubs.h"
#include "host_calls_util.h"
#include "model/input_stage.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "step_test_util.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using cuda_stub::count;
using cuda_stub::count_in_capture;
using cuda_stub::StubCall;
using namespace seam_test;  // dump, capture_region, ScopedEnv, ... (host_calls_util.h)

constexpr size_t kWorkspaceCap = size_t{1} << 30;  // conv.cpp's kWorkspaceCap

struct Conv {
  std::unique_ptr<Backend> be;
  Tensor x, w, y;
  Conv2dParams p;
};

/// A 3x3 pad-1 convolution x (n, c, hw, hw) -> y (n, k, hw, hw), f32 NCHW, on a fresh backend
/// (or on `be` when given).
Conv make_conv(int64_t n, int64_t c, int64_t k, int64_t hw, std::unique_ptr<Backend> be = {}) {
  Conv v;
  v.be = be ? std::move(be) : make_backend("cuda");
  v.x = v.be->alloc({n, c, hw, hw}, DType::f32, Layout::NCHW);
  v.w = v.be->alloc({k, c, 3, 3}, DType::f32, Layout::NCHW);
  v.y = v.be->alloc({n, k, hw, hw}, DType::f32, Layout::NCHW);
  v.p.pad = 1;
  return v;
}
void all_three(Conv& v) {
  v.be->conv2d_fwd(v.p, v.x, v.w, v.y);
  v.be->conv2d_bwd_data(v.p, v.y, v.w, v.x);
  v.be->conv2d_bwd_weights(v.p, v.x, v.y, v.w);
}

/// Makes ChoiceStore::instance() return `s` for the lifetime of the object.
struct UseStore {
  explicit UseStore(cuda::ChoiceStore& s) { cuda::ChoiceStore::set_instance_for_tests(&s); }
  ~UseStore() { cuda::ChoiceStore::set_instance_for_tests(nullptr); }
};

TEST(CudaStubsHostCalls, TheBackendRunsOnTheStubs) {
  EXPECT_GT(cuda_stub::registered_kernels(), 20u);  // the fat binaries registered their kernels
  EXPECT_EQ(cuda_device_count(), 1);
  auto be = make_backend("cuda");
  EXPECT_EQ(be->name(), "cuda");
  const auto env = be->environment();
  EXPECT_NE(std::find(env.begin(), env.end(),
                      std::pair<std::string, std::string>{"gpu", "rn50 stub GPU"}),
            env.end());
  // A copy through fake device memory comes back.
  Tensor h = Tensor::empty({8}, DType::f32), back = Tensor::empty({8}, DType::f32);
  for (int i = 0; i < 8; ++i) h.data_as<float>()[i] = static_cast<float>(i);
  Tensor d = be->alloc({8}, DType::f32, Layout::NCHW);
  be->copy(h, d);
  be->copy(d, back);
  EXPECT_EQ(back.data_as<float>()[7], 7.f);
}

TEST(CudaConvHostCalls, FindGetsTheLargestReportedWorkspace) {
  const size_t q0 = cuda_stub::workspace_queries().size(), c0 = cuda_stub::num_calls();
  Conv v = make_conv(2, 16, 24, 8);  // shapes no other test uses: nothing is memoised
  all_three(v);
  const std::vector<StubCall> cs = cuda_stub::calls(c0);
  std::vector<cuda_stub::WorkspaceQuery> qs = cuda_stub::workspace_queries();
  qs.erase(qs.begin(), qs.begin() + static_cast<std::ptrdiff_t>(q0));
  const std::map<std::string, std::string> run_of = {
      {"cudnnFindConvolutionForwardAlgorithmEx", "cudnnConvolutionForward"},
      {"cudnnFindConvolutionBackwardDataAlgorithmEx", "cudnnConvolutionBackwardData"},
      {"cudnnFindConvolutionBackwardFilterAlgorithmEx", "cudnnConvolutionBackwardFilter"}};
  for (const auto& [find_fn, run_fn] : run_of) {
    SCOPED_TRACE(find_fn);
    ASSERT_EQ(count(cs, find_fn), 1) << dump(cs);
    ASSERT_EQ(count(cs, run_fn), 1) << dump(cs);
    const StubCall& f = *std::find_if(cs.begin(), cs.end(),
                                      [&](const StubCall& c) { return c.fn == find_fn; });
    // The largest workspace reported for this plan (direction and descriptors), under the cap.
    size_t most = 0;
    std::map<int, size_t> by_algo;
    int answers = 0;
    for (const auto& q : qs) {
      if (f.detail != q.dir + " " + q.plan) continue;
      ++answers;
      if (q.ok && q.bytes <= kWorkspaceCap) {
        most = std::max(most, q.bytes);
        by_algo[q.algo] = q.bytes;
      }
    }
    EXPECT_GE(answers, 6) << "the plan's workspace was not queried for every algorithm";
    ASSERT_GT(most, 0u);
    EXPECT_EQ(f.bytes, most) << "the search got another workspace size than the largest reported";
    ASSERT_NE(f.ptr, nullptr);
    EXPECT_GE(cuda_stub::device_bytes_from(f.ptr), most) << "the search's workspace buffer is short";
    // The convolution runs the pick: algorithm 5, the fastest deterministic one (the stubs make
    // algorithm 1 faster but non-deterministic), with its workspace in a buffer that large.
    const StubCall& r = *std::find_if(cs.begin(), cs.end(),
                                      [&](const StubCall& c) { return c.fn == run_fn; });
    EXPECT_EQ(r.algo, 5);
    EXPECT_EQ(r.bytes, by_algo[5]);
    EXPECT_GE(cuda_stub::device_bytes_from(r.ptr), r.bytes);
  }
}

TEST(CudaConvHostCalls, ChoicesAreMemoisedForTheProcess) {
  size_t c0 = cuda_stub::num_calls();
  Conv a = make_conv(2, 8, 40, 8);
  all_three(a);
  auto finds = [](const std::vector<StubCall>& cs) {
    return count(cs, "cudnnFindConvolutionForwardAlgorithmEx") +
           count(cs, "cudnnFindConvolutionBackwardDataAlgorithmEx") +
           count(cs, "cudnnFindConvolutionBackwardFilterAlgorithmEx");
  };
  EXPECT_EQ(finds(cuda_stub::calls(c0)), 3);
  // The same key again on the same backend (its cached plans) ...
  c0 = cuda_stub::num_calls();
  all_three(a);
  EXPECT_EQ(finds(cuda_stub::calls(c0)), 0) << dump(cuda_stub::calls(c0));
  // ... on another backend of the process (the memo): no search, same algorithms.
  c0 = cuda_stub::num_calls();
  Conv b = make_conv(2, 8, 40, 8);
  all_three(b);
  const std::vector<StubCall> cs = cuda_stub::calls(c0);
  EXPECT_EQ(finds(cs), 0) << dump(cs);
  EXPECT_EQ(count(cs, "cudnnConvolutionForward"), 1);
  for (const StubCall& c : cs) {
    if (c.fn.rfind("cudnnConvolution", 0) == 0) {
      EXPECT_EQ(c.algo, 5) << c.fn;
    }
  }
  // Another shape searches.
  c0 = cuda_stub::num_calls();
  Conv d = make_conv(2, 8, 48, 8, std::move(b.be));
  d.be->conv2d_fwd(d.p, d.x, d.w, d.y);
  EXPECT_EQ(count(cuda_stub::calls(c0), "cudnnFindConvolutionForwardAlgorithmEx"), 1);
}

TEST(CudaConvHostCalls, CacheFilePersistsAChoice) {
  const fs::path dir = fs::temp_directory_path() /
                       ("rn50_cuda_host_calls_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cache = (dir / "cudnn.cache").string();
  {
    // This process: RN50_CUDNN_CACHE=cache (a store on the file, as instance() makes it).
    cuda::ChoiceStore first(cache, (dir / "first.log").string());
    UseStore use(first);
    const size_t c0 = cuda_stub::num_calls();
    Conv v = make_conv(1, 12, 20, 6);
    v.be->conv2d_fwd(v.p, v.x, v.w, v.y);
    EXPECT_EQ(count(cuda_stub::calls(c0), "cudnnFindConvolutionForwardAlgorithmEx"), 1);
  }
  std::ifstream in(cache);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "nothing was written to the cache file";
  EXPECT_NE(line.find("rn50 stub GPU|cudnn 91400"), std::string::npos) << line;
  {
    // The next process: a fresh store on the same file, and a fresh backend.
    cuda::ChoiceStore next(cache, (dir / "next.log").string());
    UseStore use(next);
    const size_t c0 = cuda_stub::num_calls();
    Conv v = make_conv(1, 12, 20, 6);
    v.be->conv2d_fwd(v.p, v.x, v.w, v.y);
    const std::vector<StubCall> cs = cuda_stub::calls(c0);
    EXPECT_EQ(count(cs, "cudnnFindConvolutionForwardAlgorithmEx"), 0) << dump(cs);
    EXPECT_EQ(next.cache_loaded(), 1);
    const auto run = std::find_if(cs.begin(), cs.end(), [](const StubCall& c) {
      return c.fn == "cudnnConvolutionForward";
    });
    ASSERT_NE(run, cs.end());
    EXPECT_EQ(run->algo, 5);
  }
  std::ifstream log(dir / "next.log");
  ASSERT_TRUE(std::getline(log, line));
  EXPECT_NE(line.find("\"source\":\"cache\""), std::string::npos) << line;
  fs::remove_all(dir);
}

TEST(CudaCaptureHostCalls, CapturedRegionHasNoAllocationOrSync) {
  Conv v = make_conv(2, 16, 32, 8);
  Tensor fc_x = v.be->alloc({2, 32}, DType::f32, Layout::NCHW);
  Tensor fc_w = v.be->alloc({10, 32}, DType::f32, Layout::NCHW);
  Tensor fc_b = v.be->alloc({10}, DType::f32, Layout::NCHW);
  Tensor fc_y = v.be->alloc({2, 10}, DType::f32, Layout::NCHW);
  auto work = [&] {
    all_three(v);
    v.be->relu_fwd(v.y, v.y);
    v.be->linear_fwd(fc_x, fc_w, fc_b, fc_y);
  };
  work();  // eager once: plans, algorithms and workspaces exist
  const size_t c0 = cuda_stub::num_calls();
  std::unique_ptr<Graph> g = v.be->capture(work);
  ASSERT_TRUE(g);
  const std::vector<StubCall> region = capture_region(cuda_stub::calls(c0));
  ASSERT_FALSE(region.empty());
  expect_no_alloc_or_sync(region, "inside the capture");
  for (const char* fn : {"cudnnFindConvolutionForwardAlgorithmEx",
                         "cudnnFindConvolutionBackwardDataAlgorithmEx",
                         "cudnnFindConvolutionBackwardFilterAlgorithmEx"})
    EXPECT_EQ(count(region, fn), 0) << fn;
  EXPECT_EQ(count_in_capture(region, "cudnnConvolutionForward"), 1);
  EXPECT_EQ(count_in_capture(region, "cudnnConvolutionBackwardData"), 1);
  EXPECT_EQ(count_in_capture(region, "cudnnConvolutionBackwardFilter"), 1);
  EXPECT_EQ(count_in_capture(region, "cublasLtMatmul"), 1);
  EXPECT_GE(count_in_capture(region, "kernel"), 1);  // relu and the fc's bias
  EXPECT_FALSE(region.back().failed) << dump(region);
  const size_t c1 = cuda_stub::num_calls();
  g->replay();
  g->replay();
  const std::vector<StubCall> replays = cuda_stub::calls(c1);
  EXPECT_EQ(count(replays, "cudaGraphLaunch"), 2) << dump(replays);
  EXPECT_EQ(count(replays, "kernel"), 0);
  expect_no_alloc_or_sync(replays, "in a replay");
}

TEST(CudaCaptureHostCalls, CapturingAnUnwarmedConvolutionFails) {
  // The first call of a shape searches and grows the workspace: not recordable. The stubs
  // refuse the search, the allocation and the synchronisation as CUDA does, and the capture
  // fails.
  Conv v = make_conv(2, 16, 56, 8);
  Conv warm = make_conv(1, 4, 4, 4, std::move(v.be));  // gives the backend some workspace
  warm.be->conv2d_fwd(warm.p, warm.x, warm.w, warm.y);
  const size_t c0 = cuda_stub::num_calls();
  EXPECT_THROW(warm.be->capture([&] { warm.be->conv2d_fwd(v.p, v.x, v.w, v.y); }), Error);
  const std::vector<StubCall> cs = cuda_stub::calls(c0);
  int refused = 0;
  for (const StubCall& c : cs) refused += c.failed && c.in_capture;
  EXPECT_GE(refused, 1) << dump(cs);
  // The backend is usable afterwards: the same convolution eagerly, then captured.
  warm.be->conv2d_fwd(v.p, v.x, v.w, v.y);
  EXPECT_TRUE(warm.be->capture([&] { warm.be->conv2d_fwd(v.p, v.x, v.w, v.y); }));
}

/// RN50_CUDA_BN_JOIN set to `v` (unset when null) for the scope.
struct BnJoinEnv : ScopedEnv {
  explicit BnJoinEnv(const char* v) : ScopedEnv("RN50_CUDA_BN_JOIN", v) {}
};

/// b in pinned host memory from be.alloc_host (what the data loader delivers on CUDA).
Batch pinned_copy(Backend& be, const Batch& b) {
  Batch p;
  p.images = be.alloc_host(b.images.shape(), b.images.dtype(), b.images.layout());
  std::memcpy(p.images.data(), b.images.data(), b.images.nbytes());
  p.labels = be.alloc_host(b.labels.shape(), b.labels.dtype(), b.labels.layout());
  std::memcpy(p.labels.data(), b.labels.data(), b.labels.nbytes());
  p.size = b.size;
  return p;
}

TEST(CudaBnJoinHostCalls, TheSwitchDecidesWhatSupportsClaims) {
  for (Layout l : {Layout::NHWC, Layout::NCHW}) {
    {
      BnJoinEnv env(nullptr);
      EXPECT_FALSE(make_backend("cuda")->supports(Op::batchnorm_add_relu, DType::f16, l));
    }
    {
      BnJoinEnv env("separate");
      EXPECT_FALSE(make_backend("cuda")->supports(Op::batchnorm_add_relu, DType::f16, l));
    }
    {
      BnJoinEnv env("fused");
      auto be = make_backend("cuda");
      EXPECT_TRUE(be->supports(Op::batchnorm_add_relu, DType::f16, l));
      EXPECT_TRUE(be->supports(Op::batchnorm_add_relu, DType::f32, l));
      EXPECT_TRUE(be->supports(Op::batchnorm_add_relu, DType::bf16, l));
    }
  }
  BnJoinEnv env("cudnn");
  try {
    make_backend("cuda");
    ADD_FAILURE() << "RN50_CUDA_BN_JOIN=cudnn was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RN50_CUDA_BN_JOIN is 'cudnn'"), std::string::npos)
        << e.what();
  }
}

// The fused ops launch BN's stats, finalize and apply kernels and nothing else; the separate
// path (the switch unset) launches the join's own kernel besides, forward and backward.
TEST(CudaBnJoinHostCalls, FusedOpsLaunchOnlyTheBatchNormKernels) {
  for (const char* v : {"fused", static_cast<const char*>(nullptr)}) {
    SCOPED_TRACE(v ? v : "unset");
    BnJoinEnv env(v);
    auto be = make_backend("cuda");
    const std::vector<int64_t> shape{4, 64, 8, 8};
    auto act = [&] { return be->alloc(shape, DType::f16, Layout::NHWC); };
    auto vec = [&] { return be->alloc({64}, DType::f32, Layout::NCHW); };
    Tensor x = act(), res = act(), y = act(), g1 = act(), g2 = act(), dres = act(), dx = act();
    Tensor gamma = vec(), beta = vec(), rm = vec(), rv = vec(), sm = vec(), sv = vec();
    Tensor dg = vec(), db = vec();
    BatchNormParams p;
    size_t c0 = cuda_stub::num_calls();
    be->batchnorm_add_relu_fwd_train(p, x, res, gamma, beta, rm, rv, y, sm, sv);
    const std::vector<std::string> fwd = kernel_names(cuda_stub::calls(c0));
    c0 = cuda_stub::num_calls();
    be->batchnorm_add_relu_bwd(p, x, y, g1, g2, gamma, sm, sv, dres, dx, dg, db);
    const std::vector<std::string> bwd = kernel_names(cuda_stub::calls(c0));
    std::string all;
    for (const std::string& n : fwd) all += "\n  fwd " + n;
    for (const std::string& n : bwd) all += "\n  bwd " + n;
    EXPECT_EQ(count_named(fwd, "bn_fwd_stats_nhwc"), 1) << all;
    EXPECT_EQ(count_named(fwd, "bn_fwd_finalize"), 1) << all;
    EXPECT_EQ(count_named(fwd, "bn_fwd_apply"), 1) << all;
    EXPECT_EQ(count_named(bwd, "bn_bwd_stats_nhwc"), 1) << all;
    EXPECT_EQ(count_named(bwd, "bn_bwd_finalize"), 1) << all;
    EXPECT_EQ(count_named(bwd, "bn_bwd_apply"), 1) << all;
    if (v) {
      EXPECT_EQ(fwd.size(), 3u) << all;
      EXPECT_EQ(bwd.size(), 3u) << all;
    } else {
      EXPECT_GT(fwd.size(), 3u) << all;
      EXPECT_GT(bwd.size(), 3u) << all;
    }
    // The buffer rules hold on the fused path as on the default one.
    if (v) {
      EXPECT_THROW(be->batchnorm_add_relu_fwd_train(p, x, res, gamma, beta, rm, rv, res, sm, sv),
                   Error);
      EXPECT_THROW(be->batchnorm_add_relu_bwd(p, x, y, g1, g2, gamma, sm, sv, g2, dx, dg, db),
                   Error);
    }
  }
}

/// RN50_CUDA_BN_COEFFS set to `v` (unset when null) for the scope.
struct BnCoeffsEnv : ScopedEnv {
  explicit BnCoeffsEnv(const char* v) : ScopedEnv("RN50_CUDA_BN_COEFFS", v) {}
};

/// The kernel launches of `cs` whose name contains `part`.
std::vector<StubCall> launches(const std::vector<StubCall>& cs, const std::string& part) {
  std::vector<StubCall> out;
  for (const StubCall& c : cs)
    if (c.fn == "kernel" && c.detail.find(part) != std::string::npos) out.push_back(c);
  return out;
}

// The FIXED template argument is the last of the apply kernels' ("..., true>" in the name).
TEST(CudaBnCoeffsHostCalls, RegistersSwitchLaunchesFixedChannelApplyKernels) {
  struct Case {
    std::vector<int64_t> shape;
    DType dt;
    Layout l;
    const char* coeffs;
    bool fixed;
    unsigned grid;  // of the fixed kernels (0: not checked)
  };
  const Case cases[] = {
      // 2048 packs of 8 halves: 8 blocks, C = 64 divides 256 x 8: no rounding.
      {{4, 64, 8, 8}, DType::f16, Layout::NHWC, "registers", true, 8},
      // 768 channels, f32 packs of 4: 384 packs, 2 blocks, rounded up to 768 / gcd(768, 1024)
      // = 3 blocks (a stride of 3072 elements, four rows).
      {{2, 768, 1, 1}, DType::f32, Layout::NHWC, "registers", true, 3},
      {{4, 64, 8, 8}, DType::f16, Layout::NCHW, "registers", false, 0},
      {{4, 64, 8, 8}, DType::f16, Layout::NHWC, nullptr, false, 0},
      {{4, 64, 8, 8}, DType::f16, Layout::NHWC, "loads", false, 0},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.coeffs ? k.coeffs : "unset") + " " + layout_name(k.l) + " C " +
                 std::to_string(k.shape[1]));
    BnCoeffsEnv env(k.coeffs);
    auto be = make_backend("cuda");
    const int64_t C = k.shape[1];
    Tensor x = be->alloc(k.shape, k.dt, k.l), y = be->alloc(k.shape, k.dt, k.l);
    Tensor dy = be->alloc(k.shape, k.dt, k.l), dx = be->alloc(k.shape, k.dt, k.l);
    auto vec = [&] { return be->alloc({C}, DType::f32, Layout::NCHW); };
    Tensor gamma = vec(), beta = vec(), rm = vec(), rv = vec(), sm = vec(), sv = vec();
    Tensor dg = vec(), db = vec();
    BatchNormParams p;
    p.relu = true;
    const size_t c0 = cuda_stub::num_calls();
    be->batchnorm_fwd_train(p, x, gamma, beta, rm, rv, y, sm, sv);
    be->batchnorm_fwd_infer(p, x, gamma, beta, rm, rv, y);
    be->batchnorm_bwd(p, x, y, dy, gamma, sm, sv, dx, dg, db);
    const std::vector<StubCall> cs = cuda_stub::calls(c0);
    const std::vector<StubCall> fwd = launches(cs, "bn_fwd_apply<");
    const std::vector<StubCall> bwd = launches(cs, "bn_bwd_apply<");
    ASSERT_EQ(fwd.size(), 2u) << dump(cs, true);
    ASSERT_EQ(bwd.size(), 1u) << dump(cs, true);
    for (const StubCall& c : {fwd[0], fwd[1], bwd[0]}) {
      const bool fixed = c.detail.find(", true>(") != std::string::npos;
      EXPECT_EQ(fixed, k.fixed) << c.detail;
      if (k.grid) {
        EXPECT_EQ(c.grid, k.grid) << c.detail;
      }
    }
  }
  BnCoeffsEnv env("fast");
  EXPECT_THROW(make_backend("cuda"), Error);
}

// The backward kernel's INDICES template argument is its last ("..., true>(" in the name).
TEST(CudaMaxPoolHostCalls, IndicesAreReadOnlyAfterTheMatchingForward) {
  auto bwd_reads_indices = [](Backend& be, const Pool2dParams& p, const Tensor& x,
                              const Tensor& y, const Tensor& dy, Tensor& dx) {
    const size_t c0 = cuda_stub::num_calls();
    be.maxpool2d_bwd(p, x, y, dy, dx);
    const std::vector<StubCall> cs = cuda_stub::calls(c0);
    std::vector<std::string> k;
    for (const StubCall& c : cs)
      if (c.fn == "kernel" && c.detail.find("maxpool_bwd_kernel<") != std::string::npos)
        k.push_back(c.detail);
    EXPECT_EQ(k.size(), 1u) << dump(cs, true);
    return !k.empty() && k[0].find(", true>(") != std::string::npos;
  };
  Pool2dParams p{3, 2, 1};
  for (const char* v : {"indices", "recompute", static_cast<const char*>(nullptr)}) {
    SCOPED_TRACE(v ? v : "unset");
    ScopedEnv env("RN50_CUDA_MAXPOOL_BWD", v);
    auto be = make_backend("cuda");
    const bool on = v && std::string(v) == "indices";
    Tensor x = be->alloc({2, 64, 16, 16}, DType::f16, Layout::NHWC);
    Tensor x2 = be->alloc({2, 64, 16, 16}, DType::f16, Layout::NHWC);
    Tensor y = be->alloc({2, 64, 8, 8}, DType::f16, Layout::NHWC);
    Tensor y2 = be->alloc({2, 64, 8, 8}, DType::f16, Layout::NHWC);
    Tensor dy = be->alloc({2, 64, 8, 8}, DType::f16, Layout::NHWC);
    Tensor dx = be->alloc({2, 64, 16, 16}, DType::f16, Layout::NHWC);
    be->maxpool2d_fwd(p, x, y);
    EXPECT_EQ(bwd_reads_indices(*be, p, x, y, dy, dx), on);     // the forward's x and y
    EXPECT_FALSE(bwd_reads_indices(*be, p, x, y2, dy, dx));     // another y buffer
    EXPECT_FALSE(bwd_reads_indices(*be, p, x2, y, dy, dx));     // another x buffer
    // Another pooling of the same buffers (its forward ran with stride 2, kernel 3).
    Pool2dParams q{2, 2, 0};
    EXPECT_FALSE(bwd_reads_indices(*be, q, x, y, dy, dx));
  }
  ScopedEnv env("RN50_CUDA_MAXPOOL_BWD", "cached");
  EXPECT_THROW(make_backend("cuda"), Error);
}

// With RN50_CUDA_BN_JOIN unset and with it fused: the fused step's eager steps launch no
// separate join kernel (add_relu_bwd_kernel) and fewer elementwise kernels, and both replay.
TEST(CudaTrainStepHostCalls, SteadyStateIsOneGraphLaunchPerStep) {
  std::map<std::string, std::vector<std::string>> eager;  // the first step's kernels
  for (const char* join : {static_cast<const char*>(nullptr), "fused"}) {
    SCOPED_TRACE(join ? "RN50_CUDA_BN_JOIN=fused" : "RN50_CUDA_BN_JOIN unset");
    BnJoinEnv join_env(join);
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
    constexpr int kSteps = 7, kBatch = 4, kHw = 32;
    std::vector<std::vector<StubCall>> steps;
    std::vector<Batch> batches;
    for (int i = 0; i < kSteps; ++i) {
      // Odd steps: the batch in pinned memory, as the data loader delivers it on CUDA.
      const Batch b = i % 2 ? pinned_copy(*be, random_batch(kBatch, kHw, 10, 100 + i))
                            : random_batch(kBatch, kHw, 10, 100 + i);
      batches.push_back(b);
      const size_t c0 = cuda_stub::num_calls();
      const int s = in.upload(b);
      step.run(s, 0.05 + 0.01 * i);
      in.release(s);
      steps.push_back(cuda_stub::calls(c0));
    }
    EXPECT_EQ(step.replayed_steps(), kSteps - 2);
    for (int i = 0; i < kSteps; ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      const std::vector<StubCall>& cs = steps[static_cast<size_t>(i)];
      if (i < 2) {  // eager: one per input slot
        EXPECT_EQ(count(cs, "cudaStreamBeginCapture"), 0);
        EXPECT_GT(count(cs, "kernel"), 20);
        const std::vector<std::string> k = kernel_names(cs);
        ASSERT_FALSE(k.empty());
        EXPECT_EQ(count_named(k, "load_step_inputs_kernel"), 1) << dump(cs, true);
        continue;
      }
      if (i < 4) {  // the recording of the slot's step, then its first replay
        const std::vector<StubCall> region = capture_region(cs);
        ASSERT_FALSE(region.empty()) << dump(cs);
        expect_no_alloc_or_sync(region, "inside the step's capture");
        EXPECT_GT(count_in_capture(region, "kernel"), 20);
        EXPECT_GT(count_in_capture(region, "cudnnConvolutionForward"), 0);
        EXPECT_FALSE(region.back().failed) << dump(region);
        EXPECT_EQ(count(cs, "cudaGraphLaunch"), 1);
        continue;
      }
      // Steady state: one launch of the recorded step ...
      EXPECT_EQ(count(cs, "cudaGraphLaunch"), 1) << dump(cs);
      EXPECT_EQ(count(cs, "cudaStreamBeginCapture"), 0) << dump(cs);
      EXPECT_EQ(count(cs, "kernel"), 0) << dump(cs, true);
      // ... no allocation and no stream or device synchronisation. The only host waits are
      // upload_input's, one per input buffer (images, labels): the previous upload into this
      // slot's pinned staging must have been read before it is overwritten (that upload ran two
      // steps ago, so the wait normally returns at once).
      for (const char* fn : kAllocFns) EXPECT_EQ(count(cs, fn), 0) << fn << dump(cs);
      EXPECT_EQ(count(cs, "cudaStreamSynchronize"), 0) << dump(cs);
      EXPECT_EQ(count(cs, "cudaDeviceSynchronize"), 0) << dump(cs);
      EXPECT_EQ(count(cs, "cudaEventSynchronize"), 2) << dump(cs);
      // Host-to-device: the batch (images, labels) and nothing else (no lr copy). A pinned
      // batch is the copies' source; a pageable one goes through the slot's staging buffer,
      // allocated by the slot's first upload (steps 0 and 1), not now.
      const Batch& b = batches[static_cast<size_t>(i)];
      std::vector<size_t> h2d;
      for (const StubCall& c : cs)
        if (c.fn == "cudaMemcpyAsync") {
          EXPECT_EQ(c.detail, "H2D");
          h2d.push_back(c.bytes);
          const bool from_batch = c.src == b.images.data() || c.src == b.labels.data();
          EXPECT_EQ(from_batch, i % 2 == 1) << "step " << i << ": source " << c.src;
        }
      std::sort(h2d.begin(), h2d.end());
      EXPECT_EQ(h2d, (std::vector<size_t>{size_t{kBatch} * sizeof(int32_t),
                                          size_t{kBatch} * 3 * kHw * kHw}));
    }
    eager[join ? "fused" : "separate"] = kernel_names(steps[0]);
  }
  const auto& sep = eager["separate"];
  const auto& fused = eager["fused"];
  EXPECT_GT(count_named(sep, "add_relu_bwd_kernel"), 0);
  EXPECT_EQ(count_named(fused, "add_relu_bwd_kernel"), 0);
  EXPECT_LT(count_named(fused, "eltwise_flat_kernel"), count_named(sep, "eltwise_flat_kernel"));
  EXPECT_EQ(count_named(fused, "bn_fwd_apply"), count_named(sep, "bn_fwd_apply"));
}

// The step-input ring (TrainStep::kRingRows rows): run() rewrites row r only after the step that
// read it last has run. Without any other synchronisation in between, the run that comes back
// to a row after kRingRows steps waits for the device first (Backend::synchronize: both
// streams), and no other run waits at all.
TEST(CudaTrainStepHostCalls, RingRowIsRewrittenOnlyAfterTheDeviceCaughtUp) {
  auto be = make_backend("cuda");
  ModelOptions mo;
  mo.num_classes = 10;
  mo.layout = Layout::NHWC;
  mo.compute_dtype = DType::f16;
  ResNet m(*be, kNet, mo);
  m.init(11);
  InputStage in(*be, Layout::NHWC, DType::f16, 10, 2);
  StepOptions so;
  so.use_graphs = true;
  SgdOptimizer opt(*be, m, {});
  TrainStep step(*be, m, in, opt, so);
  // One upload for both slots, as the synthetic benchmark's repeated batches would do without
  // the loader's per-batch wait: the only bound on the queue is the ring.
  const Batch b = pinned_copy(*be, random_batch(2, 32, 10, 7));
  const int s0 = in.upload(b), s1 = in.upload(b);
  const int64_t rows = TrainStep::kRingRows;
  std::vector<int64_t> waited;
  for (int64_t i = 0; i < 2 * rows + 3; ++i) {
    const size_t c0 = cuda_stub::num_calls();
    step.run(i % 2 ? s1 : s0, 0.1);
    if (count(cuda_stub::calls(c0), "cudaStreamSynchronize") > 0) waited.push_back(i);
  }
  EXPECT_EQ(step.replayed_steps(), 2 * rows + 3 - 2);
  EXPECT_EQ(waited, (std::vector<int64_t>{rows, 2 * rows}));
  // A loss-scale reset rewrites the device's ring position with the rest of the state (and
  // waits): the host's count starts over with it.
  step.set_loss_scale(64.f, 0.f);
  waited.clear();
  for (int64_t i = 0; i < rows + 1; ++i) {
    const size_t c0 = cuda_stub::num_calls();
    step.run(i % 2 ? s1 : s0, 0.1);
    if (count(cuda_stub::calls(c0), "cudaStreamSynchronize") > 0) waited.push_back(i);
  }
  EXPECT_EQ(waited, (std::vector<int64_t>{rows}));
}

TEST(CudaInputHostCalls, FourChannelNhwcIsWrittenOnePixelPerThread) {
  auto be = make_backend("cuda");
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  constexpr int64_t kN = 2, kH = 40, kW = 24;
  Tensor src = be->alloc({kN, 3, kH, kW}, DType::u8, Layout::NHWC);
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Layout l : {Layout::NHWC, Layout::NCHW})
      for (int64_t c : {3, 4}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (l == Layout::NHWC ? " NHWC " : " NCHW ") +
                     std::to_string(c) + " channels");
        Tensor dst = be->alloc({kN, c, kH, kW}, dt, l);
        const size_t c0 = cuda_stub::num_calls();
        be->normalize_u8(src, mean, stdv, dst);
        const std::vector<StubCall> k = launches(cuda_stub::calls(c0), "normalize_u8");
        ASSERT_EQ(k.size(), 1u);
        const bool pixel = k[0].detail.find("pixel4") != std::string::npos;
        EXPECT_EQ(pixel, c == 4 && l == Layout::NHWC) << k[0].detail;
        if (pixel) {
          EXPECT_EQ(k[0].grid, (kN * kH * kW + 255) / 256);
        }
      }
}

}  // namespace
}  // namespace rn50
