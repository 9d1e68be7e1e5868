// rn50 CUDA backend: convolutions on cuDNN's graph (backend) API (conv_graph.h).
#include "backend/cuda/conv_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/conv_choices.h"
#include "backend/cuda/plans.h"
#include "core/check.h"

namespace rn50::cuda {

namespace {

using conv_detail::Dir;
using conv_detail::Geo;
using conv_detail::kWorkspaceCap;
using conv_detail::Operands;
using conv_detail::roles;

/// Unique ids of the three role tensors in the graph and the variant pack.
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;
/// How many execution plans are timed on the first call of a key, and runs timed per plan
/// (after one untimed warm-up run).
constexpr int kTimedPlans = 4;
constexpr int kTimedRuns = 3;
/// The largest byte alignment claimed for an operand (cuDNN's kernels load at most 16 bytes).
constexpr uint32_t kMaxAlignment = 16;

/// Throws unless `st` is success: "<call>(<what>) failed with <status> (plan <key>)".
void check(cudnnStatus_t st, const char* call, const char* what, const std::string& key) {
  RN50_CHECK(st == CUDNN_STATUS_SUCCESS, "cuda conv (cuDNN graph API): {}({}) failed with {} "
             "(plan {})", call, what, cudnnGetErrorString(st), key);
}

/// cudnnBackendSetAttribute, checked; RN50_SET names the attribute in the error.
void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, const char* name,
              cudnnBackendAttributeType_t t, int64_t n, const void* v, const std::string& key) {
  check(cudnnBackendSetAttribute(d, a, t, n, v), "cudnnBackendSetAttribute", name, key);
}
#define RN50_SET(desc, attr, type, n, ptr) set_attr((desc), (attr), #attr, (type), (n), (ptr), key)

/// cudnnBackendGetAttribute, checked; returns the element count. RN50_GET names the attribute.
int64_t get_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, const char* name,
                 cudnnBackendAttributeType_t t, int64_t n, void* v, const std::string& key) {
  int64_t got = 0;
  check(cudnnBackendGetAttribute(d, a, t, n, &got, v), "cudnnBackendGetAttribute", name, key);
  return got;
}
#define RN50_GET(desc, attr, type, n, ptr) get_attr((desc), (attr), #attr, (type), (n), (ptr), key)

/// cudnnBackendFinalize, checked.
void finalize(const BackendDesc& d, const char* what, const std::string& key) {
  check(cudnnBackendFinalize(d.get()), "cudnnBackendFinalize", what, key);
}

/// A descriptor of `type`, created (checked); RN50_DESC names the type in the error.
#define RN50_DESC(type) BackendDesc((type), #type, key)

/// NCHW-ordered strides of a 4-D tensor of dims (n, c, h, w) stored in layout `l`.
std::array<int64_t, 4> strides_of(const std::array<int64_t, 4>& d, Layout l) {
  if (l == Layout::NHWC) return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

/// A finalized tensor descriptor of dims `dims` (NCHW order) in layout `l`.
BackendDesc tensor_desc(int64_t uid, const std::array<int64_t, 4>& dims, Layout l, DType dt,
                        const void* data, const std::string& key) {
  BackendDesc t = RN50_DESC(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t cdt = cudnn_dtype(dt);
  const std::array<int64_t, 4> strides = strides_of(dims, l);
  const int64_t align = std::min(alignment(data), kMaxAlignment);
  RN50_SET(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &cdt);
  RN50_SET(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  RN50_SET(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  RN50_SET(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  RN50_SET(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  finalize(t, "CUDNN_BACKEND_TENSOR_DESCRIPTOR", key);
  return t;
}

/// The attribute names of one direction's operation descriptor.
struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  const char* type_name;
  cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
};

OpAttrs op_attrs(Dir d) {
  switch (d) {
    case Dir::fwd:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR",
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    case Dir::bwd_data:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR",
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
    case Dir::bwd_filter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR",
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  }
  RN50_FAIL("cuda conv (cuDNN graph API): unknown direction");
}

/// Builds the plan's operation graph (file comment of conv_graph.h, step 1) for the operands
/// `o` in the plan's layout.
void build_graph(const CudaBackend& be, Dir d, const Conv2dParams& p, const Geo& g,
                 const Operands& o, GraphConvPlan& plan, const std::string& key) {
  const DType dt = o.x.dtype();
  plan.parts.push_back(tensor_desc(kUidX, {g.N, g.C, g.H, g.W}, plan.layout, dt, o.x.data(), key));
  plan.parts.push_back(tensor_desc(kUidW, {g.K, g.C, g.R, g.S}, plan.layout, dt, o.w.data(), key));
  plan.parts.push_back(
      tensor_desc(kUidY, {g.N, g.K, g.OH, g.OW}, plan.layout, dt, o.y.data(), key));
  const BackendDesc& tx = plan.parts[0];
  const BackendDesc& tw = plan.parts[1];
  const BackendDesc& ty = plan.parts[2];

  BackendDesc conv = RN50_DESC(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::array<int64_t, 2> pads{p.pad, p.pad}, strides{p.stride, p.stride}, dil{1, 1};
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data());
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data());
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2,
           strides.data());
  RN50_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil.data());
  finalize(conv, "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR", key);

  const OpAttrs a = op_attrs(d);
  BackendDesc op(a.type, a.type_name, key);
  const float alpha = 1.f, beta = 0.f;
  RN50_SET(op.get(), a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  RN50_SET(op.get(), a.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  RN50_SET(op.get(), a.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, conv.ptr());
  RN50_SET(op.get(), a.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tx.ptr());
  RN50_SET(op.get(), a.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tw.ptr());
  RN50_SET(op.get(), a.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ty.ptr());
  finalize(op, a.type_name, key);

  plan.graph = RN50_DESC(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnHandle_t h = be.cudnn();
  RN50_SET(plan.graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  RN50_SET(plan.graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           op.ptr());
  finalize(plan.graph, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR", key);
  plan.parts.push_back(std::move(conv));
  plan.parts.push_back(std::move(op));
}

/// One engine config from the heuristics, with what the filter reads.
struct Candidate {
  std::vector<BackendDesc> descs;  ///< the config, its engine, its knob choices
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;
  int64_t ws = -1;         ///< CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE (-1: not reported)
  unsigned notes = 0;      ///< numerical notes, bit n for cudnnBackendNumericalNote_t n
  const char* source = "";
  const BackendDesc& cfg() const { return descs.front(); }
  bool has(cudnnBackendNumericalNote_t n) const { return (notes >> n) & 1u; }
  std::string name() const { return fmt::format("engine {} ({})", engine, source); }
};

/// Reads the engine, its numerical notes, the knob choices and the workspace of a config.
void read_config(Candidate& c, const std::string& key) {
  const cudnnBackendDescriptor_t cfg = c.cfg().get();
  c.descs.push_back(RN50_DESC(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  const BackendDesc& eng = c.descs.back();
  cudnnBackendDescriptor_t eh = eng.get();
  RN50_GET(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eh);
  RN50_GET(eh, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &c.engine);
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  const auto max_notes = static_cast<int64_t>(notes.size());
  const int64_t n_notes = RN50_GET(eh, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                   CUDNN_TYPE_NUMERICAL_NOTE, max_notes, notes.data());
  for (int64_t i = 0; i < n_notes && i < max_notes; ++i)
    c.notes |= 1u << static_cast<unsigned>(notes[static_cast<size_t>(i)]);
  // The knob choices: descriptors made here, filled by cuDNN.
  constexpr int64_t kMaxKnobs = CUDNN_KNOB_TYPE_COUNTS;
  std::vector<cudnnBackendDescriptor_t> kh;
  const size_t first_knob = c.descs.size();
  for (int64_t i = 0; i < kMaxKnobs; ++i) {
    c.descs.push_back(RN50_DESC(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    kh.push_back(c.descs.back().get());
  }
  const int64_t n_knobs = RN50_GET(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs, kh.data());
  for (int64_t i = 0; i < n_knobs && i < kMaxKnobs; ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0;
    RN50_GET(kh[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
             1, &type);
    RN50_GET(kh[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
             &value);
    c.knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  c.descs.resize(first_knob + static_cast<size_t>(std::max<int64_t>(n_knobs, 0)));
  // The config's workspace, where this cuDNN reports it (the plan's is checked again).
  int64_t ws = -1, got = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                               &got, &ws) == CUDNN_STATUS_SUCCESS && got == 1)
    c.ws = ws;
}

/// The engine configs of one heuristics mode for the plan's graph, in the heuristics' order.
/// A mode that does not finalize for this graph gives none (noted in `why`).
std::vector<Candidate> heuristics(const GraphConvPlan& plan, cudnnBackendHeurMode_t mode,
                                  const char* source, std::string& why, const std::string& key) {
  BackendDesc h = RN50_DESC(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  RN50_SET(h.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           plan.graph.ptr());
  RN50_SET(h.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (const cudnnStatus_t st = cudnnBackendFinalize(h.get()); st != CUDNN_STATUS_SUCCESS) {
    why += fmt::format("{}heuristics {}: {}", why.empty() ? "" : "; ", source,
                       cudnnGetErrorString(st));
    return {};
  }
  const int64_t count =
      RN50_GET(h.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, nullptr);
  std::vector<Candidate> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
  std::vector<cudnnBackendDescriptor_t> handles;
  for (Candidate& c : out) {
    c.descs.push_back(RN50_DESC(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    c.source = source;
    handles.push_back(c.cfg().get());
  }
  if (out.empty()) return out;
  const int64_t got = RN50_GET(h.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, handles.data());
  out.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  for (Candidate& c : out) read_config(c, key);
  return out;
}

/// Why a candidate is turned down for dtype `dt` (conv_graph.h, step 2), or nullptr.
const char* rejection(const Candidate& c, DType dt, bool tf32, bool allow_nondet) {
  if (c.ws > static_cast<int64_t>(kWorkspaceCap)) return "workspace";
  if (c.has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)) return "reduced-precision reduction";
  if (c.has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) && dt != DType::f16)
    return "down-converts inputs";
  if (dt == DType::f32 && !tf32 && c.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE)) return "TF32";
  if (!allow_nondet && c.has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) return "non-deterministic";
  return nullptr;
}

/// An execution plan for `cfg`, finalized; empty when cuDNN does not finalize it (the status in
/// `status`). Its workspace in `ws`.
BackendDesc make_plan(const CudaBackend& be, const BackendDesc& cfg, size_t& ws,
                      cudnnStatus_t& status, const std::string& key) {
  BackendDesc plan = RN50_DESC(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  cudnnHandle_t h = be.cudnn();
  RN50_SET(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  RN50_SET(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           cfg.ptr());
  status = cudnnBackendFinalize(plan.get());
  if (status != CUDNN_STATUS_SUCCESS) return {};
  int64_t bytes = 0;
  RN50_GET(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &bytes);
  ws = static_cast<size_t>(std::max<int64_t>(bytes, 0));
  return plan;
}

/// A finalized variant pack: the operands' pointers under their uids, and the workspace.
BackendDesc variant_pack(const Operands& o, void* ws, const std::string& key) {
  BackendDesc vp = RN50_DESC(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const std::array<int64_t, 3> uids{kUidX, kUidW, kUidY};
  const std::array<void*, 3> ptrs{o.x.data(), o.w.data(), o.y.data()};
  RN50_SET(vp.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids.data());
  RN50_SET(vp.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs.data());
  RN50_SET(vp.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  finalize(vp, "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR", key);
  return vp;
}

/// Events of the timing, destroyed on every exit.
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    RN50_CUDA_CHECK(cudaEventCreateWithFlags(&start, cudaEventDefault));
    RN50_CUDA_CHECK(cudaEventCreateWithFlags(&stop, cudaEventDefault));
  }
  ~Events() {
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

/// Mean milliseconds of one run of `plan` on the operands (one warm-up run, then kTimedRuns
/// between two events); negative when cuDNN refuses to execute it.
float time_plan(CudaBackend& be, const BackendDesc& plan, const BackendDesc& vp, Events& ev) {
  cudnnHandle_t h = be.cudnn();
  if (cudnnBackendExecute(h, plan.get(), vp.get()) != CUDNN_STATUS_SUCCESS) return -1.f;
  RN50_CUDA_CHECK(cudaEventRecord(ev.start, be.stream()));
  for (int i = 0; i < kTimedRuns; ++i)
    if (cudnnBackendExecute(h, plan.get(), vp.get()) != CUDNN_STATUS_SUCCESS) return -1.f;
  RN50_CUDA_CHECK(cudaEventRecord(ev.stop, be.stream()));
  RN50_CUDA_CHECK(cudaEventSynchronize(ev.stop));
  float ms = 0.f;
  RN50_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return ms / kTimedRuns;
}

/// Rebuilds the engine config of a remembered choice (engine, knob choices) and its plan.
/// Throws rn50::Error when any step fails (the caller then searches).
void rebuild(const CudaBackend& be, GraphConvPlan& plan, const Choice& c,
             const std::string& key) {
  // Handles are copied out of `descs`: growing the vector moves its elements.
  std::vector<BackendDesc> descs;
  descs.push_back(RN50_DESC(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  descs.push_back(RN50_DESC(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  const cudnnBackendDescriptor_t cfg = descs[0].get(), eng = descs[1].get();
  const int64_t index = c.algo;
  RN50_SET(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           plan.graph.ptr());
  RN50_SET(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index);
  finalize(descs[1], "CUDNN_BACKEND_ENGINE_DESCRIPTOR", key);
  std::vector<cudnnBackendDescriptor_t> kh;
  for (const auto& [type, value] : c.knobs) {
    descs.push_back(RN50_DESC(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    const auto t = static_cast<cudnnBackendKnobType_t>(type);
    RN50_SET(descs.back().get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &t);
    RN50_SET(descs.back().get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value);
    finalize(descs.back(), "CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR", key);
    kh.push_back(descs.back().get());
  }
  RN50_SET(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng);
  if (!kh.empty())
    RN50_SET(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<int64_t>(kh.size()), kh.data());
  finalize(descs[0], "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR", key);
  size_t ws = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  BackendDesc p = make_plan(be, descs[0], ws, st, key);
  check(st, "cudnnBackendFinalize", "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR", key);
  RN50_CHECK(ws <= kWorkspaceCap, "cuda conv (cuDNN graph API): engine {} asks {} bytes of "
             "workspace (plan {})", index, ws, key);
  plan.config = std::move(descs);
  plan.plan = std::move(p);
  plan.engine = index;
  plan.ws_bytes = ws;
}

/// The search (conv_graph.h, steps 2 and 3) on the prepared operands: fills the plan and
/// `chosen`, or returns false with `why` filled.
bool search(CudaBackend& be, DType dt, GraphConvPlan& plan, const Operands& o, Choice& chosen,
            std::string& rejected, std::string& why, const std::string& key) {
  std::vector<Candidate> all = heuristics(plan, CUDNN_HEUR_MODE_A, "heuristics A", why, key);
  for (Candidate& c : heuristics(plan, CUDNN_HEUR_MODE_FALLBACK, "fallback", why, key)) {
    const bool dup = std::any_of(all.begin(), all.end(), [&](const Candidate& a) {
      return a.engine == c.engine && a.knobs == c.knobs;
    });
    if (!dup) all.push_back(std::move(c));
  }
  const bool tf32 = be.allow_tf32();
  const bool nondet = cudnn_nondeterministic();
  for (const Candidate& c : all)
    if (const char* r = rejection(c, dt, tf32, nondet))
      rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", c.name(), r);
  // Deterministic engines first; non-deterministic ones only when none of those qualifies.
  for (bool allow_nondet : {nondet, true}) {
    struct Timed {
      Candidate* c;
      BackendDesc plan;
      size_t ws;
      float ms;
    };
    std::vector<Timed> timed;
    for (Candidate& c : all) {
      if (static_cast<int>(timed.size()) == kTimedPlans) break;
      if (rejection(c, dt, tf32, allow_nondet)) continue;
      size_t ws = 0;
      cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
      BackendDesc p = make_plan(be, c.cfg(), ws, st, key);
      if (st != CUDNN_STATUS_SUCCESS || ws > kWorkspaceCap) {
        why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", c.name(),
                           st != CUDNN_STATUS_SUCCESS ? cudnnGetErrorString(st)
                                                      : "plan workspace over the cap");
        continue;
      }
      timed.push_back({&c, std::move(p), ws, -1.f});
    }
    if (timed.empty()) {
      if (allow_nondet) break;
      continue;
    }
    size_t most = 0;
    for (const Timed& t : timed) most = std::max(most, t.ws);
    void* ws = be.workspace.ensure(most);
    const BackendDesc vp = variant_pack(o, ws, key);
    Events ev;
    Timed* best = nullptr;
    for (Timed& t : timed) {
      t.ms = time_plan(be, t.plan, vp, ev);
      if (t.ms < 0)
        why += fmt::format("{}{}: execution failed", why.empty() ? "" : "; ", t.c->name());
      else if (!best || t.ms < best->ms)
        best = &t;
    }
    if (!best) {
      if (allow_nondet) break;
      continue;
    }
    Candidate& c = *best->c;
    chosen = Choice{static_cast<int>(c.engine), best->ws, static_cast<int>(c.notes), best->ms,
                    !c.has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC), true, c.knobs};
    plan.engine = c.engine;
    plan.ws_bytes = best->ws;
    plan.plan = std::move(best->plan);
    plan.config = std::move(c.descs);
    return true;
  }
  if (all.empty() && why.empty()) why = "the heuristics returned no engine config";
  if (!rejected.empty()) why += fmt::format("{}turned down: {}", why.empty() ? "" : "; ", rejected);
  return false;
}

/// The plan of one call: cached, or built and chosen now (first call with this key).
GraphConvPlan& get_plan(CudaBackend& be, Dir d, const Conv2dParams& p, const Geo& g,
                        const Tensor& x, const Tensor& w, const Tensor& y,
                        const std::string& key) {
  const conv_detail::Roles r = roles(d);
  auto it = be.conv_graph_plans.find(key);
  if (it != be.conv_graph_plans.end()) return *it->second;

  const DType dt = x.dtype();
  const Layout main = d == Dir::bwd_data ? y.layout() : x.layout();
  std::vector<Layout> tries{main};
  if (main == Layout::NCHW) tries.push_back(Layout::NHWC);
  ChoiceStore& store = ChoiceStore::instance();
  const size_t cudnn_version = cudnnGetVersion();
  std::string failures;
  for (Layout l : tries) {
    auto plan = std::make_unique<GraphConvPlan>();
    plan->layout = l;
    const Operands o = conv_detail::prepare(be, l, plan->x_tmp, plan->w_tmp, plan->y_tmp, r.out,
                                            x, w, y);
    build_graph(be, d, p, g, o, *plan, key);
    const std::string store_key =
        fmt::format("graph {} in {} tf32={}", key, layout_name(l), be.allow_tf32());
    std::string note;
    if (auto hit = store.find(be.gpu_name(), cudnn_version, store_key); hit && hit->first.graph) {
      try {
        rebuild(be, *plan, hit->first, key);
        // The workspace is grown now, on the eager first call, never under capture.
        be.workspace.ensure(plan->ws_bytes);
        store.log(r.op, key, layout_name(l),
                  hit->second == ChoiceStore::Source::memo ? "memo" : "cache", hit->first, "");
        return *be.conv_graph_plans.emplace(key, std::move(plan)).first->second;
      } catch (const Error& e) {
        note = fmt::format("remembered engine {} no longer builds ({}); searched again",
                           hit->first.algo, e.what());
      }
    }
    Choice chosen;
    std::string rejected, why;
    if (search(be, dt, *plan, o, chosen, rejected, why, key)) {
      store.remember(be.gpu_name(), cudnn_version, store_key, chosen);
      if (!note.empty()) rejected = note + (rejected.empty() ? "" : "; " + rejected);
      store.log(r.op, key, layout_name(l), "search", chosen, rejected);
      return *be.conv_graph_plans.emplace(key, std::move(plan)).first->second;
    }
    failures += fmt::format("{}in {}: {}", failures.empty() ? "" : " | ", layout_name(l), why);
    // The conversions and runs queued on this plan's scratch must finish before it is freed.
    RN50_CUDA_CHECK(cudaStreamSynchronize(be.stream()));
  }
  RN50_FAIL("cuda {}: cuDNN's graph API has no usable engine for {}={} {}={} {}={} (stride {}, "
            "pad {}, {}TF32, RN50_CUDNN_API=graph): {}",
            r.op, r.x, x.str(), r.w, w.str(), r.y, y.str(), p.stride, p.pad,
            be.allow_tf32() ? "" : "no ", failures);
}

}  // namespace

BackendDesc::BackendDesc(cudnnBackendDescriptorType_t type, const char* type_name,
                         const std::string& key) {
  check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor", type_name, key);
}

BackendDesc::~BackendDesc() {
  if (d_) (void)cudnnBackendDestroyDescriptor(d_);
}

BackendDesc& BackendDesc::operator=(BackendDesc&& o) noexcept {
  if (this != &o) {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}

void run_conv_graph(CudaBackend& be, Dir d, const Conv2dParams& p, const Geo& g,
                    const Tensor& x, const Tensor& w, const Tensor& y) {
  const std::string key = conv_detail::conv_key(d, p, x, w, y);
  GraphConvPlan& plan = get_plan(be, d, p, g, x, w, y, key);
  const int out = roles(d).out;
  const Operands o =
      conv_detail::prepare(be, plan.layout, plan.x_tmp, plan.w_tmp, plan.y_tmp, out, x, w, y);
  void* ws = be.workspace.ensure(plan.ws_bytes);
  const BackendDesc vp = variant_pack(o, ws, key);
  const cudnnStatus_t st = cudnnBackendExecute(be.cudnn(), plan.plan.get(), vp.get());
  if (st != CUDNN_STATUS_SUCCESS)
    check(st, "cudnnBackendExecute", fmt::format("engine {}", plan.engine).c_str(), key);
  conv_detail::finish(be, out, o, x, w, y);
}

}  // namespace rn50::cuda
