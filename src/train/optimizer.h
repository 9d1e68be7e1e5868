// rn50: the optimiser — SGD with momentum and weight decay over a model's parameter slab
// (torch.optim.SGD with dampening 0 and nesterov false, the DLE recipe: momentum 0.875, weight
// decay 1/32768 on conv and fc weights only, i.e. the slab's decayed prefix).
//
// One fused backend pass per step (Backend::sgd_update) updates the f32 master weights and the
// momentum, applies the optional mask (2:4 sparsity: masked weights and their momentum held at
// zero) and writes the model's AMP compute copy. When the model leaves the conv/fc gradients in
// its bf16 compute slab (ResNet::grads_in_compute_slab: CPU AMP, set by TrainStep), one pass per
// contiguous range reads each gradient where it is. The step reads its lr, 1/loss scale and
// overflow flag from the device step state (StepState), so it can be recorded in a CUDA graph;
// an overflowing AMP step leaves everything untouched.
//
// Pure fp16 (ResNet options().pure_half, DLE --use-pure-fp16): the conv/fc parameters, their
// gradients and their momentum are f16 slabs, updated in f32 per element and rounded to f16
// when stored (Backend::sgd_update on f16 slabs); the BatchNorm parameters keep f32 weights and
// momentum. One update pass per slab range (3 for ResNet: the f32 span, the conv/fc weights,
// fc.bias).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/tensor.h"

namespace rn50 {

class SgdOptimizer {
 public:
  struct Options {
    float momentum = 0.875f;                 ///< DLE RN50 v1.5
    float weight_decay = 3.0517578125e-05f;  ///< 1/32768 (DLE), on the decayed prefix only
    /// --bn-weight-decay: decay every parameter (BatchNorm gamma/beta and biases too).
    bool decay_all = false;
  };

  /// Allocates the momentum slab (f32, model.num_params(), zero) on `backend`; it has the
  /// model's slab layout (conv entries in model.weight_layout()). Under pure fp16: an f32
  /// momentum slab the size of model.param_slab() and an f16 one of num_params() elements
  /// (the conv/fc entries, model.half_ranges(), are used).
  SgdOptimizer(Backend& backend, ResNet& model, const Options& opt);

  /// Queues one update of model.param_slab() from model.grad_slab(): lr, 1/loss scale and the
  /// overflow skip come from `step_state` (f32 StepState on the device). Also writes the
  /// model's compute copy (AMP) and applies the mask, in the same pass.
  void step(const Tensor& step_state);

  /// Holds the parameters where `mask` (host or device u8, model.num_params() elements in the
  /// slab's layout) is 0 at exactly zero: they and their momentum are zeroed now and after every
  /// step. An undefined tensor removes the mask. Throws rn50::Error on a wrong shape or dtype.
  void set_mask(const Tensor& mask);
  /// The mask on the device, or an undefined tensor.
  const Tensor& mask() const { return mask_; }
  /// set_mask from per-parameter masks: u8 host tensors keyed by parameter name, each of the
  /// parameter's torchvision shape (any 4-D layout); parameters not named are not masked.
  /// Throws rn50::Error naming an unknown name or a wrong shape.
  void set_param_masks(const std::map<std::string, Tensor>& masks);
  /// The per-parameter masks (u8 host, torchvision layout) of every parameter the mask holds
  /// any zero of; empty without a mask. Synchronises the backend.
  std::vector<std::pair<std::string, Tensor>> param_masks();
  /// Prefix of the masks' keys in state_dict(): "asp_mask.<parameter name>", a namespace of its
  /// own next to torchvision's names.
  static constexpr const char* kMaskPrefix = "asp_mask.";

  /// The momentum slab (f32, num_params; under pure fp16 the f32 span of model.param_slab()) on
  /// the device.
  Tensor& momentum() { return momentum_; }
  /// Pure fp16: the f16 momentum slab (num_params elements); undefined otherwise.
  Tensor& half_momentum() { return momentum_half_; }
  /// Bytes of optimiser state on the device (momentum slabs and the mask).
  int64_t state_bytes() const;

  /// The optimiser's checkpoint state: each parameter's momentum buffer as a host f32 tensor in
  /// torchvision's layout (OIHW for convs), keyed by the parameter's name (torch's
  /// optimizer.state[p]["momentum_buffer"]), plus the 2:4 masks (param_masks(), u8) under
  /// kMaskPrefix keys. Synchronises the backend.
  std::vector<std::pair<std::string, Tensor>> state_dict();
  /// Loads momentum buffers saved by state_dict() (f32/f64/f16/bf16 host tensors); every
  /// parameter must be present with its shape. Masks under kMaskPrefix keys, when present,
  /// become the mask (set_param_masks). `what` names the source (a file) in errors.
  /// Throws rn50::Error naming the file and the key.
  void load_state_dict(const std::map<std::string, Tensor>& sd, const std::string& what);

 private:
  /// One update of every slab range from `p` (lr, state, mask of the whole slab layout): the
  /// f32 slab and, under pure fp16, each f16 range. zero_grads: update with zero gradients
  /// (applying a mask with lr 0).
  void update(const SgdParams& p, bool zero_grads);
  /// Parameter p's momentum view (its slab, layout and dtype).
  Tensor momentum_view(const ParamInfo& p);

  Backend& be_;
  ResNet& model_;
  Options opt_;
  Tensor momentum_, momentum_half_, mask_;
};

}  // namespace rn50
