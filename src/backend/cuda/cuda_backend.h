// rn50: the CUDA backend ("cuda"): cuDNN convolutions, cuBLASLt for the fc layer, and our own
// kernels for batch norm (with fused ReLU), elementwise ops, pooling, the loss, input
// normalisation, SGD and the AMP loss-scale logic (with RN50_CUDA_BN=cudnn, training batch norm
// on NHWC f16/bf16 runs cuDNN's fused BN instead: batchnorm_cudnn.cpp).
//
// Execution model (what makes CUDA graph capture of a whole training step possible):
//  * One main stream (stream_) carries every op, in order; ops never synchronise the host and
//    never allocate once their shapes have been seen (scratch and workspaces are cached per
//    shape, or grown on first use and then reused). cudaMalloc / cudaFree / host syncs happen
//    only in alloc(), copy() to or from pageable host memory, synchronize(), and the first call
//    of an op with a new shape.
//  * A side stream (copy_stream_) carries upload_input(): H2D copies of the next batch that
//    overlap the current step, ordered by events against the main stream.
//  * capture() records the main stream's work into a cudaGraph (cudaStreamCaptureModeThreadLocal)
//    and returns a replayable Graph.
//
// Dtypes: f32 everywhere; f16 and bf16 for activations, conv/fc weights and their gradients
// (AMP), with f32 BN parameters/statistics and f32 accumulation. Layouts: NCHW and NHWC (NHWC
// is the fast one for f16/bf16: cuDNN's tensor-core kernels are channels-last).
// TF32: allowed for f32 convolutions and GEMMs unless BackendOptions::allow_tf32 is false.
//
// Files: cuda_backend.cpp (device, memory, copies, streams, graphs, supports), conv.cpp
// (cuDNN, legacy API), conv_graph.cpp (cuDNN, graph API), linear.cpp (cuBLASLt), batchnorm.cu,
// eltwise.cu, pool.cu, loss.cu, input.cu, sgd.cu (SGD and AMP ops), convert.cu (dtype / layout
// conversion used by copy()), batchnorm_cudnn.cpp (the cuDNN implementation of training batch
// norm, RN50_CUDA_BN=cudnn).
//
// Not thread-safe: one backend instance is used from one host thread at a time.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "rn50/backend.h"

namespace rn50::cuda {

/// A device buffer that grows on demand and is then reused (workspaces, scratch).
/// ensure() may cudaMalloc, so callers size it on an op's first call with a shape.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  /// Makes the buffer at least `n` bytes (frees and reallocates when smaller; contents lost).
  void* ensure(size_t n);
  ~DeviceBuffer();
};

/// Cached cuDNN convolution plan for one (direction, shapes, layouts, dtype, stride, pad):
/// descriptors and the algorithm chosen once by cudnnFind*AlgorithmEx, with its workspace size.
struct ConvPlan;
/// Cached cuBLASLt matmul plans of the fc layer for one (N, C, K, dtypes).
struct LinearPlan;
/// Cached convolution on cuDNN's graph API (RN50_CUDNN_API=graph) for one key as ConvPlan's:
/// the operation graph and the execution plan chosen once (conv_graph.h).
struct GraphConvPlan;
/// One BatchNorm layer's cuDNN state between its training forward and backward (reserve space,
/// saved inverse std, descriptors, workspace sizes): batchnorm_cudnn.cpp, RN50_CUDA_BN=cudnn.
struct BnCudnnState;

class CudaBackend final : public Backend {
 public:
  /// Selects device opt.device_index, creates the streams and library handles. Throws
  /// rn50::Error when the device does not exist or CUDA cannot be initialised.
  explicit CudaBackend(const BackendOptions& opt);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device{DeviceType::CUDA, device_index_}; }
  bool supports(Op op, DType dtype, Layout layout) const override;
  /// KRSC filters with NHWC activations, OIHW with NCHW.
  Layout preferred_weight_layout(Layout activation_layout) const override {
    return activation_layout;
  }

  Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void zero(Tensor& dst) override;
  void synchronize() override;
  int64_t device_memory_used_bytes() const override;
  /// GPU name and memory, driver, CUDA runtime, cuDNN and cuBLASLt versions.
  std::vector<std::pair<std::string, std::string>> environment() const override;
  void* native_stream() const override { return stream_; }
  Tensor alloc_host(std::vector<int64_t> shape, DType dtype, Layout layout) override;
  void upload_input(const Tensor& src, Tensor& dst) override;
  void release_input(const Tensor& dst) override;
  void forget_input(const Tensor& dst) override;
  std::unique_ptr<Graph> capture(const std::function<void()>& fn) override;
  /// cudaProfilerStart / cudaProfilerStop (Backend::profiler_range).
  void profiler_range(bool start) override;

  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override;
  void conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                           const Tensor& bias, const Tensor& z, bool relu, Tensor& y) override;
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override;
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override;

  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                           Tensor& save_mean, Tensor& save_var) override;
  void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, Tensor& y) override;
  void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override;
  /// With RN50_CUDA_BN_JOIN=fused (bn_join_fused()): the BN kernels above with the residual
  /// added before the ReLU in their apply pass (one pass over y, rounded once), and backward
  /// dres = y > 0 ? g1 + g2 : 0 written by the statistics pass, which then sums the rounded
  /// dres (bits as the separate add_relu_bwd + batchnorm_bwd). Otherwise Backend's default (the
  /// separate kernels). Both layouts, f32/f16/bf16 (batchnorm.cu).
  void batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                    const Tensor& residual, const Tensor& gamma,
                                    const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                                    Tensor& y, Tensor& save_mean, Tensor& save_var) override;
  void batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                              const Tensor& g1, const Tensor& g2, const Tensor& gamma,
                              const Tensor& save_mean, const Tensor& save_var, Tensor& dres,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta) override;

  void relu_fwd(const Tensor& x, Tensor& y) override;
  void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) override;
  void add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) override;

  void maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) override;
  void maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     Tensor& dx) override;
  void global_avgpool_fwd(const Tensor& x, Tensor& y) override;
  void global_avgpool_bwd(const Tensor& dy, Tensor& dx) override;

  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                  Tensor& db) override;

  void softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& loss,
                        Tensor& probs) override;
  void softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing, float scale,
                        Tensor& dlogits, const Tensor& state) override;
  void softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, const Tensor& state, Tensor& loss,
                              Tensor& probs) override;
  void softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, float scale, Tensor& dlogits,
                              const Tensor& state) override;
  void mixup_images(Tensor& x, const Tensor& state) override;
  void fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) override;
  void fake_quant_weight(const Tensor& w, Tensor& y) override;
  void topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) override;

  void normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                    const std::array<float, 3>& std, Tensor& dst) override;

  void sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                  Tensor& momentum_buf) override;
  void check_finite(const Tensor& x, Tensor& state) override;
  void update_loss_scale(const LossScaleParams& p, Tensor& state) override;
  /// One thread reads the ring row from pinned host memory (sgd.cu); ring must come from
  /// alloc_host (rn50::Error otherwise).
  void load_step_inputs(const Tensor& ring, Tensor& state) override;

  // ---- shared with the op files ----
  cudaStream_t stream() const { return stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  bool allow_tf32() const { return allow_tf32_; }
  /// Whether a block's last BatchNorm and its residual join run as one op
  /// (supports(Op::batchnorm_add_relu)): RN50_CUDA_BN_JOIN=fused, read once when the backend is
  /// made; "separate" (the default until a GPU window measures the fused op faster) keeps the
  /// separate BN and add_relu kernels. Any other value: rn50::Error naming the variable.
  bool bn_join_fused() const { return bn_join_fused_; }
  /// The block cap of the BN apply passes with each thread's NHWC channels fixed, their
  /// coefficients in registers (batchnorm.cu's FIXED kernels): the SMs x 8 blocks of 256
  /// threads (a full SM of 2048 threads) with RN50_CUDA_BN_COEFFS=registers; 0 (the default,
  /// "loads", until a GPU window measures the other faster): one thread per pack, coefficients
  /// loaded per element. Any other value: rn50::Error naming the variable.
  unsigned bn_fixed_channel_blocks() const {
    return bn_coeffs_in_registers_ ? static_cast<unsigned>(sm_count_) * 8u : 0u;
  }
  /// Whether max pooling's backward reads the argmax indices its forward saved (pool.cu):
  /// RN50_CUDA_MAXPOOL_BWD=indices; "recompute" (the default until a GPU window measures the
  /// indices faster) recomputes every covering window's argmax from x. Any other value:
  /// rn50::Error naming the variable.
  bool maxpool_indices() const { return maxpool_indices_; }
  /// Whether conv2d_fwd, conv2d_bwd_data and conv2d_bwd_weights run on cuDNN's graph (backend)
  /// API (conv_graph.h: an operation graph per plan key, engine configs from the heuristics,
  /// the fastest of the first few timed once): RN50_CUDNN_API=graph, read once when the backend
  /// is made; "legacy" (the default until a GPU window measures the graph API faster) keeps
  /// cudnnFind*AlgorithmEx and cudnnConvolution* (conv.cpp). conv2d_bias_act_fwd's fused call
  /// stays on the legacy API either way. Any other value: rn50::Error naming the variable.
  bool cudnn_graph_api() const { return cudnn_graph_api_; }
  /// Whether training batch norm (batchnorm_fwd_train, batchnorm_bwd, and the fused
  /// batchnorm_add_relu_*) runs cuDNN's cudnnBatchNormalizationForwardTrainingEx /
  /// BackwardEx where cuDNN takes the configuration (bn_cudnn_refusal: NHWC, f16/bf16,
  /// C % 4 == 0): RN50_CUDA_BN=cudnn, read once when the backend is made; "own" (the default
  /// until a GPU window measures cuDNN's faster) keeps our kernels. Any other value:
  /// rn50::Error naming the variable.
  bool bn_cudnn() const { return bn_cudnn_; }
  /// Why training batch norm on x (activations of dtype `dt` in layout `l`, C channels) does
  /// NOT run on cuDNN, or nullptr when it does: the one place that decides (batchnorm_cudnn.cpp).
  /// C < 0: not known (supports(), which sees no shape), only the dtype/layout conditions.
  const char* bn_cudnn_refusal(const BatchNormParams& p, DType dt, Layout l, int64_t C) const;
  /// The device's name (cudaDeviceProp::name, "NVIDIA H100 80GB HBM3"): the key of cached
  /// algorithm choices (conv_choices.h).
  const std::string& gpu_name() const { return gpu_name_; }
  /// Throws rn50::Error naming op/name unless t is a defined tensor on this device.
  void check_device(const char* op, const char* name, const Tensor& t) const;
  /// Dtype/layout conversion between two device tensors of one logical shape (convert.cu).
  void convert_on_device(const Tensor& src, Tensor& dst);
  /// In place y = act(y + bias[k] + z) on a 4-D y (eltwise.cu): conv2d_bias_act_fwd's epilogue
  /// when cuDNN's fused call does not take the configuration. z: undefined or y's shape, dtype
  /// and memory order.
  void bias_act(const Tensor& bias, const Tensor& z, bool relu, Tensor& y);
  /// var[c] = 1 / inv_std[c]^2 - eps (at least 0) for c < C, in double, rounded once to f32, on
  /// the backend stream (batchnorm.cu): the biased batch variance of the Backend contract's
  /// save_var from cuDNN's saved inverse standard deviation 1 / sqrt(var + eps).
  void bn_var_from_inv_std(const float* inv_std, double eps, uint32_t C, float* var);

  /// The one workspace shared by all cuDNN/cuBLASLt calls (ops run in stream order).
  DeviceBuffer workspace;
  /// Per-op scratch (BN partial sums, loss partials, fc casts), grown on first use.
  DeviceBuffer bn_scratch, loss_scratch, linear_scratch;
  std::unordered_map<std::string, std::unique_ptr<ConvPlan>> conv_plans;
  std::unordered_map<std::string, std::unique_ptr<LinearPlan>> linear_plans;
  /// The graph API's plans (RN50_CUDNN_API=graph), keyed as conv_plans.
  std::unordered_map<std::string, std::unique_ptr<GraphConvPlan>> conv_graph_plans;

 private:
  int device_index_ = 0;
  bool allow_tf32_ = true;
  bool bn_join_fused_ = false;
  bool bn_coeffs_in_registers_ = false;
  bool maxpool_indices_ = false;
  bool cudnn_graph_api_ = false;
  bool bn_cudnn_ = false;
  /// The cuDNN BN layers' state (RN50_CUDA_BN=cudnn), keyed by the layer's save_mean buffer:
  /// the one buffer both directions receive (batchnorm_bwd without a ReLU gets no y). Made and
  /// grown on a layer's first (eager) training forward, never freed before the backend, so
  /// never under a capture; at most kMaxBnCudnnStates entries (batchnorm_cudnn.cpp).
  std::unordered_map<const void*, std::unique_ptr<BnCudnnState>> bn_cudnn_states_;
  /// batchnorm_add_relu_bwd on cuDNN: g1 + g2 (or a copy of g1 when dres aliases it), the one
  /// dy cuDNN reads, apart from dres, which it writes. Grown on the first (eager) call.
  DeviceBuffer bn_dy_scratch_;
  /// maxpool2d_fwd's argmax indices (u8 per output) keyed by y's buffer, with what they were
  /// computed for (pool.cu's pool_key); grown on the first (eager) call, never under capture.
  struct PoolIndices {
    std::string key;
    DeviceBuffer buf;
  };
  std::unordered_map<const void*, PoolIndices> pool_indices_;
  int sm_count_ = 1;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  /// upload_input/release_input bookkeeping, keyed by the destination's device pointer.
  struct InputSlot {
    cudaEvent_t released = nullptr;  ///< recorded on stream_ by release_input
    cudaEvent_t uploaded = nullptr;  ///< recorded on copy_stream_ after the H2D copy
    void* pinned = nullptr;          ///< pinned staging of the slot (pageable sources)
    size_t pinned_bytes = 0;
    Tensor held;                     ///< a pinned source the last H2D copy reads directly
    bool has_release = false, has_upload = false;
  };
  std::map<const void*, InputSlot> input_slots_;

  /// Checks the activations of a batchnorm op: each a 4-D float tensor on this device, all of one
  /// shape, dtype and layout. Throws rn50::Error naming op and the tensor (batchnorm.cu).
  void check_bn_acts(const char* op,
                     std::initializer_list<std::pair<const char*, const Tensor*>> acts) const;
  /// batchnorm_fwd_train, with `residual` (undefined: none) added before the ReLU (batchnorm.cu).
  void bn_forward_train(const char* op, const BatchNormParams& p, bool relu, const Tensor& x,
                        const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, Tensor& y, Tensor& save_mean,
                        Tensor& save_var);
  /// batchnorm_bwd; with `dres` defined, the join's backward first: g = y > 0 ? dy + g2 : 0
  /// (g2 may be undefined) rounded into dres, and BN's backward on it (batchnorm.cu).
  void bn_backward(const char* op, const BatchNormParams& p, bool relu, const Tensor& x,
                   const Tensor& y, const Tensor& dy, const Tensor& g2, Tensor& dres,
                   const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                   Tensor& dx, Tensor& dgamma, Tensor& dbeta);
  /// bn_forward_train on cuDNN (cudnnBatchNormalizationForwardTrainingEx): arguments checked by
  /// bn_forward_train, bn_cudnn_refusal() null for x. False (nothing done: our kernels run) only
  /// when save_mean's layer is new and kMaxBnCudnnStates layers have state. batchnorm_cudnn.cpp.
  bool cudnn_bn_forward_train(const BatchNormParams& p, bool relu, const Tensor& x,
                              const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                              Tensor& running_mean, Tensor& running_var, Tensor& y,
                              Tensor& save_mean, Tensor& save_var);
  /// bn_backward on cuDNN (cudnnBatchNormalizationBackwardEx) when save_mean's layer has the
  /// state of a cuDNN forward on these x (and y, with an activation) and this op; false (nothing
  /// done: our kernels run) otherwise. Arguments checked by bn_backward. batchnorm_cudnn.cpp.
  bool cudnn_bn_backward(const BatchNormParams& p, bool relu, const Tensor& x, const Tensor& y,
                         const Tensor& dy, const Tensor& g2, Tensor& dres, const Tensor& gamma,
                         const Tensor& save_mean, Tensor& dx, Tensor& dgamma, Tensor& dbeta);
};

}  // namespace rn50::cuda
