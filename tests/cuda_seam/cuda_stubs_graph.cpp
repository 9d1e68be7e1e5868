// Link-seam stubs of cuDNN's graph (backend) API and cudaEventElapsedTime (see
// cuda_stubs_graph.h). Shares the other stubs' state and lock (cuda_stub_state.h).
#include <cmath>
#include <set>

#include "cuda_stub_state.h"
#include "cuda_stubs_graph.h"

namespace stub = rn50::cuda_stub;

namespace {

using Type = cudnnBackendAttributeType_t;

struct Attr {
  Type type{};
  int64_t n = 0;
  std::vector<unsigned char> bytes;
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

/// One descriptor: its attributes and, once finalized, what later descriptors derive from it.
struct Desc {
  cudnnBackendDescriptorType_t type{};
  bool finalized = false;
  std::map<int, Attr> attrs;
  int64_t engine = -1;  ///< ENGINE, ENGINECFG, EXECUTION_PLAN
  std::vector<std::pair<int64_t, int64_t>> knobs;  ///< ENGINECFG; KNOB_CHOICE: one
  std::vector<int64_t> uids;  ///< the graph's tensor uids (op, graph, engine, config, plan)
  int heur_mode = -1;
  bool has(int a) const { return attrs.count(a) != 0; }
};

struct GraphState {
  std::set<Desc*> live;
  std::vector<stub::GraphConvOp> ops;
  std::vector<stub::GraphExecute> execs;
};
GraphState& gs() {
  static GraphState* s = new GraphState;  // never destroyed, like the other stubs' state
  return *s;
}

const char* short_name(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: return "CONVOLUTION";
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return "ENGINE";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return "ENGINECFG";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return "ENGINEHEUR";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return "EXECUTION_PLAN";
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: return "KNOB_CHOICE";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: return "OPERATION_CONVOLUTION_FORWARD";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      return "OPERATION_CONVOLUTION_BACKWARD_DATA";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return "OPERATION_CONVOLUTION_BACKWARD_FILTER";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return "OPERATIONGRAPH";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return "VARIANT_PACK";
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return "TENSOR";
    default: return "OTHER";
  }
}

size_t elem_size(Type t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_CHAR: return 1;
    default: return sizeof(int);  // the enumerations
  }
}

/// The descriptor type an attribute belongs to and its type (cuDNN API reference, cudnn_graph
/// library, "Backend Descriptor Types"), for the attributes the backend uses; -1: not modelled.
/// `alt` is a second accepted type (alpha / beta: FLOAT or DOUBLE).
struct AttrInfo {
  int owner = -1;
  int type = -1;
  int alt = -1;
};
AttrInfo info(int a) {
  const int F = CUDNN_TYPE_FLOAT, D = CUDNN_TYPE_DOUBLE, I = CUDNN_TYPE_INT64,
            B = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  switch (a) {
    case CUDNN_ATTR_TENSOR_DATA_TYPE: return {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE};
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
    case CUDNN_ATTR_TENSOR_STRIDES:
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT: return {CUDNN_BACKEND_TENSOR_DESCRIPTOR, I};
    case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
      return {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE};
    case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
      return {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_TYPE_CONVOLUTION_MODE};
    case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
    case CUDNN_ATTR_CONVOLUTION_DILATIONS:
    case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
    case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
    case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS: return {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, I};
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, F, D};
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, B};
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, F, D};
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, B};
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, F, D};
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, B};
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
      return {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_TYPE_HANDLE};
    case CUDNN_ATTR_OPERATIONGRAPH_OPS: return {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, B};
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH:
    case CUDNN_ATTR_ENGINEHEUR_RESULTS: return {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, B};
    case CUDNN_ATTR_ENGINEHEUR_MODE:
      return {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_HEUR_MODE};
    case CUDNN_ATTR_ENGINECFG_ENGINE:
    case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: return {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, B};
    case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE: return {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, I};
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH: return {CUDNN_BACKEND_ENGINE_DESCRIPTOR, B};
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX: return {CUDNN_BACKEND_ENGINE_DESCRIPTOR, I};
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
      return {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_TYPE_NUMERICAL_NOTE};
    case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
      return {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_TYPE_BEHAVIOR_NOTE};
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE:
      return {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_TYPE_KNOB_TYPE};
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE: return {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, I};
    case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
      return {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_HANDLE};
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
      return {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, B};
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      return {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, I};
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS: return {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, I};
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
    case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
      return {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_VOID_PTR};
    default: return {};
  }
}

/// The live descriptor behind a handle, or null (caller holds the lock).
Desc* live(cudnnBackendDescriptor_t h) {
  auto* d = static_cast<Desc*>(h);
  return gs().live.count(d) ? d : nullptr;
}
/// The finalized descriptor an attribute of type BACKEND_DESCRIPTOR refers to (element i).
Desc* ref(const Desc& d, int a, int64_t i = 0) {
  auto it = d.attrs.find(a);
  if (it == d.attrs.end() || it->second.type != CUDNN_TYPE_BACKEND_DESCRIPTOR || i >= it->second.n)
    return nullptr;
  Desc* r = live(it->second.as<cudnnBackendDescriptor_t>()[i]);
  return r && r->finalized ? r : nullptr;
}
std::vector<int64_t> ints(const Desc& d, int a) {
  auto it = d.attrs.find(a);
  if (it == d.attrs.end() || it->second.type != CUDNN_TYPE_INT64) return {};
  const int64_t* p = it->second.as<int64_t>();
  return std::vector<int64_t>(p, p + it->second.n);
}
double scalar(const Desc& d, int a) {
  auto it = d.attrs.find(a);
  if (it == d.attrs.end()) return NAN;
  return it->second.type == CUDNN_TYPE_FLOAT ? double(*it->second.as<float>())
                                             : *it->second.as<double>();
}
int enum_of(const Desc& d, int a) {
  auto it = d.attrs.find(a);
  return it == d.attrs.end() ? -1 : *it->second.as<int>();
}

const stub::FakeEngine* engine(int64_t index) {
  for (const stub::FakeEngine& e : stub::fake_engines())
    if (e.index == index) return &e;
  return nullptr;
}

stub::GraphTensor tensor(const Desc& t) {
  stub::GraphTensor g;
  g.uid = ints(t, CUDNN_ATTR_TENSOR_UNIQUE_ID).at(0);
  g.alignment = ints(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT).at(0);
  g.dtype = enum_of(t, CUDNN_ATTR_TENSOR_DATA_TYPE);
  g.dims = ints(t, CUDNN_ATTR_TENSOR_DIMENSIONS);
  g.strides = ints(t, CUDNN_ATTR_TENSOR_STRIDES);
  return g;
}

/// Finalizes a convolution operation: its six attributes, referenced descriptors finalized.
cudnnStatus_t finalize_op(Desc& d, const char* dir, int alpha, int beta, int conv, int x, int w,
                          int y) {
  Desc *cv = ref(d, conv), *tx = ref(d, x), *tw = ref(d, w), *ty = ref(d, y);
  if (!d.has(alpha) || !d.has(beta) || !cv || !tx || !tw || !ty) return CUDNN_STATUS_BAD_PARAM;
  stub::GraphConvOp op;
  op.dir = dir;
  op.x = tensor(*tx);
  op.w = tensor(*tw);
  op.y = tensor(*ty);
  op.spatial_dims = ints(*cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS).at(0);
  op.pre_pad = ints(*cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
  op.post_pad = ints(*cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
  op.strides = ints(*cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES);
  op.dilations = ints(*cv, CUDNN_ATTR_CONVOLUTION_DILATIONS);
  op.mode = enum_of(*cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE);
  op.comp_type = enum_of(*cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE);
  op.alpha = scalar(d, alpha);
  op.beta = scalar(d, beta);
  d.uids = {op.x.uid, op.w.uid, op.y.uid};
  gs().ops.push_back(op);
  return CUDNN_STATUS_SUCCESS;
}

/// Gives a config, engine or knob choice the data of fake engine `e`.
void fill_config(Desc& d, const stub::FakeEngine& e, const std::vector<int64_t>& uids) {
  d.engine = e.index;
  d.knobs = e.knobs;
  d.uids = uids;
  d.finalized = true;
}

cudnnStatus_t finalize(Desc& d) {
  auto all = [&](std::initializer_list<int> as) {
    for (int a : as)
      if (!d.has(a)) return false;
    return true;
  };
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      if (!all({CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_DIMENSIONS,
                CUDNN_ATTR_TENSOR_STRIDES, CUDNN_ATTR_TENSOR_UNIQUE_ID,
                CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT}) ||
          d.attrs[CUDNN_ATTR_TENSOR_DIMENSIONS].n != d.attrs[CUDNN_ATTR_TENSOR_STRIDES].n)
        return CUDNN_STATUS_BAD_PARAM;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      return all({CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                  CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_ATTR_CONVOLUTION_DILATIONS,
                  CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                  CUDNN_ATTR_CONVOLUTION_POST_PADDINGS})
                 ? CUDNN_STATUS_SUCCESS
                 : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      return finalize_op(d, "fwd", CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y);
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      return finalize_op(d, "bwd_data", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY);
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return finalize_op(d, "bwd_filter", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: {
      Desc* op = ref(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
      if (!op || !d.has(CUDNN_ATTR_OPERATIONGRAPH_HANDLE)) return CUDNN_STATUS_BAD_PARAM;
      d.uids = op->uids;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
      Desc* g = ref(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
      if (!g || !d.has(CUDNN_ATTR_ENGINEHEUR_MODE)) return CUDNN_STATUS_BAD_PARAM;
      d.heur_mode = enum_of(d, CUDNN_ATTR_ENGINEHEUR_MODE);
      if (d.heur_mode != CUDNN_HEUR_MODE_A && d.heur_mode != CUDNN_HEUR_MODE_FALLBACK)
        return CUDNN_STATUS_NOT_SUPPORTED;
      d.uids = g->uids;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: {
      Desc* g = ref(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
      const std::vector<int64_t> idx = ints(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
      if (!g || idx.size() != 1) return CUDNN_STATUS_BAD_PARAM;
      const stub::FakeEngine* e = engine(idx[0]);
      if (!e) return CUDNN_STATUS_NOT_SUPPORTED;
      d.engine = e->index;
      d.uids = g->uids;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: {
      const std::vector<int64_t> v = ints(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
      if (!d.has(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) || v.size() != 1) return CUDNN_STATUS_BAD_PARAM;
      d.knobs = {{enum_of(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE), v[0]}};
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: {
      Desc* e = ref(d, CUDNN_ATTR_ENGINECFG_ENGINE);
      if (!e) return CUDNN_STATUS_BAD_PARAM;
      std::vector<std::pair<int64_t, int64_t>> knobs;
      if (auto it = d.attrs.find(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES); it != d.attrs.end())
        for (int64_t i = 0; i < it->second.n; ++i) {
          Desc* k = ref(d, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, i);
          if (!k) return CUDNN_STATUS_BAD_PARAM;
          knobs.push_back(k->knobs.at(0));
        }
      const stub::FakeEngine& fe = *engine(e->engine);
      // The knobs must be the engine's own (what the heuristics gave for it).
      if (knobs != fe.knobs) return CUDNN_STATUS_NOT_SUPPORTED;
      d.engine = e->engine;
      d.knobs = knobs;
      d.uids = e->uids;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      Desc* c = ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
      if (!c || !d.has(CUDNN_ATTR_EXECUTION_PLAN_HANDLE)) return CUDNN_STATUS_BAD_PARAM;
      if (engine(c->engine)->plan_fails) return CUDNN_STATUS_NOT_SUPPORTED;
      d.engine = c->engine;
      d.uids = c->uids;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      if (!all({CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                CUDNN_ATTR_VARIANT_PACK_WORKSPACE}) ||
          d.attrs[CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS].n !=
              d.attrs[CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS].n)
        return CUDNN_STATUS_BAD_PARAM;
      return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_NOT_SUPPORTED;
  }
}

/// Writes `n` elements of `v` to the caller's array (at most `requested`).
template <class T>
cudnnStatus_t give(const std::vector<T>& v, int64_t requested, int64_t* count, void* out) {
  const int64_t n = std::min<int64_t>(requested, static_cast<int64_t>(v.size()));
  for (int64_t i = 0; i < n; ++i) static_cast<T*>(out)[i] = v[static_cast<size_t>(i)];
  *count = requested == 0 ? static_cast<int64_t>(v.size()) : n;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t get(Desc& d, int a, Type t, int64_t requested, int64_t* count, void* out) {
  const AttrInfo ai = info(a);
  if (ai.owner >= 0 && (ai.owner != d.type || (ai.type != t && ai.alt != t)))
    return CUDNN_STATUS_BAD_PARAM;
  switch (a) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS: {
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      const std::vector<int64_t> ids = d.heur_mode == CUDNN_HEUR_MODE_A
                                           ? std::vector<int64_t>{1, 2, 3, 0}
                                           : std::vector<int64_t>{0, 4, 5};
      const int64_t n = std::min<int64_t>(requested, static_cast<int64_t>(ids.size()));
      for (int64_t i = 0; i < n; ++i) {
        Desc* c = live(static_cast<cudnnBackendDescriptor_t*>(out)[i]);
        if (!c || c->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || c->finalized)
          return CUDNN_STATUS_BAD_PARAM;
        fill_config(*c, *engine(ids[static_cast<size_t>(i)]), d.uids);
      }
      *count = requested == 0 ? static_cast<int64_t>(ids.size()) : n;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINECFG_ENGINE: {
      Desc* e = requested >= 1 ? live(*static_cast<cudnnBackendDescriptor_t*>(out)) : nullptr;
      if (!d.finalized || !e || e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
      fill_config(*e, *engine(d.engine), d.uids);
      *count = 1;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: {
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      const int64_t n = std::min<int64_t>(requested, static_cast<int64_t>(d.knobs.size()));
      for (int64_t i = 0; i < n; ++i) {
        Desc* k = live(static_cast<cudnnBackendDescriptor_t*>(out)[i]);
        if (!k || k->type != CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        k->knobs = {d.knobs[static_cast<size_t>(i)]};
        k->finalized = true;
      }
      *count = requested == 0 ? static_cast<int64_t>(d.knobs.size()) : n;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      return give(std::vector<int64_t>{engine(d.engine)->ws}, requested, count, out);
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      return give(std::vector<int64_t>{d.engine}, requested, count, out);
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      const stub::FakeEngine& e = *engine(d.engine);
      std::vector<cudnnBackendNumericalNote_t> notes;
      if (e.tensor_core) notes.push_back(CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
      if (e.nondet) notes.push_back(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
      return give(notes, requested, count, out);
    }
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE:
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      return give(std::vector<cudnnBackendKnobType_t>{
                      static_cast<cudnnBackendKnobType_t>(d.knobs.at(0).first)},
                  requested, count, out);
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE:
      if (!d.finalized) return CUDNN_STATUS_BAD_PARAM;
      return give(std::vector<int64_t>{d.knobs.at(0).second}, requested, count, out);
    default: {
      auto it = d.attrs.find(a);
      if (it == d.attrs.end() || it->second.type != t) return CUDNN_STATUS_BAD_PARAM;
      const int64_t n = std::min(requested, it->second.n);
      std::memcpy(out, it->second.bytes.data(), static_cast<size_t>(n) * elem_size(t));
      *count = requested == 0 ? it->second.n : n;
      return CUDNN_STATUS_SUCCESS;
    }
  }
}

/// Records a call of `fn` on descriptor `d` (caller holds the lock).
stub::StubCall& record(const char* fn, const Desc* d) {
  stub::StubCall& c = stub::record_locked(fn);
  if (d) c.detail = short_name(d->type);
  return c;
}

cudnnStatus_t fail(stub::StubCall& c, cudnnStatus_t st) {
  if (st != CUDNN_STATUS_SUCCESS) {
    c.failed = true;
    c.detail += std::string(" ") + cudnnGetErrorString(st);
  }
  return st;
}

}  // namespace

namespace rn50::cuda_stub {

const std::vector<FakeEngine>& fake_engines() {
  static const std::vector<FakeEngine> e = {
      {0, 3.0, false, false, 0, false, {{CUDNN_KNOB_TYPE_TILE_SIZE, 2}}},
      {1, 0.5, true, false, 1024, false, {}},
      {2, 0.6, false, false, int64_t{4} << 30, false, {}},
      {3, 1.0, false, true, 8192, false, {{CUDNN_KNOB_TYPE_STAGES, 3}, {CUDNN_KNOB_TYPE_SWIZZLE, 1}}},
      {4, 2.0, false, false, 2048, true, {}},
      {5, 2.5, false, false, 4096, false, {}},
  };
  return e;
}
std::vector<GraphConvOp> graph_ops(size_t begin) {
  std::lock_guard<std::mutex> lock(st().mu);
  const auto& v = gs().ops;
  if (begin >= v.size()) return {};
  return {v.begin() + static_cast<std::ptrdiff_t>(begin), v.end()};
}
size_t num_graph_ops() {
  std::lock_guard<std::mutex> lock(st().mu);
  return gs().ops.size();
}
std::vector<GraphExecute> graph_executes(size_t begin) {
  std::lock_guard<std::mutex> lock(st().mu);
  const auto& v = gs().execs;
  if (begin >= v.size()) return {};
  return {v.begin() + static_cast<std::ptrdiff_t>(begin), v.end()};
}
size_t num_graph_executes() {
  std::lock_guard<std::mutex> lock(st().mu);
  return gs().execs.size();
}
size_t live_backend_descriptors() {
  std::lock_guard<std::mutex> lock(st().mu);
  return gs().live.size();
}

}  // namespace rn50::cuda_stub

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t* descriptor) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  auto* d = new Desc;
  d->type = descriptorType;
  gs().live.insert(d);
  record("cudnnBackendCreateDescriptor", d);
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  Desc* d = live(descriptor);
  stub::StubCall& c = record("cudnnBackendDestroyDescriptor", d);
  if (!d) return fail(c, CUDNN_STATUS_BAD_PARAM);
  gs().live.erase(d);
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  Desc* d = live(descriptor);
  stub::StubCall& c = record("cudnnBackendFinalize", d);
  if (!d || d->finalized) return fail(c, CUDNN_STATUS_BAD_PARAM);
  const cudnnStatus_t s = finalize(*d);
  if (s == CUDNN_STATUS_SUCCESS) d->finalized = true;
  c.algo = static_cast<int>(d->engine);
  return fail(c, s);
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t elementCount, const void* arrayOfElements) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  Desc* d = live(descriptor);
  stub::StubCall& c = record("cudnnBackendSetAttribute", d);
  c.bytes = static_cast<size_t>(attributeName);
  const AttrInfo ai = info(attributeName);
  if (!d || d->finalized || elementCount < 0 || (elementCount > 0 && !arrayOfElements) ||
      ai.owner != d->type || (ai.type != attributeType && ai.alt != attributeType))
    return fail(c, CUDNN_STATUS_BAD_PARAM);
  Attr a;
  a.type = attributeType;
  a.n = elementCount;
  const auto* p = static_cast<const unsigned char*>(arrayOfElements);
  a.bytes.assign(p, p + static_cast<size_t>(elementCount) * elem_size(attributeType));
  d->attrs[attributeName] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t requestedElementCount, int64_t* elementCount,
                                       void* arrayOfElements) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  Desc* d = live(descriptor);
  stub::StubCall& c = record("cudnnBackendGetAttribute", d);
  c.bytes = static_cast<size_t>(attributeName);
  if (!d || !elementCount || requestedElementCount < 0 ||
      (requestedElementCount > 0 && !arrayOfElements))
    return fail(c, CUDNN_STATUS_BAD_PARAM);
  return fail(c, get(*d, attributeName, attributeType, requestedElementCount, elementCount,
                     arrayOfElements));
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  Desc* plan = live(executionPlan);
  Desc* vp = live(variantPack);
  stub::StubCall& c = stub::record_locked("cudnnBackendExecute");
  if (!handle || !plan || !vp || !plan->finalized || !vp->finalized ||
      plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      vp->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return fail(c, CUDNN_STATUS_BAD_PARAM);
  const stub::FakeEngine& e = *engine(plan->engine);
  stub::GraphExecute x;
  x.engine = e.index;
  x.uids = ints(*vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const Attr& ptrs = vp->attrs[CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS];
  for (int64_t i = 0; i < ptrs.n; ++i) x.ptrs.push_back(ptrs.as<void*>()[i]);
  x.ws = *vp->attrs[CUDNN_ATTR_VARIANT_PACK_WORKSPACE].as<void*>();
  x.plan_ws = static_cast<size_t>(e.ws);
  x.in_capture = c.in_capture;
  c.algo = static_cast<int>(e.index);
  c.ptr = x.ws;
  c.bytes = x.plan_ws;
  c.detail = "engine " + std::to_string(e.index);
  // Every tensor of the graph under its uid, in fake device memory; the workspace as large as
  // the plan's.
  bool ok = true;
  for (int64_t uid : plan->uids) {
    auto it = std::find(x.uids.begin(), x.uids.end(), uid);
    ok = ok && it != x.uids.end() &&
         stub::is_device_locked(x.ptrs[static_cast<size_t>(it - x.uids.begin())]);
  }
  if (x.plan_ws > 0) {
    const auto* a = stub::find_alloc_locked(x.ws);
    ok = ok && a && !a->second.pinned &&
         a->first + a->second.bytes - reinterpret_cast<uintptr_t>(x.ws) >= x.plan_ws;
  }
  x.failed = !ok;
  gs().execs.push_back(x);
  if (!ok) return fail(c, CUDNN_STATUS_BAD_PARAM);
  stub::node_locked(handle->stream);
  stub::st().clock_ms += e.ms;
  return CUDNN_STATUS_SUCCESS;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::StubCall& c = stub::record_locked("cudaEventElapsedTime");
  if (!start || !end || !start->recorded || !end->recorded) {
    c.failed = true;
    return cudaErrorInvalidResourceHandle;
  }
  *ms = static_cast<float>(end->t_ms - start->t_ms);
  return cudaSuccess;
}

}  // extern "C"
