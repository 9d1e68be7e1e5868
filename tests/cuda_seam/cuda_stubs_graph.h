// Link-seam stubs of cuDNN's graph (backend) API (cuda_stubs_graph.cpp) for
// test_cuda_host_calls: what the tests of test_cuda_conv_graph.cpp read back. A small fake of
// cudnnBackendCreateDescriptor / SetAttribute / GetAttribute / Finalize / Execute /
// DestroyDescriptor:
//  * descriptors are host objects storing their attributes; SetAttribute checks that the
//    attribute belongs to the descriptor's type and has the type the cuDNN API reference gives
//    it, and refuses a finalized descriptor; Finalize checks the required attributes (and that
//    referenced descriptors are finalized); every call is recorded as a StubCall (cuda_stubs.h)
//    whose detail is the descriptor type without its CUDNN_BACKEND_ prefix and _DESCRIPTOR
//    suffix ("TENSOR", "ENGINEHEUR", "EXECUTION_PLAN", ...);
//  * each finalized convolution operation is recorded (GraphConvOp) with its tensors' dims,
//    strides, uids, alignments and dtype and the convolution's geometry;
//  * the heuristics return made-up engine configs (kFakeEngines below): CUDNN_HEUR_MODE_A
//    engines 1, 2, 3, 0 and CUDNN_HEUR_MODE_FALLBACK engines 0, 4, 5; an engine config rebuilt
//    from an engine index finalizes only for a known engine with its own knobs;
//  * cudnnBackendExecute is recorded (GraphExecute: engine, the variant pack's uids, pointers
//    and workspace) and advances the fake device clock by the engine's made-up time, which
//    cudaEventRecord / cudaEventElapsedTime read; it fails (CUDNN_STATUS_BAD_PARAM) when the
//    variant pack lacks a uid of the graph, a pointer is not fake device memory, or the
//    workspace is shorter than the plan's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rn50::cuda_stub {

/// A made-up engine of the stubbed heuristics.
struct FakeEngine {
  int64_t index;
  double ms;          ///< time of one execution on the fake clock
  bool nondet;        ///< CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool tensor_core;   ///< CUDNN_NUMERICAL_NOTE_TENSOR_CORE
  int64_t ws;         ///< workspace (engine config and plan)
  bool plan_fails;    ///< its execution plan does not finalize (CUDNN_STATUS_NOT_SUPPORTED)
  std::vector<std::pair<int64_t, int64_t>> knobs;  ///< (cudnnBackendKnobType_t, value)
};
/// Engine 0: slow (3 ms), no workspace, one knob. 1: the fastest (0.5 ms) but
/// non-deterministic. 2: fast (0.6 ms) but 4 GiB of workspace (over the backend's cap).
/// 3: 1 ms with tensor cores (TF32 for F32), two knobs. 4 (fallback only): its plan does not
/// finalize. 5 (fallback only): 2.5 ms.
const std::vector<FakeEngine>& fake_engines();

/// One tensor of a finalized convolution operation.
struct GraphTensor {
  int64_t uid = -1, alignment = 0;
  int dtype = -1;  ///< cudnnDataType_t
  std::vector<int64_t> dims, strides;
};
/// One finalized convolution operation descriptor.
struct GraphConvOp {
  std::string dir;        ///< "fwd", "bwd_data", "bwd_filter"
  GraphTensor x, w, y;    ///< by role: x or dx, w or dw, y or dy
  int64_t spatial_dims = 0;
  std::vector<int64_t> pre_pad, post_pad, strides, dilations;
  int mode = -1;          ///< cudnnConvolutionMode_t
  int comp_type = -1;     ///< cudnnDataType_t
  double alpha = -1, beta = -1;
};
std::vector<GraphConvOp> graph_ops(size_t begin = 0);
size_t num_graph_ops();

/// One cudnnBackendExecute.
struct GraphExecute {
  int64_t engine = -1;
  std::vector<int64_t> uids;
  std::vector<const void*> ptrs;
  const void* ws = nullptr;
  size_t plan_ws = 0;     ///< the plan's workspace size
  bool in_capture = false;
  bool failed = false;
};
std::vector<GraphExecute> graph_executes(size_t begin = 0);
size_t num_graph_executes();

/// Backend descriptors created and not yet destroyed.
size_t live_backend_descriptors();

}  // namespace rn50::cuda_stub
