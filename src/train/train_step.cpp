#include "train/train_step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace rn50 {

TrainStep::TrainStep(Backend& backend, ResNet& model, InputStage& input, SgdOptimizer& optimizer,
                     const StepOptions& opt)
    : be_(backend), model_(model), input_(input), optimizer_(optimizer), opt_(opt) {
  state_ = be_.alloc({StepState::size}, DType::f32);
  loss_ = be_.alloc({1}, DType::f32);
  ring_ = be_.alloc_host({kRingRows, 2}, DType::f32);
  std::fill_n(ring_.data_as<float>(), 2 * kRingRows, 0.f);
  set_loss_scale(opt_.loss_scaling ? opt_.initial_loss_scale : 1.f, 0.f);
  // CPU AMP bf16 (no loss scaling: nothing checks the f32 gradients): SGD reads the conv/fc
  // gradients in the bf16 slab backward wrote, unconverted (Backend::sgd_takes_bf16_grads).
  const Tensor& lp = model_.compute_grad_slab();
  if (!opt_.loss_scaling && lp.defined() && lp.dtype() == DType::bf16 &&
      be_.sgd_takes_bf16_grads())
    model_.set_grads_in_compute_slab(true);
  if (opt_.bucketer) {
    // Parameter index -> its position in the ready order (the bucketer's numbering).
    std::vector<int> pos(model_.params().size(), -1);
    const std::vector<int>& order = model_.grad_ready_order();
    for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = static_cast<int>(k);
    GradBucketer* b = opt_.bucketer;
    model_.set_grad_ready_hook([b, pos](int i) { b->ready(pos[i]); });
  }
}

TrainStep::~TrainStep() {
  model_.set_grads_in_compute_slab(false);
  if (opt_.bucketer) model_.set_grad_ready_hook({});
}

void TrainStep::set_loss_scale(float scale, float skipped_steps) {
  RN50_CHECK(scale > 0.f && std::isfinite(scale), "loss scale must be a positive number, got {}",
             scale);
  Tensor h = Tensor::zeros({StepState::size}, DType::f32);
  float* s = h.data_as<float>();
  s[StepState::loss_scale] = scale;
  s[StepState::inv_loss_scale] = 1.f / scale;
  s[StepState::skipped_steps] = skipped_steps;
  s[StepState::ring_pos] = 0.f;
  be_.copy(h, state_);
  be_.synchronize();
  ring_pos_ = 0;
  since_sync_ = 0;
}

Tensor TrainStep::read_state() {
  Tensor h = Tensor::empty({StepState::size}, DType::f32);
  be_.copy(state_, h);
  be_.synchronize();
  return h;
}

const Tensor& TrainStep::logits() const {
  // The model keeps its forward output until the next forward (backward does not touch it).
  return model_.forward_output();
}

void TrainStep::queue_step(int slot) {
  be_.load_step_inputs(ring_, state_);
  input_.normalize(slot);
  if (opt_.mixup) {
    RN50_CHECK(input_.reversed_labels(slot).defined(),
               "TrainStep: mixup needs an InputStage constructed with reversed labels");
    input_.mixup(state_);
  }
  const Tensor& logits = model_.forward(input_.x(), /*train=*/true);
  if (!probs_.defined() || probs_.shape() != logits.shape()) {
    probs_ = be_.alloc(logits.shape(), DType::f32);
    dlogits_ = be_.alloc(logits.shape(), DType::f32);
  }
  const Tensor& labels = input_.labels(slot);
  if (opt_.mixup) {
    const Tensor& partner = input_.reversed_labels(slot);
    be_.softmax_xent_mixup_fwd(logits, labels, partner, opt_.label_smoothing, state_, loss_,
                               probs_);
    be_.softmax_xent_mixup_bwd(probs_, labels, partner, opt_.label_smoothing,
                               opt_.loss_grad_scale, dlogits_, state_);
  } else {
    be_.softmax_xent_fwd(logits, labels, opt_.label_smoothing, loss_, probs_);
    be_.softmax_xent_bwd(probs_, labels, opt_.label_smoothing, opt_.loss_grad_scale, dlogits_,
                         state_);
  }
  model_.backward(dlogits_);
  if (opt_.bucketer) {
    opt_.bucketer->finish();  // summed (= averaged) gradients in the slab
    comm_wait_s_ += opt_.bucketer->last_wait_seconds();
  }
  if (opt_.loss_scaling) {
    be_.check_finite(model_.grad_slab(), state_);
    // Pure fp16: the conv/fc gradients stay in the f16 slab (its other entries stay zero).
    if (!model_.half_ranges().empty()) be_.check_finite(model_.compute_grad_slab(), state_);
  }
  optimizer_.step(state_);  // also writes the AMP compute copy
  if (opt_.loss_scaling) be_.update_loss_scale(opt_.scale, state_);
}

void TrainStep::run(int slot, double lr, double mixup_lambda) {
  // The only per-step host inputs, the lr and mixup's lam, go into the ring row this step's
  // load_step_inputs reads. The row was last read kRingRows steps ago: wait for the device
  // before rewriting it unless run() waited since.
  if (opt_.mixup)
    RN50_CHECK(mixup_lambda >= 0.0 && mixup_lambda <= 1.0,
               "TrainStep: the mixup weight {} is outside [0, 1]", mixup_lambda);
  if (since_sync_ == kRingRows) {
    be_.synchronize();
    since_sync_ = 0;
  }
  float* row = ring_.data_as<float>() + 2 * ring_pos_;
  row[0] = static_cast<float>(lr);
  row[1] = opt_.mixup ? static_cast<float>(mixup_lambda) : 1.f;
  ring_pos_ = (ring_pos_ + 1) % kRingRows;
  ++since_sync_;

  auto g = graphs_.find(slot);
  if (g != graphs_.end()) {
    const Recorded& r = g->second;
    if (r.plan_generation == model_.plan_generation() && r.images == input_.images(slot).data() &&
        r.x == input_.x().data()) {
      r.graph->replay();
      model_.add_batches_tracked(1);  // forward() does not run on the host during a replay
      ++replayed_;
      return;
    }
    // The model re-planned (another input shape ran in between, e.g. an eval pass) or the
    // input buffers moved: the recording points at old memory. Drop it; run eagerly once more
    // and record again.
    graphs_.clear();
    eager_runs_.clear();
  }
  // Record after one eager step with this slot: every algorithm, plan and workspace exists.
  if (opt_.use_graphs && can_record_ && eager_runs_[slot] >= 1) {
    const int64_t generation = model_.plan_generation();
    std::unique_ptr<Graph> rec = be_.capture([&] { queue_step(slot); });
    if (rec) {
      RN50_CHECK(model_.plan_generation() == generation,
                 "TrainStep: the model re-planned its buffers while recording a step");
      model_.add_batches_tracked(-1);  // the recording ran forward() without a real step
      rec->replay();
      model_.add_batches_tracked(1);
      ++replayed_;
      graphs_[slot] = Recorded{std::move(rec), generation, input_.images(slot).data(),
                               input_.x().data()};
      return;
    }
    can_record_ = false;  // the backend cannot record (CPU): stay eager
  }
  queue_step(slot);
  ++eager_runs_[slot];
}

}  // namespace rn50
