#include "train/input.h"

#include "core/check.h"

namespace rn50 {

void InputStage::load(const Batch& b) {
  RN50_CHECK(b.images.ndim() == 4 && b.images.dtype() == DType::u8 &&
                 b.images.layout() == Layout::NHWC && b.images.c() == 3,
             "batch images must be u8 (N,3,H,W) NHWC, got {}", b.images.str());
  RN50_CHECK(b.labels.ndim() == 1 && b.labels.dim(0) == b.images.n() &&
                 b.labels.dtype() == DType::i32,
             "batch labels must be i32 ({}), got {}", b.images.n(), b.labels.str());
  if (!u8_.defined() || u8_.shape() != b.images.shape()) {
    u8_ = backend_.alloc(b.images.shape(), DType::u8, Layout::NHWC);
    x_ = backend_.alloc(b.images.shape(), DType::f32, layout_);
    labels_ = backend_.alloc({b.images.n()}, DType::i32);
  }
  backend_.copy(b.images, u8_);
  backend_.copy(b.labels, labels_);
  backend_.normalize_u8(u8_, kImageNetMean, kImageNetStd, x_);
}

}  // namespace rn50
