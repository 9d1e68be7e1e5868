// rn50: internal state of rn50::ResNet (the pimpl), shared by the files of src/model:
//   resnet.cpp          construction (module list, slab offsets), accessors
//   resnet_init.cpp     torchvision initialisation
//   resnet_state.cpp    state_dict / load_state_dict
//   resnet_schedule.cpp activation planning, forward and backward schedule
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/tensor.h"

namespace rn50 {

namespace model_detail {

/// One BatchNorm2d's running buffers: running_mean / running_var are f32 (C) views into the
/// backend-resident statistics slab; num_batches_tracked is element `nbt_index` of the host i64
/// counter tensor (a host counter: it is only ever incremented and read by the host).
struct BnState {
  std::string name;  ///< module name, e.g. "layer1.0.bn1"
  int64_t channels = 0;
  int64_t stat_offset = 0;  ///< running_mean at stat_offset, running_var at stat_offset + C
  Tensor running_mean, running_var;
};

/// A conv (no bias) followed by a BatchNorm2d, optionally with a fused ReLU: the unit of the
/// schedule. Keeps, after a training forward, everything its backward needs.
struct ConvBnUnit {
  int conv_param = -1, gamma_param = -1, beta_param = -1;  ///< indices into params
  int bn = -1;                                             ///< index into bns
  int64_t in_channels = 0, out_channels = 0, kernel = 1;
  Conv2dParams conv;
  bool relu = false;
  // Slab views (fixed at construction).
  Tensor w, gamma, beta, dw, dgamma, dbeta;
  // Shape-dependent activations (views into the activation arena), (N,K,OH,OW) in the layout.
  Tensor x;                    ///< input handle of the last forward (not owned by the unit)
  Tensor y;                    ///< conv output
  Tensor z;                    ///< BN (+ReLU) output
  Tensor save_mean, save_var;  ///< (K) batch statistics of the last training forward
};

/// A residual block: branch units in order, an optional downsample unit, and the join
/// out = relu(branch + shortcut).
struct Block {
  std::vector<int> units;  ///< branch units (2 for BasicBlock, 3 for Bottleneck)
  int downsample = -1;     ///< unit index of downsample.0/.1, or -1 (identity shortcut)
  Tensor in;               ///< input handle of the last forward
  Tensor out;              ///< join output (N, C_out, OH, OW)
};

/// A state_dict entry in torchvision order: a parameter or a buffer (by index).
struct SdEntry {
  bool is_param;
  int index;
};

}  // namespace model_detail

struct ResNet::Impl {
  Impl(Backend& b, ArchSpec a, ModelOptions o) : be(b), arch(std::move(a)), opt(o) {}

  Backend& be;
  ArchSpec arch;
  ModelOptions opt;

  // ---- parameters and buffers ----
  std::vector<ParamInfo> params;  ///< torchvision named_parameters() order
  std::map<std::string, int> param_index;
  std::vector<BufferInfo> buffers;  ///< torchvision named_buffers() order
  std::map<std::string, int> buffer_index;
  std::vector<int> buffer_bn;            ///< buffer index -> bn index
  std::vector<int> buffer_what;          ///< 0 running_mean, 1 running_var, 2 num_batches_tracked
  std::vector<model_detail::SdEntry> sd_order;
  int64_t num_params = 0, decay_count = 0;
  Tensor param_slab, grad_slab;  ///< f32 (num_params) on the backend
  /// Compute copies (compute dtype, num_params elements; only conv/fc entries used) when
  /// `mirror` (see ResNet's class comment); conv weights there are in `weight_layout`.
  bool mirror = false;
  Layout weight_layout = Layout::NCHW;
  Tensor param_lp, grad_lp;
  std::vector<int> mirrored;     ///< indices of the params used through the compute copy
  Tensor stat_slab;              ///< f32 running means/vars on the backend
  Tensor nbt;                    ///< host i64 (number of BNs): num_batches_tracked
  std::vector<model_detail::BnState> bns;

  // ---- schedule ----
  std::vector<model_detail::ConvBnUnit> units;
  int stem = -1;  ///< conv1/bn1 unit
  std::vector<model_detail::Block> blocks;
  int fc_w = -1, fc_b = -1;  ///< param indices
  Tensor fcw, fcb, dfcw, dfcb;
  int64_t feature_channels = 0;  ///< channels into the fc

  std::vector<int> ready_order;           ///< grad_ready_order()
  std::function<void(int)> ready_hook;
  /// Backward finished param i's gradient (in the compute copy, if mirrored): converts it into
  /// the f32 slab when mirrored, then calls the hook.
  void grad_done(int i);

  // ---- shape-dependent buffers ----
  int64_t cur_n = -1, cur_h = -1, cur_w = -1;
  int64_t plan_generation = 0;  ///< incremented by every (re)plan
  Tensor act_arena;   ///< compute dtype, flat: every forward activation
  Tensor stat_arena;  ///< f32 flat: the BN batch statistics (save_mean / save_var)
  Tensor grad_arena;  ///< compute dtype, flat: 3 gradient slots of max activation size + dpooled
  Tensor logits_lp, dlogits_lp;  ///< (N, classes) in the compute dtype when it is not f32
  int64_t slot_elems = 0;
  Tensor pool_out;    ///< maxpool output
  Tensor pooled;      ///< (N, C) global average pool output
  Tensor logits;      ///< (N, num_classes)
  Tensor dpooled;     ///< (N, C)
  bool have_train_state = false;

  // construction helpers (resnet.cpp)
  int add_param(const std::string& name, std::vector<int64_t> shape, ParamKind kind);
  int add_bn(const std::string& name, int64_t channels);
  int add_unit(const std::string& conv, const std::string& bn, int64_t c, int64_t k,
               int64_t kernel, int stride, int pad, bool relu);
  Tensor param_view(int i);
  Tensor grad_view(int i);
  /// The tensor the ops use for param i: the compute copy's view (mirrored params; conv weights
  /// in weight_layout) or the master view.
  Tensor compute_param_view(int i);
  Tensor compute_grad_view(int i);

  // schedule (resnet_schedule.cpp)
  void plan(int64_t n, int64_t h, int64_t w);
  void unit_forward(model_detail::ConvBnUnit& u, const Tensor& x, bool train);
  void unit_backward(model_detail::ConvBnUnit& u, const Tensor& dz, Tensor& dconv, Tensor* dx);
  Tensor slot(int i, const std::vector<int64_t>& shape);
};

}  // namespace rn50
