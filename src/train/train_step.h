// rn50: one training step, entirely on the backend's device (no host in the loop):
//   normalize_u8(slot images) -> forward(train) -> softmax_xent_fwd/bwd (label smoothing, the
//   loss scale read from the step state) -> backward -> [AMP: check_finite of the f32 gradient
//   slab] -> the optimiser's step (train/optimizer.h: SGD with lr and 1/loss scale from the
//   step state, skipped on overflow; the AMP compute copy written in the same pass) ->
//   [AMP: update_loss_scale]. With --mixup, mixup_images runs after normalize_u8 and the loss
//   is softmax_xent_mixup_fwd/bwd against the reversed batch's labels.
// The per-step scalars live in a device step state (StepState); the host writes only the lr
// before each step. On backends that can record (CUDA), the step for each input slot runs
// eagerly once (cuDNN algorithm search, workspace growth) and is then recorded once as a graph
// and replayed: one launch per step.
//
// Data parallelism: each rank's loss gradient is scaled by 1/world and the gradient buckets
// are allreduced (summed) as backward produces them (StepOptions::bucketer), before the
// overflow check and SGD, so every rank applies the same averaged step.
//
// AMP (DLE --amp): fp16 with dynamic loss scaling as torch.cuda.amp.GradScaler (init scale
// --scale-loss, growth x2 every 2000 finite steps, backoff x0.5 and the step skipped on an
// inf/NaN gradient); bf16 without scaling (torch autocast bf16 needs none).
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "rn50/backend.h"
#include "rn50/parallel.h"
#include "rn50/model.h"
#include "model/input_stage.h"
#include "train/optimizer.h"

namespace rn50 {

struct StepOptions {
  float label_smoothing = 0.1f;
  /// Mixup (DLE --mixup): each step mixes the normalised images with the batch in reversed
  /// order and trains on the mixed targets (Backend::mixup_images, softmax_xent_mixup_*), with
  /// the lam given to run(). The InputStage must keep reversed labels.
  bool mixup = false;
  /// Loss scaling with overflow checks (fp16 AMP). false: scale fixed at initial_loss_scale and
  /// no check (f32, bf16).
  bool loss_scaling = false;
  float initial_loss_scale = 1.f;
  LossScaleParams scale;
  /// Record the step as a graph and replay it when the backend can (CUDA).
  bool use_graphs = true;
  /// Multiplies the loss gradient: 1 / world_size in data-parallel training, so that the SUM
  /// allreduce of the gradients gives their mean over the global batch (DLE / torch DDP).
  float loss_grad_scale = 1.f;
  /// Data parallelism: the gradient buckets to allreduce during backward (null: one process).
  /// TrainStep feeds it from the model's grad-ready hook and waits for it before the optimiser.
  GradBucketer* bucketer = nullptr;
};

class TrainStep {
 public:
  /// Allocates the step state and the loss buffers on the backend. `optimizer` updates `model`
  /// at the end of every step; both must outlive the TrainStep.
  TrainStep(Backend& backend, ResNet& model, InputStage& input, SgdOptimizer& optimizer,
            const StepOptions& opt);
  ~TrainStep();

  /// Queues one step on the images and labels uploaded into input slot `slot`, with learning
  /// rate lr and (StepOptions::mixup) mixup weight mixup_lambda in [0, 1]. Returns without
  /// waiting for the device. lr and lam go into the next row of the step-input ring (pinned
  /// host memory), which the step's first op reads on the device (Backend::load_step_inputs):
  /// no copy per step. Every kRingRows steps without a synchronisation, run() waits for the
  /// device (Backend::synchronize) before it rewrites a row a queued step may still read.
  void run(int slot, double lr, double mixup_lambda = 1.0);
  /// Rows of the step-input ring: the most steps run() keeps queued (the data loader's upload
  /// waits bound that to about 3 in training; the synthetic benchmark has no such wait).
  static constexpr int64_t kRingRows = 256;
  /// f32 {1} on the device: the (unscaled) mean loss of the last step.
  const Tensor& loss() const { return loss_; }
  /// f32 (N, classes) on the device: the logits of the last step (f32 even under AMP).
  const Tensor& logits() const;
  /// The device step state (f32, StepState::size).
  Tensor& state() { return state_; }
  /// Host copy of the step state (synchronises the backend).
  Tensor read_state();
  /// Sets the loss scale state (resume: the scale and skip count from a checkpoint).
  void set_loss_scale(float scale, float skipped_steps);
  /// Steps replayed from a recorded graph so far (0 on CPU backends).
  int64_t replayed_steps() const { return replayed_; }
  /// Seconds the host spent blocked on gradient allreduces after backward, summed over the
  /// eagerly run steps (MPI; the communication not hidden under backward). 0 for NCCL.
  double comm_wait_seconds() const { return comm_wait_s_; }

 private:
  void queue_step(int slot);

  Backend& be_;
  ResNet& model_;
  InputStage& input_;
  SgdOptimizer& optimizer_;
  StepOptions opt_;
  Tensor state_, loss_, probs_, dlogits_;
  /// f32 (kRingRows, 2) {lr, mixup lambda} per step, host memory from alloc_host.
  Tensor ring_;
  int64_t ring_pos_ = 0;       ///< the row the next run() writes (the device's ring_pos too)
  int64_t since_sync_ = 0;     ///< steps queued since run() last waited for the device
  std::map<int, int> eager_runs_;                  ///< slot -> eager steps run
  /// A recorded step and what it was recorded against: replayed only while the model's
  /// activation buffers and the input buffers are the same.
  struct Recorded {
    std::unique_ptr<Graph> graph;
    int64_t plan_generation = 0;
    const void* images = nullptr;
    const void* x = nullptr;
  };
  std::map<int, Recorded> graphs_;                 ///< slot -> recorded step
  bool can_record_ = true;
  int64_t replayed_ = 0;
  double comm_wait_s_ = 0;
};

}  // namespace rn50
