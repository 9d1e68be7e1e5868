// rn50: moves a host Batch onto the backend and normalises it into the model's input:
// images u8 (N,3,H,W) NHWC host -> u8 on the device (explicit copy) -> normalize_u8 with the
// ImageNet mean/std -> f32 (N,3,H,W) in the model's layout; labels i32 (N) -> device.
#pragma once

#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/tensor.h"

namespace rn50 {

class InputStage {
 public:
  InputStage(Backend& backend, Layout layout) : backend_(backend), layout_(layout) {}
  /// Copies and normalises `b` (all N rows; rows past b.size are whatever the loader left).
  /// Device buffers are reallocated only when the batch shape changes.
  void load(const Batch& b);
  const Tensor& x() const { return x_; }          ///< f32 (N,3,H,W), layout of the model
  const Tensor& labels() const { return labels_; }  ///< i32 (N) on the device

 private:
  Backend& backend_;
  Layout layout_;
  Tensor u8_, x_, labels_;
};

}  // namespace rn50
