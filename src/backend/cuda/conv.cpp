// rn50 CUDA backend: 2-D convolution forward, backward data and backward filter on cuDNN 9's
// legacy convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter).
//
// Each call maps to a ConvPlan (plans.h) keyed by direction, the three tensors (dtype, logical
// shape, layout, pointer alignment), stride and pad. On the first call with a key the plan's
// descriptors are built and the algorithm is chosen ONCE by cudnnFind*AlgorithmEx on the
// caller's tensors, given as much workspace as the most demanding algorithm asks (up to
// kWorkspaceCap): the fastest deterministic result whose status is success, whose workspace
// fits kWorkspaceCap and whose math type is allowed (no TF32 for F32 when
// BackendOptions::allow_tf32 is false); a non-deterministic one only when no deterministic one
// qualifies, or whenever RN50_CUDNN_NONDET=1. The choice is remembered for the whole process
// (another backend or model with the same convolution takes it without searching) and, with
// RN50_CUDNN_CACHE, between processes; RN50_CUDNN_LOG logs each plan's choice (conv_choices.h).
// The shared workspace is grown to the plan's need then; later calls neither allocate nor
// synchronise, so they can be recorded into a CUDA graph.
//
// Descriptors: activations with cudnnSetTensor4dDescriptor (CUDNN_TENSOR_NCHW / _NHWC), the
// filter with cudnnSetFilter4dDescriptor (NCHW = KCRS = torchvision OIHW, NHWC = KRSC);
// convolution: pad, stride, dilation 1, CUDNN_CROSS_CORRELATION (what torch calls conv2d),
// compute type CUDNN_DATA_FLOAT for every dtype (F16 / BF16 data with F32 accumulation), math
// type CUDNN_TENSOR_OP_MATH for F16 / BF16 and, for F32, CUDNN_DEFAULT_MATH (TF32 allowed) or
// CUDNN_FMA_MATH (--no-tf32). After the search the descriptor takes the math type of the chosen
// result (cuDNN selects kernels by algorithm + math type).
//
// Layouts: cuDNN sees all three operands in one compute layout, that of the main activation
// operand (x for forward and backward filter, dy for backward data). An operand stored in the
// other layout (e.g. OIHW weights with NHWC activations, or an output requested in the other
// layout) is converted into / out of the plan's scratch buffers. If cuDNN has no algorithm for
// the configuration in NCHW, the plan retries with every operand in NHWC.
// Outputs are overwritten (alpha 1, beta 0; float scalars for F32/F16/BF16 data).
//
// With RN50_CUDNN_API=graph the three directions run on cuDNN's graph API instead (run_conv
// below is where the choice is made; conv_graph.h), with the same operand checks, plan keys,
// compute layouts and conversions (conv_common.h).
//
// conv2d_bias_act_fwd (inference): cudnnConvolutionBiasActivationForward, y = act(conv(x) +
// z + bias) in one kernel, for F32 and F16 operands in one layout (fused_plan); otherwise, or
// when cuDNN refuses the configuration on the first call, conv2d_fwd then the bias_act kernel.
#include <fmt/format.h>

#include <climits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/conv_choices.h"
#include "backend/cuda/conv_common.h"
#include "backend/cuda/conv_graph.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/plans.h"
#include "core/check.h"

namespace rn50::cuda {

ConvPlan::~ConvPlan() {
  if (act) (void)cudnnDestroyActivationDescriptor(act);
  if (bias) (void)cudnnDestroyTensorDescriptor(bias);
  if (conv) (void)cudnnDestroyConvolutionDescriptor(conv);
  if (w) (void)cudnnDestroyFilterDescriptor(w);
  if (y) (void)cudnnDestroyTensorDescriptor(y);
  if (x) (void)cudnnDestroyTensorDescriptor(x);
}

namespace conv_detail {

Roles roles(Dir d) {
  switch (d) {
    case Dir::fwd: return {"conv2d_fwd", "x", "w", "y", 2};
    case Dir::bwd_data: return {"conv2d_bwd_data", "dx", "w", "dy", 0};
    case Dir::bwd_filter: return {"conv2d_bwd_weights", "x", "dw", "dy", 1};
  }
  return {"conv2d", "x", "w", "y", 2};
}

/// Validates the three role tensors of direction `d` (device, rank, dtype, shapes, int range)
/// and returns the sizes. OH = (H + 2*pad - R) / stride + 1 (floor), likewise OW.
Geo conv_geo(const CudaBackend& be, Dir d, const Conv2dParams& p, const Tensor& x,
             const Tensor& w, const Tensor& y) {
  const Roles r = roles(d);
  be.check_device(r.op, r.x, x);
  be.check_device(r.op, r.w, w);
  be.check_device(r.op, r.y, y);
  RN50_CHECK(x.ndim() == 4 && w.ndim() == 4 && y.ndim() == 4,
             "cuda {}: expected 4-D tensors, got {} {}, {} {}, {} {}", r.op, r.x, x.str(), r.w,
             w.str(), r.y, y.str());
  RN50_CHECK(p.stride >= 1 && p.pad >= 0, "cuda {}: bad stride {} / pad {}", r.op, p.stride,
             p.pad);
  const DType dt = x.dtype();
  RN50_CHECK((dt == DType::f32 || dt == DType::f16 || dt == DType::bf16) && w.dtype() == dt &&
                 y.dtype() == dt,
             "cuda {}: {} {}, {} {} and {} {} must share one dtype of F32, F16, BF16", r.op, r.x,
             x.str(), r.w, w.str(), r.y, y.str());
  Geo g{x.n(), x.c(), x.h(), x.w(), w.n(), w.h(), w.w(), 0, 0};
  g.OH = (g.H + 2 * p.pad - g.R) / p.stride + 1;
  g.OW = (g.W + 2 * p.pad - g.S) / p.stride + 1;
  RN50_CHECK(w.c() == g.C && g.R >= 1 && g.S >= 1 && g.H + 2 * p.pad >= g.R &&
                 g.W + 2 * p.pad >= g.S && g.OH > 0 && g.OW > 0,
             "cuda {}: {} {} does not match {} {} (stride {}, pad {})", r.op, r.x, x.str(), r.w,
             w.str(), p.stride, p.pad);
  RN50_CHECK(y.shape() == std::vector<int64_t>({g.N, g.K, g.OH, g.OW}),
             "cuda {}: {} is {}, expected [{},{},{},{}] for {} {}, {} {} (stride {}, pad {})",
             r.op, r.y, y.str(), g.N, g.K, g.OH, g.OW, r.x, x.str(), r.w, w.str(), p.stride,
             p.pad);
  // cuDNN's 4-D descriptors take int sizes and strides.
  RN50_CHECK(x.numel() <= INT_MAX && y.numel() <= INT_MAX && w.numel() <= INT_MAX,
             "cuda {}: tensors of more than 2^31-1 elements are not supported ({} {}, {} {})",
             r.op, r.x, x.str(), r.y, y.str());
  return g;
}

std::string conv_key(Dir d, const Conv2dParams& p, const Tensor& x, const Tensor& w,
                     const Tensor& y) {
  const Roles r = roles(d);
  return fmt::format("{} {}={}@{} {}={}@{} {}={}@{} s{} p{}", r.op, r.x, x.str(),
                     alignment(x.data()), r.w, w.str(), alignment(w.data()), r.y, y.str(),
                     alignment(y.data()), p.stride, p.pad);
}

namespace {
/// A role operand as cuDNN sees it: the caller's tensor when its memory order already matches
/// layout `l`, else a view of the scratch buffer `tmp` in that layout.
Tensor in_layout(const CudaBackend& be, const Tensor& t, Layout l, DeviceBuffer& tmp) {
  if (same_order(t, l)) return t;
  return Tensor::view(tmp.ensure(t.nbytes()), t.shape(), t.dtype(), l, be.device());
}
}  // namespace

Operands prepare(CudaBackend& be, Layout l, DeviceBuffer& xt, DeviceBuffer& wt, DeviceBuffer& yt,
                 int out, const Tensor& x, const Tensor& w, const Tensor& y) {
  Operands o{in_layout(be, x, l, xt), in_layout(be, w, l, wt), in_layout(be, y, l, yt)};
  if (out != 0 && o.x.data() != x.data()) be.convert_on_device(x, o.x);
  if (out != 1 && o.w.data() != w.data()) be.convert_on_device(w, o.w);
  if (out != 2 && o.y.data() != y.data()) be.convert_on_device(y, o.y);
  return o;
}

void finish(CudaBackend& be, int out, const Operands& o, const Tensor& x, const Tensor& w,
            const Tensor& y) {
  const Tensor& got = out == 0 ? o.x : out == 1 ? o.w : o.y;
  const Tensor& want = out == 0 ? x : out == 1 ? w : y;
  if (got.data() == want.data()) return;
  Tensor dst = want;  // a handle to the caller's memory
  be.convert_on_device(got, dst);
}

}  // namespace conv_detail

namespace {

using namespace conv_detail;

cudnnTensorFormat_t format_of(Layout l) {
  return l == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

/// The math type requested on the convolution descriptor (see the file comment).
cudnnMathType_t requested_math(DType dt, bool tf32) {
  if (dt == DType::f32) return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

/// Whether a search result with math type `m` is acceptable: F32 without TF32 only runs FMA
/// kernels; down-conversion of the data (ALLOW_CONVERSION) is only harmless for F16 data.
bool math_allowed(cudnnMathType_t m, DType dt, bool tf32) {
  if (dt == DType::f32 && !tf32) return m == CUDNN_FMA_MATH;
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return dt == DType::f16;
  return true;
}

/// Builds the descriptors of a plan in layout `l`.
std::unique_ptr<ConvPlan> make_plan(const CudaBackend& be, Layout l, DType dt, const Geo& g,
                                    const Conv2dParams& p) {
  auto plan = std::make_unique<ConvPlan>();
  plan->layout = l;
  const cudnnDataType_t cdt = cudnn_dtype(dt);
  RN50_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  RN50_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->x, format_of(l), cdt, int(g.N), int(g.C),
                                              int(g.H), int(g.W)));
  RN50_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  RN50_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y, format_of(l), cdt, int(g.N), int(g.K),
                                              int(g.OH), int(g.OW)));
  RN50_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  RN50_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, cdt, format_of(l), int(g.K), int(g.C),
                                              int(g.R), int(g.S)));
  RN50_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  RN50_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, p.pad, p.pad, p.stride, p.stride,
                                                   1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
  RN50_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, requested_math(dt, be.allow_tf32())));
  int n = 0, c = 0, h = 0, w = 0;
  RN50_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &n, &c, &h, &w));
  RN50_CHECK(n == g.N && c == g.K && h == g.OH && w == g.OW,
             "cuda conv2d: cuDNN output size [{},{},{},{}] differs from [{},{},{},{}]", n, c, h,
             w, g.N, g.K, g.OH, g.OW);
  return plan;
}

/// Largest workspace (<= kWorkspaceCap) any algorithm of direction `d` reports for the plan's
/// descriptors; algorithms that do not support the configuration are skipped.
size_t max_workspace(cudnnHandle_t h, Dir d, const ConvPlan& plan) {
  size_t most = 0, sz = 0;
  // `take` reads sz in its body, after the query has written it. (Passing sz as a second
  // argument beside the query's status read it before the query ran: GCC evaluates arguments
  // right to left. Every search then got no workspace, so only workspace-free algorithms were
  // timed, and the first GPU run trained at 1/27 of PyTorch's speed.)
  auto take = [&](cudnnStatus_t st) {
    if (st == CUDNN_STATUS_SUCCESS && sz <= kWorkspaceCap && sz > most) most = sz;
  };
  switch (d) {
    case Dir::fwd:
      for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
        sz = 0;
        take(cudnnGetConvolutionForwardWorkspaceSize(h, plan.x, plan.w, plan.conv, plan.y,
                                                     cudnnConvolutionFwdAlgo_t(a), &sz));
      }
      break;
    case Dir::bwd_data:
      for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++a) {
        sz = 0;
        take(cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, plan.w, plan.y, plan.conv, plan.x, cudnnConvolutionBwdDataAlgo_t(a), &sz));
      }
      break;
    case Dir::bwd_filter:
      for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++a) {
        sz = 0;
        take(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, plan.x, plan.y, plan.conv, plan.w, cudnnConvolutionBwdFilterAlgo_t(a), &sz));
      }
      break;
  }
  return most;
}

/// The search results as the policy sees them (conv_choices.h).
template <class Perf>
std::vector<SearchResult> results_of(const std::vector<Perf>& res, int n, DType dt, bool tf32) {
  std::vector<SearchResult> v;
  for (int i = 0; i < n; ++i) {
    const Perf& r = res[static_cast<size_t>(i)];
    v.push_back({static_cast<int>(r.algo), r.status == CUDNN_STATUS_SUCCESS,
                 cudnnGetErrorString(r.status), r.memory, r.time, static_cast<int>(r.mathType),
                 math_allowed(r.mathType, dt, tf32), r.determinism == CUDNN_DETERMINISTIC});
  }
  return v;
}

/// Runs the algorithm search of direction `d` on the prepared operands, unless the process or
/// RN50_CUDNN_CACHE remembers a choice for the key (conv_choices.h), and stores the choice in
/// the plan. Returns false (with `why` filled) when no acceptable algorithm exists.
bool find_algo(CudaBackend& be, Dir d, DType dt, ConvPlan& plan, const Operands& o,
               const std::string& key, std::string& why) {
  cudnnHandle_t h = be.cudnn();
  const bool tf32 = be.allow_tf32();
  const std::string store_key =
      fmt::format("{} in {} tf32={}", key, layout_name(plan.layout), tf32);
  ChoiceStore& store = ChoiceStore::instance();
  const size_t cudnn_version = cudnnGetVersion();
  auto adopt = [&](const Choice& c) {
    switch (d) {
      case Dir::fwd: plan.fwd_algo = cudnnConvolutionFwdAlgo_t(c.algo); break;
      case Dir::bwd_data: plan.bwd_data_algo = cudnnConvolutionBwdDataAlgo_t(c.algo); break;
      case Dir::bwd_filter: plan.bwd_filter_algo = cudnnConvolutionBwdFilterAlgo_t(c.algo); break;
    }
    plan.ws_bytes = c.ws_bytes;
    RN50_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, cudnnMathType_t(c.math)));
    plan.found = true;
  };
  if (auto hit = store.find(be.gpu_name(), cudnn_version, store_key)) {
    adopt(hit->first);
    store.log(roles(d).op, key, layout_name(plan.layout),
              hit->second == ChoiceStore::Source::memo ? "memo" : "cache", hit->first, "");
    return true;
  }
  const size_t ws_size = max_workspace(h, d, plan);
  void* ws = be.workspace.ensure(ws_size);
  int count = 0, got = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  std::vector<SearchResult> results;
  switch (d) {
    case Dir::fwd: {
      RN50_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> res(static_cast<size_t>(count > 0 ? count : 1));
      st = cudnnFindConvolutionForwardAlgorithmEx(h, plan.x, o.x.data(), plan.w, o.w.data(),
                                                  plan.conv, plan.y, o.y.data(), count, &got,
                                                  res.data(), ws, ws_size);
      results = results_of(res, got, dt, tf32);
      break;
    }
    case Dir::bwd_data: {
      RN50_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> res(
          static_cast<size_t>(count > 0 ? count : 1));
      st = cudnnFindConvolutionBackwardDataAlgorithmEx(h, plan.w, o.w.data(), plan.y,
                                                       o.y.data(), plan.conv, plan.x,
                                                       o.x.data(), count, &got, res.data(), ws,
                                                       ws_size);
      results = results_of(res, got, dt, tf32);
      break;
    }
    case Dir::bwd_filter: {
      RN50_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> res(
          static_cast<size_t>(count > 0 ? count : 1));
      st = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, plan.x, o.x.data(), plan.y,
                                                         o.y.data(), plan.conv, plan.w,
                                                         o.w.data(), count, &got, res.data(), ws,
                                                         ws_size);
      results = results_of(res, got, dt, tf32);
      break;
    }
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    why = fmt::format("the algorithm search failed with {}", cudnnGetErrorString(st));
    return false;
  }
  std::string rejected;
  const std::optional<Choice> chosen =
      pick_result(results, kWorkspaceCap, cudnn_nondeterministic(), &rejected, &why);
  if (!chosen) {
    if (why.empty()) why = "no algorithm returned";
    return false;
  }
  adopt(*chosen);
  store.remember(be.gpu_name(), cudnn_version, store_key, *chosen);
  store.log(roles(d).op, key, layout_name(plan.layout), "search", *chosen, rejected);
  return true;
}

/// The plan of one call: cached, or built and searched now (first call with this key).
ConvPlan& get_plan(CudaBackend& be, Dir d, const Conv2dParams& p, const Geo& g, const Tensor& x,
                   const Tensor& w, const Tensor& y) {
  const Roles r = roles(d);
  const std::string key = conv_key(d, p, x, w, y);
  auto it = be.conv_plans.find(key);
  if (it != be.conv_plans.end()) return *it->second;

  const DType dt = x.dtype();
  const Layout main = d == Dir::bwd_data ? y.layout() : x.layout();
  // The main layout first; NCHW falls back to NHWC (cuDNN's best-supported layout).
  std::vector<Layout> tries{main};
  if (main == Layout::NCHW) tries.push_back(Layout::NHWC);
  std::string failures;
  for (Layout l : tries) {
    std::unique_ptr<ConvPlan> plan = make_plan(be, l, dt, g, p);
    const Operands o = prepare(be, plan->layout, plan->x_tmp, plan->w_tmp, plan->y_tmp, r.out, x,
                               w, y);
    std::string why;
    if (find_algo(be, d, dt, *plan, o, key, why))
      return *be.conv_plans.emplace(key, std::move(plan)).first->second;
    failures += fmt::format("{}in {}: {}", failures.empty() ? "" : " | ", layout_name(l), why);
    // The conversions queued into this plan's scratch must finish before it is freed.
    RN50_CUDA_CHECK(cudaStreamSynchronize(be.stream()));
  }
  RN50_FAIL("cuda {}: cuDNN has no usable algorithm for {}={} {}={} {}={} (stride {}, pad {}, "
            "{}TF32): {}",
            r.op, r.x, x.str(), r.w, w.str(), r.y, y.str(), p.stride, p.pad,
            be.allow_tf32() ? "" : "no ", failures);
}

/// One convolution call of direction `d` on the role tensors (x role, w role, y role).
/// The one place where the cuDNN API of conv2d_fwd, conv2d_bwd_data and conv2d_bwd_weights is
/// chosen: RN50_CUDNN_API=graph (CudaBackend::cudnn_graph_api()) runs them on the graph API
/// (conv_graph.h), the default (legacy) on the legacy API below.
void run_conv(CudaBackend& be, Dir d, const Conv2dParams& p, const Tensor& x, const Tensor& w,
              const Tensor& y) {
  const Geo g = conv_geo(be, d, p, x, w, y);
  if (be.cudnn_graph_api()) {
    run_conv_graph(be, d, p, g, x, w, y);
    return;
  }
  ConvPlan& plan = get_plan(be, d, p, g, x, w, y);
  const int out = roles(d).out;
  const Operands o =
      prepare(be, plan.layout, plan.x_tmp, plan.w_tmp, plan.y_tmp, out, x, w, y);
  void* ws = be.workspace.ensure(plan.ws_bytes);
  const float alpha = 1.f, beta = 0.f;
  switch (d) {
    case Dir::fwd:
      RN50_CUDNN_CHECK(cudnnConvolutionForward(be.cudnn(), &alpha, plan.x, o.x.data(), plan.w,
                                               o.w.data(), plan.conv, plan.fwd_algo, ws,
                                               plan.ws_bytes, &beta, plan.y, o.y.data()));
      break;
    case Dir::bwd_data:
      RN50_CUDNN_CHECK(cudnnConvolutionBackwardData(be.cudnn(), &alpha, plan.w, o.w.data(),
                                                    plan.y, o.y.data(), plan.conv,
                                                    plan.bwd_data_algo, ws, plan.ws_bytes, &beta,
                                                    plan.x, o.x.data()));
      break;
    case Dir::bwd_filter:
      RN50_CUDNN_CHECK(cudnnConvolutionBackwardFilter(be.cudnn(), &alpha, plan.x, o.x.data(),
                                                      plan.y, o.y.data(), plan.conv,
                                                      plan.bwd_filter_algo, ws, plan.ws_bytes,
                                                      &beta, plan.w, o.w.data()));
      break;
  }
  finish(be, out, o, x, w, y);
}

}  // namespace

void CudaBackend::conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                             Tensor& y) {
  run_conv(*this, Dir::fwd, p, x, w, y);
}

namespace {

/// The fused inference plan of conv2d_bias_act_fwd for one key, or nullptr when the operands
/// cannot go to cudnnConvolutionBiasActivationForward as they are (layouts differ, bf16).
/// Built on the first call: the algorithm is searched as for conv2d_fwd when the activation is
/// ReLU; cuDNN runs an identity activation with IMPLICIT_PRECOMP_GEMM only, so that algorithm
/// is taken then. The first fused call itself is checked: a status other than success marks
/// the plan unfused (the caller then runs the convolution and the bias_act kernel).
ConvPlan* fused_plan(CudaBackend& be, const Conv2dParams& p, const Geo& g, const Tensor& x,
                     const Tensor& w, const Tensor& bias, const Tensor& z, bool relu,
                     const Tensor& y, bool& first) {
  const DType dt = x.dtype();
  first = false;
  if (dt == DType::bf16 || x.layout() != y.layout() || !same_order(w, x.layout()) ||
      (z.defined() && !same_order(z, x.layout())))
    return nullptr;
  const std::string key = fmt::format(
      "conv2d_bias_act x={}@{} w={}@{} y={}@{} z={} relu={} s{} p{}", x.str(),
      alignment(x.data()), w.str(), alignment(w.data()), y.str(), alignment(y.data()),
      z.defined() ? alignment(z.data()) : 0, relu, p.stride, p.pad);
  auto it = be.conv_plans.find(key);
  if (it != be.conv_plans.end()) return it->second.get();
  first = true;
  std::unique_ptr<ConvPlan> plan = make_plan(be, x.layout(), dt, g, p);
  const Operands o{x, w, y};
  std::string why;
  if (relu) {
    if (!find_algo(be, Dir::fwd, dt, *plan, o, key, why)) return nullptr;
  } else {
    plan->fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(be.cudnn(), plan->x, plan->w, plan->conv,
                                                plan->y, plan->fwd_algo, &ws) !=
        CUDNN_STATUS_SUCCESS)
      return nullptr;
    plan->ws_bytes = ws;
  }
  RN50_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->bias));
  RN50_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->bias, CUDNN_TENSOR_NCHW, cudnn_dtype(dt), 1,
                                              int(g.K), 1, 1));
  RN50_CUDNN_CHECK(cudnnCreateActivationDescriptor(&plan->act));
  RN50_CUDNN_CHECK(cudnnSetActivationDescriptor(
      plan->act, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
      CUDNN_NOT_PROPAGATE_NAN, 0.0));
  plan->fused = true;
  return be.conv_plans.emplace(key, std::move(plan)).first->second.get();
}

}  // namespace

void CudaBackend::conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                                      const Tensor& bias, const Tensor& z, bool relu,
                                      Tensor& y) {
  const char* op = "conv2d_bias_act_fwd";
  const Geo g = conv_geo(*this, Dir::fwd, p, x, w, y);
  check_device(op, "bias", bias);
  RN50_CHECK(bias.ndim() == 1 && bias.dim(0) == g.K && bias.dtype() == y.dtype(),
             "cuda {}: bias is {}, expected ({}) in y's dtype {}", op, bias.str(), g.K,
             dtype_name(y.dtype()));
  if (z.defined()) {
    check_device(op, "z", z);
    RN50_CHECK(z.shape() == y.shape() && z.dtype() == y.dtype() && z.data() != y.data(),
               "cuda {}: z is {}, expected y's shape and dtype ({}) in its own memory", op,
               z.str(), y.str());
  }
  bool first = false;
  ConvPlan* plan = fused_plan(*this, p, g, x, w, bias, z, relu, y, first);
  if (plan && plan->fused) {
    const float alpha1 = 1.f, alpha2 = z.defined() ? 1.f : 0.f;
    auto fused_call = [&] {
      void* ws = workspace.ensure(plan->ws_bytes);
      return cudnnConvolutionBiasActivationForward(
          cudnn(), &alpha1, plan->x, x.data(), plan->w, w.data(), plan->conv, plan->fwd_algo, ws,
          plan->ws_bytes, &alpha2, plan->y, z.defined() ? z.data() : y.data(), plan->bias,
          bias.data(), plan->act, plan->y, y.data());
    };
    cudnnStatus_t st = fused_call();
    if (st != CUDNN_STATUS_SUCCESS && first &&
        plan->fwd_algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) {
      // The searched algorithm may have no fused form: the one every configuration has.
      size_t ws = 0;
      plan->fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
      if (cudnnGetConvolutionForwardWorkspaceSize(cudnn(), plan->x, plan->w, plan->conv, plan->y,
                                                  plan->fwd_algo, &ws) == CUDNN_STATUS_SUCCESS) {
        plan->ws_bytes = ws;
        st = fused_call();
      }
    }
    if (st == CUDNN_STATUS_SUCCESS) return;
    // Only the first call may find the configuration unsupported; later ones must not fail.
    RN50_CHECK(first, "cuda {}: cudnnConvolutionBiasActivationForward failed: {}", op,
               cudnnGetErrorString(st));
    plan->fused = false;
  }
  conv2d_fwd(p, x, w, y);
  bias_act(bias, z, relu, y);
}

void CudaBackend::conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                                  Tensor& dx) {
  run_conv(*this, Dir::bwd_data, p, dx, w, dy);
}

void CudaBackend::conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                                     Tensor& dw) {
  run_conv(*this, Dir::bwd_filter, p, x, dw, dy);
}

}  // namespace rn50::cuda
