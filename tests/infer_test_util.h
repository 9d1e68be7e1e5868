// Helpers of the inference tests: a model with random BatchNorm parameters and statistics, its
// folded program, random images, and the message of the rn50::Error a call throws.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>

#include "backend/cpu/conv_algo.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "rn50/tensor.h"

namespace rn50 {

/// The model's state with random BN parameters and running statistics (var in [0.2, 2]), as
/// host tensors; loads them back into the model too.
inline std::map<std::string, Tensor> randomise_bn(ResNet& model, uint64_t seed,
                                                  float residual_gamma = 1.f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f), pos(0.2f, 2.f);
  std::map<std::string, Tensor> sd;
  for (auto& [name, t] : model.state_dict()) {
    auto ends = [&](const char* s) {
      const std::string e(s);
      return name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
    };
    const bool bn = name.find(".bn") != std::string::npos || name.find("bn1") == 0 ||
                    name.find("downsample.1") != std::string::npos;
    if (bn && t.dtype() == DType::f32) {
      float* p = t.data_as<float>();
      // The last BN of a residual branch (bn3 in a bottleneck, bn2 in a basic block) scaled
      // by residual_gamma: small values keep the residual stream in fp16's range, as in a
      // trained network (random BN statistics at 1 let ResNet-50's activations pass 65504).
      const bool last = name.find(".bn3.") != std::string::npos ||
                        (name.find(".bn2.") != std::string::npos && !model.desc().arch.bottleneck);
      const float g = last ? residual_gamma : 1.f;
      for (int64_t i = 0; i < t.numel(); ++i)
        p[i] = ends(".running_var") ? pos(gen)
               : ends(".weight")    ? g * (1.f + 0.5f * u(gen))
                                    : 0.5f * u(gen);
    }
    sd.emplace(name, t);
  }
  model.load_state_dict(sd);
  return sd;
}

/// For its lifetime, INT8 CPU engines built run their float ops (stem, max pool, fc) in bf16
/// or f32 as asked (onednn::set_infer_int8_float_ops_bf16); the CPU decides again afterwards.
struct Int8FloatOps {
  explicit Int8FloatOps(bool bf16) { onednn::set_infer_int8_float_ops_bf16(bf16); }
  ~Int8FloatOps() { onednn::set_infer_int8_float_ops_bf16(std::nullopt); }
  Int8FloatOps(const Int8FloatOps&) = delete;
  Int8FloatOps& operator=(const Int8FloatOps&) = delete;
};

/// ||got - want|| / ||want|| over two host f32 tensors of the same size.
inline double rel_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = double(got.data_as<float>()[i]) - want.data_as<float>()[i];
    num += d * d;
    den += double(want.data_as<float>()[i]) * want.data_as<float>()[i];
  }
  return std::sqrt(num / den);
}

/// Host f32 NCHW (n, 3, hw, hw) standard-normal images.
inline Tensor random_images(int64_t n, int64_t hw, uint64_t seed) {
  Tensor x = Tensor::empty({n, 3, hw, hw}, DType::f32);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = nd(gen);
  return x;
}

/// `arch` (`classes` outputs) with Kaiming weights (seed) and random BN parameters and
/// statistics (seed + 1), built on the reference backend: its description and state dict.
inline std::pair<NetworkDesc, std::map<std::string, Tensor>> random_weights(
    const std::string& arch, int classes, uint64_t seed, float residual_gamma = 1.f) {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = classes;
  opt.layout = Layout::NCHW;
  ResNet model(*be, arch_from_name(arch), opt);
  model.init(seed);
  return {model.desc(), randomise_bn(model, seed + 1, residual_gamma)};
}

/// The folded program of random_weights(arch, classes, seed, residual_gamma).
inline InferenceProgram random_program(const std::string& arch, int classes, uint64_t seed,
                                       float residual_gamma = 1.f) {
  const auto [desc, sd] = random_weights(arch, classes, seed, residual_gamma);
  return fold_network(desc, sd);
}

/// The what() of the rn50::Error `fn` throws, or "no error".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace rn50
