// rn50: moves host Batches onto the backend and normalises them into the model's input.
//   images u8 (N,3,H,W) NHWC host -> u8 on the device (Backend::upload_input: a side stream on
//   CUDA, overlapping the running step) -> normalize_u8 with the mean/std given (ImageNet's by default) -> the compute
//   dtype (N,3,H,W) in the model's layout; labels i32 (N) -> device.
// Device buffers come in `slots` (2: double buffering): batch k+1 is uploaded into the other
// slot while step k still reads its own; release(slot) marks the end of the work reading a slot.
#pragma once

#include <vector>

#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/tensor.h"

namespace rn50 {

class InputStage {
 public:
  /// num_classes: labels outside [0, num_classes) are rejected on the host (a GPU loss kernel
  /// cannot report them). dtype: the model's compute dtype (f32, f16, bf16).
  /// norm: the mean/std normalize() applies (ImageNet's by default).
  /// reversed_labels: also upload each batch's labels in reversed order (reversed_labels(s)):
  /// the labels of the samples mixup mixes each sample with (Backend::mixup_images).
  /// channels: of the model input x(), 3 or 4 (a zero fourth channel, --image-shape 4,H,W).
  InputStage(Backend& backend, Layout layout, DType dtype, int num_classes, int slots = 2,
             Normalization norm = {}, bool reversed_labels = false, int channels = 3);
  /// Lets the backend free what it keeps per upload buffer (Backend::forget_input).
  ~InputStage();
  InputStage(const InputStage&) = delete;
  InputStage& operator=(const InputStage&) = delete;
  /// Validates b (throws rn50::Error naming the bad shape or label) and queues the upload of
  /// its images and labels into the next slot; returns that slot. Device buffers are
  /// reallocated only when the batch shape changes (all slots at once).
  int upload(const Batch& b);
  /// Queues normalize_u8 of slot s's images into x().
  void normalize(int s);
  /// Queues Backend::mixup_images on x() (after normalize): every sample mixed with the
  /// batch's sample in reversed order, weight state[StepState::mixup_lambda] (a step state).
  void mixup(const Tensor& state);
  /// The work queued so far is the last to read slot s (see Backend::release_input).
  void release(int s);
  /// upload + normalize + release, for evaluation and prediction.
  void load(const Batch& b);

  const Tensor& images(int s) const { return slots_[s].u8; }      ///< u8 (N,3,H,W) NHWC
  const Tensor& labels(int s) const { return slots_[s].labels; }  ///< i32 (N) on the device
  const Tensor& labels() const { return slots_[last_].labels; }   ///< of the last upload
  /// i32 (N) on the device: labels(s) in reversed order, row n = label of sample N-1-n (only
  /// with reversed_labels at construction; undefined otherwise), the pairing of
  /// Backend::mixup_images over the whole buffer (training batches are always full).
  const Tensor& reversed_labels(int s) const { return slots_[s].reversed; }
  /// compute dtype (N,channels,H,W), layout of the model
  const Tensor& x() const { return x_; }
  int num_slots() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    Tensor u8, labels, reversed;
  };
  Backend& backend_;
  Layout layout_;
  DType dtype_;
  int num_classes_;
  Normalization norm_;
  bool reversed_labels_ = false;
  int channels_ = 3;
  std::vector<Slot> slots_;
  int next_ = 0, last_ = 0;
  Tensor x_;
};

}  // namespace rn50
