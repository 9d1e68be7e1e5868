// rn50: the ResNet family as a trainable model on a Backend: built from its network description
// (rn50/graph.h), with the forward/backward schedule walked from that description (no autograd),
// and parameters, gradients and statistics in contiguous slabs.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rn50/backend.h"
#include "rn50/graph.h"
#include "rn50/tensor.h"

namespace rn50 {

struct ModelOptions {
  int num_classes = 1000;
  Layout layout = Layout::NHWC;    ///< activation layout
  /// Compute dtype of activations, conv/fc weights and their gradients: f32, or f16/bf16 for
  /// AMP (DLE --amp). Master parameters, BN parameters and statistics, the loss and the
  /// optimiser stay f32 (torch.cuda.amp autocast: convolutions and linear layers in half,
  /// batch norm with f32 parameters). F64 on the ref backend only (float64 golden tests).
  DType compute_dtype = DType::f32;
  bool zero_init_residual = false; ///< gamma = 0 for each residual branch's last BN (DLE flag)
  /// Input channels: 3, or 4 (DLE --image-shape 4,H,W: the input gets a zero fourth channel and
  /// conv1.weight is [64, 4, 7, 7]; a 3-channel conv1.weight loads with a zero fourth slice).
  int input_channels = 3;
  /// Quantization-aware training (DLE --qat; src/model/qat.h, src/core/fake_quant.h): every
  /// conv's and the fc's weights are fake-quantized per output channel and their input
  /// activations (and downsample shortcuts) per tensor with moving-average ranges, in training
  /// and eval forwards; backward is the straight-through estimator. The ranges are part of
  /// state_dict() (keys "<layer>._input_quantizer._amax" ..., see qat::ActQuantizer).
  bool qat = false;
  /// Pure fp16 (DLE --use-pure-fp16, Paddle's O2 without master weights; compute_dtype must be
  /// F16): the conv/fc parameters, their gradients and (in SgdOptimizer) their momentum exist
  /// only in f16: compute_param_slab() and compute_grad_slab() are their master copies, and
  /// param_slab() / grad_slab() hold just the f32 parameters (BatchNorm gamma/beta) from element
  /// master_offset() of the slab layout. BN statistics and the loss stay f32. Not with qat.
  bool pure_half = false;
  double bn_eps = 1e-5;
  double bn_momentum = 0.1;
};

/// ResNet with its own parameter/gradient slabs and activation buffers on `backend`. Throws
/// rn50::Error (from the constructor) when the backend cannot compute in options().compute_dtype
/// and layout, or num_classes < 1.
/// Slab order: every decayed parameter (conv/fc weights) first, then BN gamma/beta and fc bias,
/// so SGD applies weight decay to the prefix [0, decay_count()). Within the slabs, conv weights
/// are stored in weight_layout(), the backend's preferred layout (Backend::
/// preferred_weight_layout: OIHW on the CPU backends, KRSC on CUDA with NHWC activations), so
/// f32 training uses the master weights directly: no per-step copies. param(), grad() and
/// state_dict() convert nothing themselves: views carry their layout, and Backend::copy into an
/// OIHW host tensor converts.
///
/// AMP: when options().compute_dtype is f16/bf16, the conv and fc parameters are used through
/// a compute copy (compute_param_slab(): the same offsets and layout in the compute dtype) and
/// their gradients are produced there and converted into the f32 grad_slab() (per parameter
/// when a grad-ready hook is set, else once per contiguous range at the end of backward(), or
/// not at all under set_grads_in_compute_slab).
/// The f32 param_slab() stays the master copy: after changing it outside an optimiser step
/// that writes the compute copy itself (SgdParams::compute_copy), call refresh_compute_params().
/// Pure fp16 (ModelOptions::pure_half): the compute copy is the only copy of the conv/fc
/// parameters; param() and grad() of those return f16 views into it.
class ResNet {
 public:
  ResNet(Backend& backend, ArchSpec arch, ModelOptions opt);
  ~ResNet();

  const ArchSpec& arch() const;
  /// The network description the model was built from (layers, parameters, slab layout).
  const NetworkDesc& desc() const;
  const ModelOptions& options() const;
  /// torchvision initialisation: conv kaiming_normal_(fan_out, relu); BN gamma 1 beta 0 (or
  /// gamma 0 for last BN of each block with zero_init_residual); fc as nn.Linear default
  /// (kaiming_uniform a=sqrt(5) -> U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias).
  /// Deterministic given seed. Running mean 0, var 1, num_batches_tracked 0.
  void init(uint64_t seed);

  const std::vector<ParamInfo>& params() const;
  const std::vector<BufferInfo>& buffers() const;
  int64_t num_params() const;   ///< total elements of the parameter slab
  int64_t decay_count() const;  ///< elements of the decayed prefix
  /// f32 on the backend device: num_params elements, or under pure_half only the f32
  /// parameters' span [master_offset(), master_offset() + numel) of the slab layout.
  Tensor& param_slab();
  /// Slab-layout element offset of param_slab()[0] and grad_slab()[0] (0 unless pure_half).
  int64_t master_offset() const;
  /// The AMP compute copy of param_slab() (compute dtype, num_params elements), or an
  /// undefined tensor when the model computes in f32. Under pure_half it is the master of the
  /// conv/fc parameters (half_ranges()).
  Tensor& compute_param_slab();
  /// The compute-dtype gradients (num_params elements; backward writes the conv/fc entries), or
  /// an undefined tensor in f32. Under pure_half the conv/fc gradients stay here.
  Tensor& compute_grad_slab();
  /// Under pure_half: the conv/fc parameters as maximal contiguous [begin, end) element ranges
  /// of the slab layout (held in compute_param_slab()); empty otherwise.
  std::vector<std::pair<int64_t, int64_t>> half_ranges() const;
  /// Whether parameter `p` lives in f16 only (pure_half and a conv/fc parameter).
  bool is_half_master(const ParamInfo& p) const;
  /// AMP (a compute copy, not pure_half): the conv/fc parameters as maximal contiguous
  /// [begin, end) element ranges of the slab layout, the entries compute_param_slab() and
  /// compute_grad_slab() hold; empty in f32 and under pure_half.
  std::vector<std::pair<int64_t, int64_t>> mirrored_ranges() const;
  /// AMP without a grad-ready hook: on, backward() leaves the conv/fc gradients in
  /// compute_grad_slab() only and does not convert them into grad_slab() (whose mirrored_ranges()
  /// then hold stale values), for an optimiser that reads them there (SgdOptimizer on a backend
  /// whose sgd_update takes bf16 gradients: 1 read of 2 bytes per gradient instead of 2 + 4 + 4).
  /// Off by default; no effect in f32, under pure_half or while a grad-ready hook is set.
  void set_grads_in_compute_slab(bool on);
  /// Whether backward() leaves the conv/fc gradients in compute_grad_slab() only (above).
  bool grads_in_compute_slab() const;
  /// The layout of conv weights (and their gradients and momentum) in the slabs.
  Layout weight_layout() const;
  /// f32, written by backward(): num_params elements (pure_half: the f32 span, as param_slab()).
  Tensor& grad_slab();
  /// View into the slab (f32, torchvision's logical shape; 4-D in weight_layout()); throws
  /// rn50::Error on an unknown name.
  Tensor param(const std::string& name);
  /// View into the gradient slab, as param().
  Tensor grad(const std::string& name);
  Tensor buffer(const std::string& name);

  /// x: (N,3,H,W) in options().compute_dtype and options().layout on the backend. Returns logits
  /// (N, num_classes) f32 (converted from the compute dtype under AMP).
  /// train=true uses batch statistics, updates running stats and keeps what backward needs, and
  /// adds one to every num_batches_tracked (torch BatchNorm2d).
  const Tensor& forward(const Tensor& x, bool train);
  /// The f32 logits of the last forward() (valid until the next forward or a shape change).
  const Tensor& forward_output() const;
  /// dlogits (N, num_classes) f32 (already multiplied by the loss scale under AMP): fills
  /// grad_slab() with d loss / d params (f32; still scaled; the conv/fc entries only in
  /// compute_grad_slab() under set_grads_in_compute_slab). Requires a preceding
  /// forward(train=true) with the same batch.
  void backward(const Tensor& dlogits);
  /// Copies the f32 master parameters into the compute copy (see the class comment). Called by
  /// init() and load_state_dict(); nothing to do in f32.
  void refresh_compute_params();
  /// Parameter indices (into params()) in the order backward() finishes their f32 gradients in
  /// grad_slab(): the description's layers in reverse (fc.weight, fc.bias, then each conv+BN
  /// from the last to the stem: BN weight, BN bias, conv weight; a block's downsample before
  /// its branch, as it comes after the branch in torchvision's forward).
  const std::vector<int>& grad_ready_order() const;
  /// Called by backward() with each parameter index as soon as its f32 gradient is final, in
  /// grad_ready_order() (data-parallel training starts allreduces from it). Empty: no calls.
  void set_grad_ready_hook(std::function<void(int)> hook);
  /// The training schedule's memory plan (src/model/schedule.cpp): how many gradient slots
  /// backward keeps alive at once and how many scratch slots transient forward outputs share
  /// (both fixed by the network), and the arena sizes for the last input shape forward() ran
  /// with (0 before the first forward), in bytes.
  struct MemoryPlan {
    int grad_slots = 0;
    int scratch_slots = 0;
    int64_t activation_bytes = 0;  ///< forward activations kept for backward, incl. scratch
    int64_t gradient_bytes = 0;    ///< the gradient slots (+ the compute-dtype dlogits)
  };
  MemoryPlan memory_plan() const;
  /// Changes whenever forward() re-plans its activation buffers (a new input shape), i.e. when
  /// work recorded against the old buffers (a CUDA graph) must not be replayed any more.
  int64_t plan_generation() const;
  /// Adds `delta` to every BN's num_batches_tracked: for training steps replayed from a
  /// recorded graph, which does not run forward() on the host.
  void add_batches_tracked(int64_t delta);

  /// Host copies of parameters and buffers keyed by torchvision names (f32; num_batches_tracked
  /// as i64), in torchvision's state_dict order. A QAT model appends its activation ranges (f32
  /// [1] each: qat::amax_key, state_key, accum_key per quantizer, in layer order).
  std::vector<std::pair<std::string, Tensor>> state_dict();
  /// Loads names present in `sd` (host tensors, f32/i64, shapes must match). strict: every param
  /// and running buffer must be present (num_batches_tracked optional). QAT ranges load into a
  /// QAT model and are optional there (QAT starts from a float checkpoint: a strict load without
  /// them resets the ranges to fresh ones);
  /// a model without options().qat refuses them in strict mode, naming --qat. Throws naming
  /// the key.
  void load_state_dict(const std::map<std::string, Tensor>& sd, bool strict = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rn50
