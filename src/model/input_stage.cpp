#include "model/input_stage.h"

#include "core/check.h"

namespace rn50 {

InputStage::InputStage(Backend& backend, Layout layout, DType dtype, int num_classes, int slots,
                       Normalization norm, bool reversed_labels, int channels)
    : backend_(backend),
      layout_(layout),
      dtype_(dtype),
      num_classes_(num_classes),
      norm_(norm),
      reversed_labels_(reversed_labels),
      channels_(channels) {
  RN50_CHECK(channels == 3 || channels == 4, "InputStage: channels must be 3 or 4, got {}",
             channels);
  RN50_CHECK(slots >= 1, "InputStage: slots must be >= 1, got {}", slots);
  slots_.resize(static_cast<size_t>(slots));
}

InputStage::~InputStage() {
  try {
    for (Slot& s : slots_) {
      if (s.u8.defined()) backend_.forget_input(s.u8);
      if (s.labels.defined()) backend_.forget_input(s.labels);
      if (s.reversed.defined()) backend_.forget_input(s.reversed);
    }
  } catch (...) {
    // Never throw from a destructor; the backend frees everything at its own end.
  }
}

int InputStage::upload(const Batch& b) {
  RN50_CHECK(b.images.ndim() == 4 && b.images.dtype() == DType::u8 &&
                 b.images.layout() == Layout::NHWC && b.images.c() == 3,
             "batch images must be u8 (N,3,H,W) NHWC, got {}", b.images.str());
  RN50_CHECK(b.labels.ndim() == 1 && b.labels.dim(0) == b.images.n() &&
                 b.labels.dtype() == DType::i32,
             "batch labels must be i32 ({}), got {}", b.images.n(), b.labels.str());
  const int32_t* lab = b.labels.data_as<const int32_t>();
  for (int64_t i = 0; i < b.size; ++i)
    RN50_CHECK(lab[i] >= 0 && lab[i] < num_classes_,
               "label {} of sample {} in the batch is outside [0, {}) (--num-of-class)", lab[i],
               i, num_classes_);
  // Rows past b.size (a short last eval batch) are never scored; give them a valid label.
  if (b.size < b.labels.dim(0)) {
    int32_t* l = b.labels.data_as<int32_t>();
    for (int64_t i = b.size; i < b.labels.dim(0); ++i) l[i] = 0;
  }
  const std::vector<int64_t> xshape{b.images.n(), channels_, b.images.h(), b.images.w()};
  if (!x_.defined() || x_.shape() != xshape) {
    x_ = Tensor();
    for (Slot& s : slots_) {
      if (s.u8.defined()) backend_.forget_input(s.u8);
      if (s.labels.defined()) backend_.forget_input(s.labels);
      if (s.reversed.defined()) backend_.forget_input(s.reversed);
      s.u8 = backend_.alloc(b.images.shape(), DType::u8, Layout::NHWC);
      s.labels = backend_.alloc({b.images.n()}, DType::i32);
      if (reversed_labels_) s.reversed = backend_.alloc({b.images.n()}, DType::i32);
    }
    x_ = backend_.alloc(xshape, dtype_, layout_);
  }
  const int s = next_;
  next_ = (next_ + 1) % num_slots();
  backend_.upload_input(b.images, slots_[s].u8);
  backend_.upload_input(b.labels, slots_[s].labels);
  if (reversed_labels_) {
    // upload_input copies (or stages) the source before it returns: a temporary is enough.
    Tensor rev = Tensor::empty({b.labels.dim(0)}, DType::i32);
    int32_t* r = rev.data_as<int32_t>();
    const int32_t* l = b.labels.data_as<const int32_t>();
    const int64_t n = b.labels.dim(0);
    for (int64_t i = 0; i < n; ++i) r[i] = l[n - 1 - i];
    backend_.upload_input(rev, slots_[s].reversed);
  }
  last_ = s;
  return s;
}

void InputStage::normalize(int s) {
  backend_.normalize_u8(slots_[s].u8, norm_.mean, norm_.std, x_);
}

void InputStage::mixup(const Tensor& state) { backend_.mixup_images(x_, state); }

void InputStage::release(int s) {
  backend_.release_input(slots_[s].u8);
  backend_.release_input(slots_[s].labels);
  if (slots_[s].reversed.defined()) backend_.release_input(slots_[s].reversed);
}

void InputStage::load(const Batch& b) {
  const int s = upload(b);
  normalize(s);
  release(s);
}

}  // namespace rn50
