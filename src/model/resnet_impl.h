// rn50: internal state of rn50::ResNet (the pimpl), shared by the files of src/model:
//   resnet.cpp          construction from the network description (slabs, statistics, steps),
//                       accessors
//   schedule.cpp        the training schedule walked from the description: fused steps, memory
//                       plan, forward, backward
//   resnet_init.cpp     torchvision initialisation
//   resnet_state.cpp    state_dict / load_state_dict
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rn50/backend.h"
#include "rn50/graph.h"
#include "rn50/model.h"
#include "rn50/tensor.h"
#include "model/qat.h"

namespace rn50 {

namespace model_detail {

/// One BatchNorm2d's running buffers: running_mean / running_var are f32 (C) views into the
/// backend-resident statistics slab; num_batches_tracked is element `index` of the host i64
/// counter tensor (a host counter: it is only ever incremented and read by the host).
struct BnState {
  int layer = -1;  ///< description layer
  int64_t channels = 0;
  int64_t stat_offset = 0;  ///< running_mean at stat_offset, running_var at stat_offset + C
  Tensor running_mean, running_var;
};

/// What a step of the training schedule computes. Steps fuse description layers:
///   unit    conv -> batchnorm [-> relu]   (conv2d_fwd, batchnorm_fwd_train with fused ReLU)
///   join    add -> relu                   (add_relu_fwd)
///   maxpool, avgpool (global average), fc: one layer each.
enum class StepKind : uint8_t { unit, join, maxpool, avgpool, fc };

/// Value id of the network input (step outputs are identified by their step index).
inline constexpr int kInputValue = -1;

struct Step {
  StepKind kind = StepKind::unit;
  int layer = -1;       ///< the description layer whose output is this step's output
  std::vector<int> in;  ///< input values: step indices or kInputValue
  /// Output kept from forward to backward (an input of a unit, pool or fc, or an output whose
  /// backward reads it: a ReLU's mask); otherwise it lives in a transient scratch slot.
  bool saved = true;
  int scratch = -1;  ///< scratch slot of a transient output
  /// Training forward, where the backend fuses BatchNorm with a residual join
  /// (Op::batchnorm_add_relu): on a unit without ReLU that only its join reads, the join step
  /// whose output it writes (batchnorm_add_relu_fwd_train); on that join, the unit. -1 if not.
  int fused_join = -1, fused_unit = -1;
  // unit: conv + BN (+ ReLU)
  int conv_layer = -1, bn_layer = -1;
  bool relu = false;
  Conv2dParams conv;
  int conv_param = -1, gamma_param = -1, beta_param = -1, bn = -1;
  Tensor w, gamma, beta, dw, dgamma, dbeta;  ///< slab views (fixed at construction)
  /// QAT: the fake-quantized weight (compute dtype, in the QAT weight slab; w otherwise), the
  /// quantizer of in[0] (units, pools, fc) and of in[1] (joins: the shortcut), or -1.
  Tensor wq;
  int qin = -1, qres = -1;
  // maxpool
  Pool2dParams pool;
  // Shape-dependent views into the arenas, set by plan().
  Tensor out;                  ///< the step's output (N,C,H,W) in the model layout, or (N,C)
  Tensor y;                    ///< unit: conv output
  Tensor save_mean, save_var;  ///< unit: (C) batch statistics of the last training forward
};

}  // namespace model_detail

struct ResNet::Impl {
  Impl(Backend& b, NetworkDesc d, ModelOptions o) : be(b), desc(std::move(d)), opt(o) {}

  Backend& be;
  const NetworkDesc desc;  ///< the network; params/buffers/state_dict order come from it
  ModelOptions opt;

  // ---- parameters and buffers ----
  std::map<std::string, int> param_index;
  std::map<std::string, int> buffer_index;
  std::vector<int> buffer_bn;    ///< buffer index -> bns index
  std::vector<int> buffer_what;  ///< 0 running_mean, 1 running_var, 2 num_batches_tracked
  /// f32 on the backend: num_params elements, or (pure) only the span of the f32 parameters,
  /// element f32_base of the slab layout first.
  Tensor param_slab, grad_slab;
  int64_t f32_base = 0;
  /// opt.pure_half: param_lp / grad_lp are the only copies of the conv/fc parameters and
  /// gradients (no f32 master, no conversion of gradients).
  bool pure = false;
  /// Layout of every 4-D (conv) parameter, gradient and momentum in the slabs: the backend's
  /// preferred weight layout (NCHW = OIHW on CPU backends, NHWC = KRSC on CUDA with NHWC).
  Layout weight_layout = Layout::NCHW;
  /// AMP compute copies (compute dtype, num_params elements at the same offsets and layout;
  /// only the conv/fc entries are used) when `mirror` (compute dtype != f32).
  bool mirror = false;
  Tensor param_lp, grad_lp;
  /// The conv/fc parameters as maximal contiguous [begin, end) element ranges of the slabs.
  std::vector<std::pair<int64_t, int64_t>> mirrored_ranges;
  /// ResNet::set_grads_in_compute_slab: backward skips the conversion into grad_slab.
  bool grads_stay_lp = false;
  /// Whether backward leaves the conv/fc gradients in grad_lp only (mirror, not pure, no
  /// grad-ready hook, grads_stay_lp).
  bool grads_only_lp() const { return mirror && !pure && !ready_hook && grads_stay_lp; }
  // ---- QAT (opt.qat; src/model/qat.h) ----
  std::vector<qat::ActQuantizer> quantizers;
  std::vector<int> quant_of_step;  ///< step index -> quantizer of its output, or -1
  int input_quant = -1;            ///< quantizer of the network input, or -1
  Tensor qat_state;                ///< f32 (quantizers x fake_quant::state_size) on the backend
  std::vector<Tensor> qat_states;  ///< per quantizer: its view of qat_state
  std::vector<Tensor> qat_values;  ///< per quantizer: the quantized copy (shape-dependent)
  Tensor qat_weights;              ///< compute dtype (num_params): fake-quantized conv/fc weights
  /// The tensor that a step reading value v (through quantizer q, or -1) sees.
  const Tensor& seen(int v, int q) const {
    return q >= 0 ? qat_values[static_cast<size_t>(q)] : value(v);
  }
  /// QAT construction: quantizers, state (fresh ranges), weight slab, the steps' qin/qres/wq.
  void build_qat();
  /// Fresh ranges (amax = state = accum = 1) for every quantizer.
  void reset_qat_state();

  Tensor stat_slab;           ///< f32 running means/vars on the backend
  Tensor nbt;                 ///< host i64 (number of BNs): num_batches_tracked
  std::vector<model_detail::BnState> bns;

  // ---- schedule (schedule.cpp) ----
  std::vector<model_detail::Step> steps;  ///< forward order
  int fc_step = -1;
  int num_scratch_slots = 0;  ///< transient forward outputs alive at once
  int num_grad_slots = 0;     ///< gradient buffers alive at once in backward
  std::vector<int> ready_order;  ///< grad_ready_order()
  std::function<void(int)> ready_hook;
  /// Backward finished param i's gradient (in the compute copy, if mirrored): converts it into
  /// the f32 slab when mirrored, then calls the hook.
  void grad_done(int i);

  // ---- shape-dependent buffers ----
  int64_t cur_n = -1, cur_h = -1, cur_w = -1;
  int64_t plan_generation = 0;  ///< incremented by every (re)plan
  Tensor act_arena;   ///< compute dtype, flat: every forward activation
  Tensor stat_arena;  ///< f32 flat: the BN batch statistics (save_mean / save_var)
  Tensor grad_arena;  ///< compute dtype, flat: num_grad_slots gradient slots (+ dlogits_lp)
  Tensor logits;      ///< f32 (N, num_classes)
  Tensor dlogits_lp;  ///< (N, classes) in the compute dtype when it is not f32
  int64_t slot_elems = 0;
  Tensor x_in;        ///< the input of the last training forward (the stem's weight gradient)
  bool have_train_state = false;

  // construction helpers (resnet.cpp)
  /// Param i's view into `slab` (any of the param/grad/compute slabs; `base`: the slab-layout
  /// offset of slab[0]), 4-D in weight_layout.
  Tensor layout_view(const Tensor& slab, int i, int64_t base = 0) const;
  /// Whether param i lives only in the compute slabs (pure and a conv/fc parameter).
  bool half_master(int i) const;
  /// Copies (converting the dtype) the mirrored ranges of `from` into `to`.
  void convert_ranges(const Tensor& from, Tensor& to);
  /// Param i's master view (f32; under pure, f16 for the conv/fc parameters) and gradient.
  Tensor param_view(int i);
  Tensor grad_view(int i);
  /// The tensor the ops use for param i: the compute copy's view (mirrored params; conv weights
  /// in weight_layout) or the master view.
  Tensor compute_param_view(int i);
  Tensor compute_grad_view(int i);

  // schedule (schedule.cpp)
  /// Fuses the description's layers into steps and plans scratch and gradient slots; fills
  /// steps, fc_step, num_scratch_slots, num_grad_slots and ready_order.
  void build_schedule();
  /// (Re)allocates or re-views the activation, statistics and gradient arenas for (n,3,h,w).
  void plan(int64_t n, int64_t h, int64_t w);
  const Tensor& value(int v) const;
  /// Backward over the steps in reverse. execute=false: a dry run that only plans the gradient
  /// slots and the gradient-ready order (used at construction); execute=true: runs it from
  /// dlogits.
  void walk_backward(bool execute, const Tensor* dlogits);
};

}  // namespace rn50
