// Helpers of the training-step tests: a one-block-per-stage bottleneck ResNet, random batches,
// and a backend tensor's values on the host.
#pragma once

#include <cstdint>
#include <string>
#include <random>
#include <vector>

#include "rn50/backend.h"
#include "rn50/data.h"
#include "core/safetensors.h"
#include "rn50/graph.h"
#include "rn50/model.h"
#include "rn50/tensor.h"

namespace rn50 {

/// A bottleneck ResNet with one block per stage: every kind of step, at a fraction of the cost.
inline const ArchSpec kNet{"bottleneck1111", true, {1, 1, 1, 1}};

/// "Pretrained" weights for --from-pretrained-params: `arch`'s torchvision initialisation
/// (`classes` outputs, seed) saved at `path` as a torchvision state dict.
inline void save_initial_weights(const std::string& path, const std::string& arch, int classes,
                                 uint64_t seed) {
  auto be = make_backend("onednn");
  ModelOptions mo;
  mo.num_classes = classes;
  ResNet init(*be, arch_from_name(arch), mo);
  init.init(seed);
  save_safetensors(path, init.state_dict());
}

/// A u8 NHWC batch of `n` random (hw x hw) images and labels below `classes`, from `seed`.
inline Batch random_batch(int64_t n, int64_t hw, int classes, uint64_t seed) {
  std::mt19937_64 g(seed);
  Batch b;
  b.images = Tensor::empty({n, 3, hw, hw}, DType::u8, Layout::NHWC);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data_as<uint8_t>()[i] = g() & 0xff;
  b.labels = Tensor::empty({n}, DType::i32);
  for (int64_t i = 0; i < n; ++i)
    b.labels.data_as<int32_t>()[i] = static_cast<int32_t>(g() % static_cast<uint64_t>(classes));
  b.size = n;
  return b;
}

/// The values of backend tensor t (any dtype the reference backend converts) as f64, in logical
/// NCHW order.
inline std::vector<double> host_values(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), t.layout());
  be.copy(t, h);
  Tensor f = Tensor::empty(t.shape(), DType::f64, Layout::NCHW);
  make_backend("ref")->copy(h, f);
  return std::vector<double>(f.data_as<double>(), f.data_as<double>() + f.numel());
}

}  // namespace rn50
