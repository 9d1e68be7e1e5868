// rn50 CUDA backend: conv2d_fwd, conv2d_bwd_data and conv2d_bwd_weights on cuDNN 9's graph
// (backend) API (cudnn_graph.h: cudnnBackendCreateDescriptor / SetAttribute / GetAttribute /
// Finalize / Execute), taken instead of the legacy API with RN50_CUDNN_API=graph
// (CudaBackend::cudnn_graph_api(); conv.cpp's run_conv is where the choice is made).
//
// Per plan key (conv_common.h's conv_key: direction, the three tensors' dtype, shape, layout and
// pointer alignment, stride, pad), on the first call only:
//  1. an operation graph of one convolution operation (cuDNN Backend Developer Guide, "Graph
//     API"; descriptor attributes as in the cuDNN API reference, cudnn_graph library,
//     "Backend Descriptor Types"):
//     * CUDNN_BACKEND_TENSOR_DESCRIPTOR for the x, w and y roles: dimensions always in NCHW order
//       (x [N,C,H,W], w [K,C,R,S], y [N,K,OH,OW]), the layout given by the strides (NCHW
//       [CHW,HW,W,1]; NHWC [HWC,1,WC,C], for w KRSC); data type F32, F16 or BF16; unique ids
//       kUidX / kUidW / kUidY; byte alignment that of the operand's pointer, at most 16;
//     * CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: 2 spatial dims, compute type CUDNN_DATA_FLOAT
//       (F32 accumulation for every dtype), CUDNN_CROSS_CORRELATION (torch's conv2d), pre and
//       post paddings `pad`, filter strides `stride`, dilations 1;
//     * CUDNN_BACKEND_OPERATION_CONVOLUTION_{FORWARD, BACKWARD_DATA, BACKWARD_FILTER}_DESCRIPTOR
//       with alpha 1 and beta 0 (floats: the output is overwritten);
//     * CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR with the handle and that operation;
//  2. engine configs from CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR in CUDNN_HEUR_MODE_A, then those of
//     CUDNN_HEUR_MODE_FALLBACK (duplicates dropped), filtered by their engine's notes and
//     workspace: no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC engine unless RN50_CUDNN_NONDET=1 (or
//     no deterministic engine qualifies, as on the legacy path); no TENSOR_CORE engine for F32
//     when BackendOptions::allow_tf32 is false (TF32); DOWN_CONVERT_INPUTS only for F16 data,
//     no REDUCED_PRECISION_REDUCTION (F32 accumulation); workspace at most kWorkspaceCap;
//  3. execution plans (CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) finalized for the configs in that
//     order until kTimedPlans finalize (those that do not are skipped), each timed with
//     cudaEvents on the caller's tensors (one warm-up run, then kTimedRuns): the fastest is kept.
//     This synchronises the stream: the first call of a key must be eager, never under capture.
// The choice (engine global index and knobs) is remembered for the process and persisted with
// RN50_CUDNN_CACHE under a key of its own ("graph ...", conv_choices.h), and logged with
// RN50_CUDNN_LOG; a remembered choice is rebuilt (engine, knob choices, engine config, plan)
// without heuristics or timing; if it no longer finalizes, the key is searched again.
// If no engine qualifies in NCHW, the plan retries with every operand in NHWC (as legacy).
//
// Every call then: the operands in the plan's layout (converted through the plan's scratch as
// on the legacy path), a CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR with their pointers, uids and
// the shared workspace, cudnnBackendExecute on the backend's stream (the handle's), and the
// output converted back if it went through scratch. After the first call of a key nothing
// allocates device memory or synchronises: capturable into a CUDA graph. (The variant pack is
// a host object made and destroyed per call: pointers differ between calls of one key.)
//
// Errors: every cudnnBackend* status is checked; a failure throws rn50::Error naming the call,
// the attribute or descriptor type, the status and the plan key. Execution plans that do not
// finalize and a remembered choice that no longer builds are not errors (skipped / searched);
// no qualifying engine in any layout is (naming each engine and why it was turned down).
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_common.h"
#include "backend/cuda/cuda_backend.h"

namespace rn50::cuda {

/// One cuDNN backend descriptor, destroyed with its owner (move-only).
class BackendDesc {
 public:
  BackendDesc() = default;
  /// cudnnBackendCreateDescriptor(type); `type_name` and `key` name it in the error.
  BackendDesc(cudnnBackendDescriptorType_t type, const char* type_name, const std::string& key);
  ~BackendDesc();
  BackendDesc(BackendDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  BackendDesc& operator=(BackendDesc&& o) noexcept;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  /// The address of the handle, for attributes of type CUDNN_TYPE_BACKEND_DESCRIPTOR.
  const cudnnBackendDescriptor_t* ptr() const { return &d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// The graph API's plan of one key: the operation graph, the chosen execution plan, and the
/// scratch of the operands stored in the other layout (as ConvPlan's).
struct GraphConvPlan {
  Layout layout = Layout::NCHW;  ///< compute layout of every tensor descriptor
  /// The tensors, convolution and operation descriptors the graph was built from, then the
  /// graph itself (kept for the plan's lifetime: cuDNN may refer to them).
  std::vector<BackendDesc> parts;
  BackendDesc graph;
  /// The chosen engine config (with its engine and knob choice descriptors) and its plan.
  std::vector<BackendDesc> config;
  BackendDesc plan;
  int64_t engine = -1;   ///< global index of the chosen engine
  size_t ws_bytes = 0;   ///< workspace the plan needs (CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)
  DeviceBuffer x_tmp, w_tmp, y_tmp;
};

/// One convolution call of direction `d` on the role tensors (x role, w role, y role), already
/// validated by conv_geo (`g`), on the graph API (see the file comment).
void run_conv_graph(CudaBackend& be, conv_detail::Dir d, const Conv2dParams& p,
                    const conv_detail::Geo& g, const Tensor& x, const Tensor& w, const Tensor& y);

}  // namespace rn50::cuda
