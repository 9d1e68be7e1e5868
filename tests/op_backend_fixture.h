// The shared part of THE op test harness, tests/test_ops_{conv_bn, eltwise_pool_linear, loss,
// optimizer, input_memory}.cpp: every backend in available_backends() other than "ref" is run op
// by op, forward and backward, against the reference backend on identical random inputs, for
// shapes typical of ResNet-50 (1x1 convs, 3x3 stride 1 and 2, the 7x7 stride-2 stem with 3 input
// channels, odd spatial sizes and channel counts), in both activation layouts and in each
// compute dtype the backend claims in supports(). A new backend ("onednn", "cuda") is covered
// by adding it to available_backends(); nothing here names a backend except "ref".
//
// Method: inputs are generated on the host in f32, converted to the tested dtype (the values
// the backend sees), moved to the backend with Backend::alloc + Backend::copy, and results
// come back with Backend::copy into host tensors (so device backends work unchanged). The
// reference runs in float64 on exactly the same (rounded) input values. Backend outputs are
// pre-filled with NaN, so unwritten or accumulated-into outputs fail. Backward ops get the same
// forward results (y, save_mean, save_var, probs) as inputs on both sides.
//
// Tolerances: |got - ref| <= atol * max(1, rms(ref)) + rtol * |ref| (test::all_close). For f32:
//   conv2d fwd / bwd_data / bwd_weights   atol 5e-5  rtol 1e-4   (dot products of length up
//                                          to 600; leaves room for blocked/Winograd kernels)
//   linear fwd / bwd                      atol 5e-5  rtol 1e-4   (C up to 2048)
//   batchnorm fwd (y, save_*, running_*)  atol 1e-5  rtol 1e-4
//   batchnorm bwd (dx, dgamma, dbeta)     atol 5e-5  rtol 1e-4   (cancellation in dx)
//   relu, add, add_relu, maxpool fwd,     atol 0     rtol 1.2e-7 (one f32 rounding at most)
//     relu bwd
//   maxpool bwd                           atol 1e-7  rtol 1e-6   (<= 4 summed contributions)
//   global avgpool fwd / bwd              atol 1e-6  rtol 1e-5
//   softmax xent (plain, mixup): loss     atol 1e-6  rtol 1e-5
//                 probs, dlogits          atol 1e-9  rtol 1e-5
//   mixup_images                          atol 5e-7  rtol 1e-6   (f32 products and sum; the
//                                          two terms may cancel)
//   normalize_u8                          atol 1e-6  rtol 1e-6
//   sgd_update (params, momentum)         atol 1e-7  rtol 1e-6
//   copy / zero                           exact
// For f16 / bf16 compute (AMP backends) each tolerance is raised to at least 4e-3 (f16) or
// 3e-2 (bf16) in both atol and rtol: outputs are rounded to 11 / 8 significant bits. Tensor
// dtypes under f16/bf16: every activation, weight and gradient of conv, linear, the
// elementwise ops and pooling, and x/y/dy/dx of batchnorm (gamma, beta and statistics stay
// f32); the loss and SGD are f32-only and are skipped for other dtypes.
//
// This header holds what those files share: the tolerances above, the parameters (backend x
// layout x dtype), the parameterised fixture OpsBackend with its random-data and comparison
// helpers, the REQUIRE_OP / REQUIRE_F32 skips, and RN50_INSTANTIATE_OPS_BACKEND(), which each
// file that has TEST_P(OpsBackend, ...) calls once. The generic helpers it builds on (host
// tensors, upload/download, all_close) are in op_harness.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_harness.h"
#include "rn50/backend.h"

namespace rn50::test {

inline constexpr DType F32 = DType::f32;
inline constexpr DType F64 = DType::f64;
inline constexpr Layout NCHW = Layout::NCHW;
inline constexpr Layout NHWC = Layout::NHWC;

// ---------------------------------------------------------------- tolerances (see above)

inline constexpr Tol kConv{5e-5, 1e-4};
inline constexpr Tol kLinear{5e-5, 1e-4};
inline constexpr Tol kBnFwd{1e-5, 1e-4};
inline constexpr Tol kBnBwd{5e-5, 1e-4};
inline constexpr Tol kExact1{0, 1.2e-7};
inline constexpr Tol kMaxPoolBwd{1e-7, 1e-6};
inline constexpr Tol kAvgPool{1e-6, 1e-5};
inline constexpr Tol kLoss{1e-6, 1e-5};
inline constexpr Tol kProbs{1e-9, 1e-5};
inline constexpr Tol kNormalize{1e-6, 1e-6};
inline constexpr Tol kSgd{1e-7, 1e-6};
inline constexpr Tol kMixup{5e-7, 1e-6};
inline constexpr Tol kCopy{0, 0};

inline Tol for_dtype(Tol t, DType dt) {
  const double floor = dt == DType::f16 ? 4e-3 : dt == DType::bf16 ? 3e-2 : 0.0;
  return {std::max(t.atol, floor), std::max(t.rtol, floor)};
}

// ---------------------------------------------------------------- parameters

struct HarnessParam {
  std::string backend;
  Layout layout = NCHW;
  DType dtype = F32;
};

inline std::vector<HarnessParam> harness_params() {
  std::vector<HarnessParam> v;
  for (const std::string& name : available_backends()) {
    if (name == "ref") continue;
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (Layout l : {NCHW, NHWC}) v.push_back({name, l, dt});
  }
  return v;
}

inline std::string param_name(const ::testing::TestParamInfo<HarnessParam>& info) {
  return info.param.backend + "_" + layout_name(info.param.layout) + "_" +
         dtype_name(info.param.dtype);
}

class OpsBackend : public ::testing::TestWithParam<HarnessParam> {
 protected:
  void SetUp() override {
    // Strict f32 tolerances: no TF32 tensor cores (CUDA) for f32 convolutions and GEMMs.
    BackendOptions bo;
    bo.allow_tf32 = false;
    be_ = make_backend(GetParam().backend, bo);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(std::hash<std::string>{}(info->name()));
  }

  Backend& be() { return *be_; }
  Backend& ref() { return test::ref_backend(); }
  DType dt() const { return GetParam().dtype; }
  Layout lay() const { return GetParam().layout; }
  Layout other() const { return lay() == NCHW ? NHWC : NCHW; }
  Tol tol(Tol t) const { return for_dtype(t, dt()); }
  // Conv weight layouts to test: the backend's preferred one first, then the other (every
  // backend accepts both OIHW and KRSC).
  std::vector<Layout> weight_layouts() const {
    const Layout pw = be_->preferred_weight_layout(lay());
    return {pw, pw == NCHW ? NHWC : NCHW};
  }
  std::string cfg() const {
    return GetParam().backend + " " + layout_name(lay()) + " " + dtype_name(dt());
  }

  // Random host f32 tensor (logical values; layout NCHW).
  Tensor rand(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    return test::random_tensor(std::move(shape), rng_, lo, hi, F32, NCHW);
  }
  // Backend tensor holding `host` converted to dtype `d` and layout `l`.
  Tensor up(const Tensor& host, DType d, Layout l) { return test::upload(*be_, host, d, l); }
  // Backend output tensor pre-filled with NaN.
  Tensor out(std::vector<int64_t> shape, DType d, Layout l = NCHW) {
    return test::nan_output(*be_, std::move(shape), d, l);
  }
  // Reference operand: f64 host tensor with the values a backend storing `host` in `d` sees.
  static Tensor rin(const Tensor& host, DType d, Layout l) { return test::ref_input(host, d, l); }
  static Tensor rout(std::vector<int64_t> shape, Layout l = NCHW) {
    return Tensor::empty(std::move(shape), F64, l);
  }
  // Compares a backend tensor with a reference host tensor.
  void check(const std::string& what, const Tensor& dev, const Tensor& want, Tol t) {
    EXPECT_TRUE(all_close(what + " [" + cfg() + ", backend tensor " + dev.str() + "]",
                          test::download(*be_, dev), want, t));
  }
  // Host step state (see StepState) with the given lr and loss scale, nothing found/skipped.
  static Tensor step_state(float lr, float loss_scale) {
    Tensor st = Tensor::zeros({StepState::size}, F32);
    float* s = st.data_as<float>();
    s[StepState::lr] = lr;
    s[StepState::loss_scale] = loss_scale;
    s[StepState::inv_loss_scale] = 1.f / loss_scale;
    return st;
  }
  // Host copy of a backend step state.
  Tensor state_host(const Tensor& dev) {
    Tensor h = Tensor::empty({StepState::size}, F32);
    be_->copy(dev, h);
    be_->synchronize();
    return h;
  }
  // Host f32 copy (NCHW) of a reference result, as input for the next op.
  static Tensor host32(const Tensor& t) { return convert(t, F32, NCHW); }

  std::unique_ptr<Backend> be_;
  std::mt19937_64 rng_;
};

#define REQUIRE_OP(op)                                                                            \
  do {                                                                                            \
    if (!be().supports(op, dt(), lay()))                                                          \
      GTEST_SKIP() << GetParam().backend << " does not support " #op " with " << dtype_name(dt()) \
                   << " " << layout_name(lay()) << " (supports() false)";                         \
  } while (0)

#define REQUIRE_F32(what)                                                \
  do {                                                                   \
    if (dt() != F32) GTEST_SKIP() << what << " is f32-only by contract"; \
  } while (0)

// A convolution case (the convolution tests' table and MixedLayouts).
struct ConvShape {
  const char* name;
  int64_t N, C, H, W, K, R;
  int stride, pad;
  int64_t OH() const { return (H + 2 * pad - R) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - R) / stride + 1; }
};

}  // namespace rn50::test

/// Instantiates every TEST_P(OpsBackend, ...) of the including file over harness_params() (each
/// backend but "ref", x f32/f16/bf16, x NCHW/NHWC), as Backends/OpsBackend.<Test>/<param_name>.
/// Call it once per file, inside the namespace the tests are in.
#define RN50_INSTANTIATE_OPS_BACKEND()                                          \
  INSTANTIATE_TEST_SUITE_P(Backends, OpsBackend,                                \
                           ::testing::ValuesIn(::rn50::test::harness_params()), \
                           ::rn50::test::param_name)
