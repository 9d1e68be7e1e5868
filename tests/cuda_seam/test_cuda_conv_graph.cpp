// RN50_CUDNN_API=graph: the CUDA backend's convolutions on cuDNN's graph (backend) API
// (src/backend/cuda/conv_graph.h), host logic only, on the link-seam stubs (cuda_stubs.h;
// the graph API's fake: cuda_stubs_graph.h). What it holds the backend to:
//  * unset or "legacy", no cudnnBackend* call is made (the legacy search runs); another value
//    is refused naming the variable;
//  * "graph" builds, per direction, the operation of that direction with the x, w and y tensors'
//    dims in NCHW order and the strides of their layout (NCHW and NHWC), distinct uids, the
//    convolution's pads, strides, dilations, cross-correlation, F32 compute, alpha 1, beta 0;
//  * the heuristics' non-deterministic engine and the one over the workspace cap are never
//    timed nor run (the non-deterministic one is, and wins, with RN50_CUDNN_NONDET=1); the
//    tensor-core engine is not for F32 without TF32; a plan that does not finalize is skipped;
//  * the first call of a key times each finalized plan (a warm-up and three timed runs) and
//    runs the fastest; the second call of the key builds, times and synchronises nothing and
//    runs once;
//  * the variant pack carries the caller's pointers under the graph's uids (or the plan's
//    scratch for an operand stored in the other layout) and a workspace as large as the plan's;
//  * the choice persists through RN50_CUDNN_CACHE into a fresh store (no heuristics, no timing)
//    under a key of its own (a legacy run of the same shapes still searches); a stored engine
//    that no longer builds is searched again;
//  * a capture after one eager call has no allocation or synchronisation and replays with one
//    cudaGraphLaunch.
// Test names contain HostCalls (--gtest_filter='*HostCalls*').
#include <cudnn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv_choices.h"
#include "cuda_stubs.h"
#include "cuda_stubs_graph.h"
#include "rn50/backend.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
namespace stub = cuda_stub;
using stub::count;
using stub::StubCall;

/// Environment variable `name` set to `v` (unset when null) for the scope, unset after it.
struct Env {
  Env(const char* name, const char* v) : name_(name) {
    if (v)
      setenv(name, v, 1);
    else
      unsetenv(name);
  }
  ~Env() { unsetenv(name_); }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  const char* name_;
};

/// A fresh ChoiceStore (no memo of other tests' choices) that instance() returns for the scope.
struct FreshStore {
  explicit FreshStore(std::string cache = "", std::string log = "")
      : store(std::move(cache), std::move(log)) {
    cuda::ChoiceStore::set_instance_for_tests(&store);
  }
  ~FreshStore() { cuda::ChoiceStore::set_instance_for_tests(nullptr); }
  cuda::ChoiceStore store;
};

/// RN50_CUDNN_NONDET overridden for the scope.
struct Nondet {
  explicit Nondet(bool v) { cuda::set_cudnn_nondeterministic(v); }
  ~Nondet() { cuda::set_cudnn_nondeterministic(std::nullopt); }
};

/// A backend made with RN50_CUDNN_API=`api` (unset when null).
std::unique_ptr<Backend> backend(const char* api, bool tf32 = true) {
  Env env("RN50_CUDNN_API", api);
  BackendOptions o;
  o.allow_tf32 = tf32;
  return make_backend("cuda", o);
}

/// x (2, 8, 9, 7) * w (16, 8, 3, 3), stride 2, pad 1 -> y (2, 16, 5, 4) (H != W, so that a
/// stride mixing them up shows).
struct Conv {
  Tensor x, w, y;
  Conv2dParams p{2, 1};
};
Conv make_conv(Backend& be, DType dt, Layout act, Layout wl) {
  return {be.alloc({2, 8, 9, 7}, dt, act), be.alloc({16, 8, 3, 3}, dt, wl),
          be.alloc({2, 16, 5, 4}, dt, act)};
}
Conv make_conv(Backend& be, DType dt = DType::f32, Layout l = Layout::NHWC) {
  return make_conv(be, dt, l, l);
}

int count_prefix(const std::vector<StubCall>& cs, const std::string& prefix) {
  return static_cast<int>(std::count_if(cs.begin(), cs.end(), [&](const StubCall& c) {
    return c.fn.rfind(prefix, 0) == 0;
  }));
}
/// Calls of `fn` on descriptors of `type` (the stubs' short names: "ENGINEHEUR", ...).
int count_on(const std::vector<StubCall>& cs, const std::string& fn, const std::string& type) {
  return static_cast<int>(std::count_if(cs.begin(), cs.end(), [&](const StubCall& c) {
    return c.fn == fn && c.detail.rfind(type, 0) == 0;
  }));
}
std::string dump(const std::vector<StubCall>& cs) {
  std::string s;
  for (const StubCall& c : cs)
    if (c.fn != "kernel" && c.fn != "cudnnBackendSetAttribute" &&
        c.fn != "cudnnBackendGetAttribute")
      s += "\n  " + c.fn + (c.in_capture ? " [capture]" : "") + (c.failed ? " FAILED" : "") +
           (c.detail.empty() ? "" : " " + c.detail);
  return s;
}
std::vector<int64_t> engines_of(const std::vector<stub::GraphExecute>& xs) {
  std::vector<int64_t> e;
  for (const auto& x : xs) e.push_back(x.engine);
  return e;
}
bool ran(const std::vector<stub::GraphExecute>& xs, int64_t engine) {
  return std::any_of(xs.begin(), xs.end(), [&](const auto& x) { return x.engine == engine; });
}
std::string str(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t e : v) s += std::to_string(e) + " ";
  return s;
}

TEST(CudaConvGraphHostCalls, DefaultAndLegacyMakeNoBackendCall) {
  for (const char* api : {static_cast<const char*>(nullptr), "legacy"}) {
    SCOPED_TRACE(api ? api : "unset");
    FreshStore fresh;
    auto be = backend(api);
    Conv v = make_conv(*be);
    const size_t c0 = stub::num_calls();
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    be->conv2d_bwd_data(v.p, v.y, v.w, v.x);
    be->conv2d_bwd_weights(v.p, v.x, v.y, v.w);
    const std::vector<StubCall> cs = stub::calls(c0);
    EXPECT_EQ(count_prefix(cs, "cudnnBackend"), 0) << dump(cs);
    EXPECT_EQ(count(cs, "cudnnFindConvolutionForwardAlgorithmEx"), 1);
    EXPECT_EQ(count(cs, "cudnnConvolutionBackwardFilter"), 1);
  }
}

TEST(CudaConvGraphHostCalls, BadValueIsRefusedByName) {
  try {
    backend("frontend");
    ADD_FAILURE() << "RN50_CUDNN_API=frontend was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RN50_CUDNN_API is 'frontend'"), std::string::npos)
        << e.what();
  }
}

TEST(CudaConvGraphHostCalls, GraphBuildsEachDirectionsOperation) {
  struct Case {
    Layout l;
    DType dt;
    std::vector<int64_t> x_strides, w_strides, y_strides;
  };
  const Case cases[] = {
      {Layout::NHWC, DType::f16, {504, 1, 56, 8}, {72, 1, 24, 8}, {320, 1, 64, 16}},
      {Layout::NCHW, DType::f32, {504, 63, 7, 1}, {72, 9, 3, 1}, {320, 20, 4, 1}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(layout_name(k.l));
    FreshStore fresh;
    auto be = backend("graph");
    Conv v = make_conv(*be, k.dt, k.l);
    const size_t o0 = stub::num_graph_ops(), c0 = stub::num_calls();
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    be->conv2d_bwd_data(v.p, v.y, v.w, v.x);
    be->conv2d_bwd_weights(v.p, v.x, v.y, v.w);
    const std::vector<StubCall> cs = stub::calls(c0);
    EXPECT_EQ(count(cs, "cudnnFindConvolutionForwardAlgorithmEx"), 0);
    EXPECT_EQ(count(cs, "cudnnConvolutionForward"), 0);
    const std::vector<stub::GraphConvOp> ops = stub::graph_ops(o0);
    ASSERT_EQ(ops.size(), 3u) << dump(cs);
    const char* dirs[] = {"fwd", "bwd_data", "bwd_filter"};
    const int dtype = k.dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    for (size_t i = 0; i < 3; ++i) {
      SCOPED_TRACE(dirs[i]);
      const stub::GraphConvOp& op = ops[i];
      EXPECT_EQ(op.dir, dirs[i]);
      EXPECT_EQ(op.x.dims, (std::vector<int64_t>{2, 8, 9, 7}));
      EXPECT_EQ(op.w.dims, (std::vector<int64_t>{16, 8, 3, 3}));
      EXPECT_EQ(op.y.dims, (std::vector<int64_t>{2, 16, 5, 4}));
      EXPECT_EQ(op.x.strides, k.x_strides);
      EXPECT_EQ(op.w.strides, k.w_strides);
      EXPECT_EQ(op.y.strides, k.y_strides);
      for (const stub::GraphTensor* t : {&op.x, &op.w, &op.y}) {
        EXPECT_EQ(t->dtype, dtype);
        EXPECT_EQ(t->alignment, 16);  // 256-byte aligned fake memory, claimed up to 16
      }
      EXPECT_NE(op.x.uid, op.w.uid);
      EXPECT_NE(op.x.uid, op.y.uid);
      EXPECT_NE(op.w.uid, op.y.uid);
      EXPECT_EQ(op.spatial_dims, 2);
      EXPECT_EQ(op.pre_pad, (std::vector<int64_t>{1, 1}));
      EXPECT_EQ(op.post_pad, (std::vector<int64_t>{1, 1}));
      EXPECT_EQ(op.strides, (std::vector<int64_t>{2, 2}));
      EXPECT_EQ(op.dilations, (std::vector<int64_t>{1, 1}));
      EXPECT_EQ(op.mode, CUDNN_CROSS_CORRELATION);
      EXPECT_EQ(op.comp_type, CUDNN_DATA_FLOAT);
      EXPECT_EQ(op.alpha, 1.0);
      EXPECT_EQ(op.beta, 0.0);
    }
    // Two heuristics (mode A, fallback) per direction.
    EXPECT_EQ(count_on(cs, "cudnnBackendFinalize", "ENGINEHEUR"), 6) << dump(cs);
  }
}

TEST(CudaConvGraphHostCalls, FiltersEnginesByNotesAndWorkspace) {
  struct Case {
    const char* name;
    bool nondet, tf32;
    DType dt;
    int64_t chosen;
    std::vector<int64_t> never;
  };
  const Case cases[] = {
      // The fastest (1) is non-deterministic, the next (2) over the cap: 3 wins.
      {"default", false, true, DType::f32, 3, {1, 2, 4}},
      {"RN50_CUDNN_NONDET=1", true, true, DType::f32, 1, {2, 4}},
      // F32 without TF32: no tensor-core engine; 5 (2.5 ms) beats 0 (3 ms).
      {"--no-tf32 f32", false, false, DType::f32, 5, {1, 2, 3, 4}},
      {"--no-tf32 f16", false, false, DType::f16, 3, {1, 2, 4}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    FreshStore fresh;
    Nondet nd(k.nondet);
    auto be = backend("graph", k.tf32);
    Conv v = make_conv(*be, k.dt);
    const size_t x0 = stub::num_graph_executes(), c0 = stub::num_calls();
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    const std::vector<stub::GraphExecute> xs = stub::graph_executes(x0);
    const std::vector<StubCall> cs = stub::calls(c0);
    ASSERT_FALSE(xs.empty());
    EXPECT_EQ(xs.back().engine, k.chosen) << str(engines_of(xs));
    for (int64_t e : k.never) EXPECT_FALSE(ran(xs, e)) << "engine " << e << ": " << str(engines_of(xs));
    // Engine 4's plan does not finalize: tried (it qualifies), skipped.
    EXPECT_GE(count_on(cs, "cudnnBackendFinalize", "EXECUTION_PLAN CUDNN_STATUS_NOT_SUPPORTED"),
              1)
        << dump(cs);
    for (const auto& x : xs) EXPECT_FALSE(x.failed);
  }
}

TEST(CudaConvGraphHostCalls, TimesOncePerKeyThenRunsWithoutBuilding) {
  FreshStore fresh;
  const size_t live0 = stub::live_backend_descriptors();
  auto be = backend("graph");
  Conv v = make_conv(*be);
  size_t x0 = stub::num_graph_executes(), c0 = stub::num_calls();
  be->conv2d_fwd(v.p, v.x, v.w, v.y);
  std::vector<stub::GraphExecute> xs = stub::graph_executes(x0);
  std::vector<StubCall> cs = stub::calls(c0);
  // Engines 3, 0 and 5 finalize (4 does not, 1 and 2 are filtered): each a warm-up and three
  // timed runs, then the call itself on the fastest (3).
  EXPECT_EQ(xs.size(), 3u * 4u + 1u) << str(engines_of(xs));
  EXPECT_EQ(count(cs, "cudaEventElapsedTime"), 3);
  EXPECT_EQ(count(cs, "cudaEventSynchronize"), 3);
  EXPECT_EQ(xs.back().engine, 3);
  for (Tensor* y : {&v.y, static_cast<Tensor*>(nullptr)}) {
    SCOPED_TRACE(y ? "same tensors" : "other tensors of the key");
    Conv u = y ? v : make_conv(*be);
    x0 = stub::num_graph_executes();
    c0 = stub::num_calls();
    be->conv2d_fwd(u.p, u.x, u.w, u.y);
    xs = stub::graph_executes(x0);
    cs = stub::calls(c0);
    ASSERT_EQ(xs.size(), 1u);
    EXPECT_EQ(xs[0].engine, 3);
    EXPECT_EQ(xs[0].ptrs, (std::vector<const void*>{u.x.data(), u.w.data(), u.y.data()}));
    // Only the variant pack is made: no graph, heuristics, plan, timing or synchronisation.
    EXPECT_EQ(count(cs, "cudnnBackendCreateDescriptor"), 1) << dump(cs);
    EXPECT_EQ(count_on(cs, "cudnnBackendCreateDescriptor", "VARIANT_PACK"), 1) << dump(cs);
    EXPECT_EQ(count(cs, "cudaEventElapsedTime"), 0);
    EXPECT_EQ(count(cs, "cudaEventSynchronize"), 0);
    EXPECT_EQ(count(cs, "cudaStreamSynchronize"), 0);
    EXPECT_EQ(count(cs, "cudaMalloc"), 0);
  }
  // The plan's descriptors live as long as the backend, the variant packs only for their call.
  EXPECT_GT(stub::live_backend_descriptors(), live0);
  be.reset();
  EXPECT_EQ(stub::live_backend_descriptors(), live0);
}

TEST(CudaConvGraphHostCalls, VariantPackCarriesTheCallersPointersAndWorkspace) {
  FreshStore fresh;
  auto be = backend("graph");
  Conv v = make_conv(*be);
  struct Dir {
    const char* name;
    const void *x, *w, *y;  // by role
  };
  const Dir dirs[] = {{"fwd", v.x.data(), v.w.data(), v.y.data()},
                      {"bwd_data", v.x.data(), v.w.data(), v.y.data()},
                      {"bwd_filter", v.x.data(), v.w.data(), v.y.data()}};
  for (const Dir& d : dirs) {
    SCOPED_TRACE(d.name);
    const size_t o0 = stub::num_graph_ops(), x0 = stub::num_graph_executes();
    if (std::string(d.name) == "fwd") be->conv2d_fwd(v.p, v.x, v.w, v.y);
    if (std::string(d.name) == "bwd_data") be->conv2d_bwd_data(v.p, v.y, v.w, v.x);
    if (std::string(d.name) == "bwd_filter") be->conv2d_bwd_weights(v.p, v.x, v.y, v.w);
    const std::vector<stub::GraphConvOp> ops = stub::graph_ops(o0);
    const std::vector<stub::GraphExecute> xs = stub::graph_executes(x0);
    ASSERT_EQ(ops.size(), 1u);
    ASSERT_FALSE(xs.empty());
    const stub::GraphExecute& run = xs.back();
    auto ptr_of = [&](int64_t uid) -> const void* {
      auto it = std::find(run.uids.begin(), run.uids.end(), uid);
      return it == run.uids.end() ? nullptr : run.ptrs[static_cast<size_t>(it - run.uids.begin())];
    };
    EXPECT_EQ(ptr_of(ops[0].x.uid), d.x);
    EXPECT_EQ(ptr_of(ops[0].w.uid), d.w);
    EXPECT_EQ(ptr_of(ops[0].y.uid), d.y);
    EXPECT_EQ(run.plan_ws, 8192u);  // engine 3's
    ASSERT_NE(run.ws, nullptr);
    EXPECT_GE(stub::device_bytes_from(run.ws), run.plan_ws);
    EXPECT_FALSE(run.failed);
  }
  // OIHW weights with NHWC activations: the weights go to cuDNN through the plan's scratch.
  Conv m = make_conv(*be, DType::f32, Layout::NHWC, Layout::NCHW);
  const size_t o0 = stub::num_graph_ops(), x0 = stub::num_graph_executes();
  be->conv2d_fwd(m.p, m.x, m.w, m.y);
  const std::vector<stub::GraphConvOp> ops = stub::graph_ops(o0);
  const std::vector<stub::GraphExecute> xs = stub::graph_executes(x0);
  ASSERT_EQ(ops.size(), 1u);
  ASSERT_FALSE(xs.empty());
  EXPECT_EQ(ops[0].w.strides, (std::vector<int64_t>{72, 1, 24, 8}));  // KRSC
  const auto& run = xs.back();
  EXPECT_EQ(run.ptrs[0], m.x.data());
  EXPECT_NE(run.ptrs[1], m.w.data());
  EXPECT_GE(stub::device_bytes_from(run.ptrs[1]), static_cast<size_t>(m.w.nbytes()));
  EXPECT_EQ(run.ptrs[2], m.y.data());
}

std::vector<std::string> lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

TEST(CudaConvGraphHostCalls, ChoicePersistsThroughTheCacheFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("rn50_conv_graph_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cache = (dir / "cudnn.cache").string();
  auto heuristics = [](const std::vector<StubCall>& cs) {
    return count_on(cs, "cudnnBackendFinalize", "ENGINEHEUR");
  };
  {
    FreshStore first(cache, (dir / "first.log").string());
    auto be = backend("graph");
    Conv v = make_conv(*be);
    const size_t c0 = stub::num_calls();
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    EXPECT_EQ(heuristics(stub::calls(c0)), 2);
  }
  std::vector<std::string> ls = lines(cache);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_NE(ls[0].find("\"api\":\"graph\""), std::string::npos) << ls[0];
  EXPECT_NE(ls[0].find("\"knobs\":[[" + std::to_string(CUDNN_KNOB_TYPE_STAGES) + ",3]"),
            std::string::npos)
      << ls[0];
  EXPECT_NE(ls[0].find("\"algo\":3"), std::string::npos) << ls[0];
  {
    // The next process: a fresh store on the file, a fresh backend: no heuristics, no timing.
    FreshStore next(cache, (dir / "next.log").string());
    auto be = backend("graph");
    Conv v = make_conv(*be);
    const size_t c0 = stub::num_calls(), x0 = stub::num_graph_executes();
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    const std::vector<StubCall> cs = stub::calls(c0);
    EXPECT_EQ(heuristics(cs), 0) << dump(cs);
    EXPECT_EQ(count(cs, "cudaEventElapsedTime"), 0);
    EXPECT_EQ(engines_of(stub::graph_executes(x0)), (std::vector<int64_t>{3}));
    EXPECT_EQ(next.store.cache_loaded(), 1);
    // The legacy API never takes the graph's choice: the same shapes search.
    auto legacy = backend("legacy");
    Conv u = make_conv(*legacy);
    const size_t c1 = stub::num_calls();
    legacy->conv2d_fwd(u.p, u.x, u.w, u.y);
    EXPECT_EQ(count(stub::calls(c1), "cudnnFindConvolutionForwardAlgorithmEx"), 1);
  }
  const std::vector<std::string> log = lines(dir / "next.log");
  ASSERT_GE(log.size(), 1u);
  EXPECT_NE(log[0].find("\"source\":\"cache\""), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("\"api\":\"graph\""), std::string::npos) << log[0];
  {
    // A stored engine that no longer builds (not in this cuDNN): searched again.
    std::string l = lines(cache)[0];
    l.replace(l.find("\"algo\":3"), 8, "\"algo\":99");
    std::ofstream(cache, std::ios::trunc) << l << '\n';
    FreshStore stale(cache, (dir / "stale.log").string());
    auto be = backend("graph");
    Conv v = make_conv(*be);
    const size_t c0 = stub::num_calls(), x0 = stub::num_graph_executes();
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    EXPECT_EQ(heuristics(stub::calls(c0)), 2);
    EXPECT_EQ(stub::graph_executes(x0).back().engine, 3);
    const std::vector<std::string> slog = lines(dir / "stale.log");
    ASSERT_EQ(slog.size(), 1u);
    EXPECT_NE(slog[0].find("no longer builds"), std::string::npos) << slog[0];
    EXPECT_NE(slog[0].find("\"source\":\"search\""), std::string::npos) << slog[0];
  }
  fs::remove_all(dir);
}

TEST(CudaConvGraphHostCalls, CaptureAfterOneEagerCallReplaysWithoutAllocationOrSync) {
  FreshStore fresh;
  auto be = backend("graph");
  Conv v = make_conv(*be, DType::f16, Layout::NHWC);
  auto work = [&] {
    be->conv2d_fwd(v.p, v.x, v.w, v.y);
    be->conv2d_bwd_data(v.p, v.y, v.w, v.x);
    be->conv2d_bwd_weights(v.p, v.x, v.y, v.w);
  };
  work();  // eager: graphs, heuristics, timing, workspace
  const size_t c0 = stub::num_calls();
  std::unique_ptr<Graph> g = be->capture(work);
  ASSERT_TRUE(g);
  const std::vector<StubCall> cs = stub::calls(c0);
  auto b = std::find_if(cs.begin(), cs.end(),
                        [](const StubCall& c) { return c.fn == "cudaStreamBeginCapture"; });
  auto e = std::find_if(b, cs.end(),
                        [](const StubCall& c) { return c.fn == "cudaStreamEndCapture"; });
  ASSERT_TRUE(b != cs.end() && e != cs.end());
  const std::vector<StubCall> region(b, e + 1);
  for (const char* fn : {"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaHostAlloc",
                         "cudaStreamSynchronize", "cudaDeviceSynchronize",
                         "cudaEventSynchronize", "cudaEventElapsedTime"})
    EXPECT_EQ(count(region, fn), 0) << fn << dump(region);
  EXPECT_EQ(count_on(region, "cudnnBackendFinalize", "ENGINEHEUR"), 0);
  EXPECT_EQ(count_on(region, "cudnnBackendFinalize", "EXECUTION_PLAN"), 0);
  EXPECT_EQ(stub::count_in_capture(region, "cudnnBackendExecute"), 3) << dump(region);
  EXPECT_FALSE(region.back().failed) << dump(region);
  const size_t c1 = stub::num_calls();
  g->replay();
  const std::vector<StubCall> replay = stub::calls(c1);
  EXPECT_EQ(count(replay, "cudaGraphLaunch"), 1) << dump(replay);
  EXPECT_EQ(count(replay, "cudnnBackendExecute"), 0);
  EXPECT_EQ(count(replay, "cudaMalloc"), 0);
}

}  // namespace
}  // namespace rn50
