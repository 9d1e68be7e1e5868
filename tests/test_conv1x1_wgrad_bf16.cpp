// The bf16 weight gradient of 1x1 NHWC convolutions by our own AVX-512 BF16 GEMM
// (src/backend/cpu/conv1x1_wgrad_bf16.cpp) against a float64 reference on random data: shapes
// with rows and columns that do and do not fill the 6 x 64 register tile, an odd pixel count (a
// pair padded with zero), several pixel chunks, stride 2, and 1 and 2 threads giving the same
// bits; and, through the oneDNN backend's conv2d_bwd_weights (which takes it for these
// convolutions on CPUs with AVX-512 BF16 and no AMX), the answer oneDNN's direct kernel gives.
// Skips where the build has no such kernel (a CPU without AVX-512 BF16, or with AMX).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/conv1x1_wgrad_bf16.h"
#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/tensor.h"

namespace rn50::test {
namespace {

using onednn::Conv1x1Geo;

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& e : v) e = float_to_bf16(d(rng));
  return v;
}

/// dw[k][c] = sum_p dy[p][k] * x[in(p)][c] in float64, and sum_p |dy| |x| (the error scale).
void reference(const Conv1x1Geo& g, const std::vector<uint16_t>& x,
               const std::vector<uint16_t>& dy, std::vector<double>& dw,
               std::vector<double>& mag) {
  const int64_t OH = g.OH(), OW = g.OW();
  dw.assign(static_cast<size_t>(g.K * g.C), 0.0);
  mag.assign(dw.size(), 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t p = (n * OH + oh) * OW + ow;
        const int64_t i = (n * g.H + oh * g.stride) * g.W + ow * g.stride;
        for (int64_t k = 0; k < g.K; ++k) {
          const double a = bf16_to_float(dy[static_cast<size_t>(p * g.K + k)]);
          for (int64_t c = 0; c < g.C; ++c) {
            const double b = bf16_to_float(x[static_cast<size_t>(i * g.C + c)]);
            dw[static_cast<size_t>(k * g.C + c)] += a * b;
            mag[static_cast<size_t>(k * g.C + c)] += std::fabs(a * b);
          }
        }
      }
}

std::vector<uint16_t> run_kernel(const Conv1x1Geo& g, const std::vector<uint16_t>& x,
                                 const std::vector<uint16_t>& dy) {
  std::vector<uint16_t> dw(static_cast<size_t>(g.K * g.C), 0xffff);
  std::vector<float> work(static_cast<size_t>(onednn::conv1x1_wgrad_bf16_workspace(g)));
  onednn::conv1x1_wgrad_bf16(g, x.data(), dy.data(), dw.data(), work.data());
  return dw;
}

class Conv1x1WgradBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn::conv1x1_wgrad_bf16_built())
      GTEST_SKIP() << "this build has no AVX-512 BF16 1x1 weight-gradient kernel (CPU without "
                      "AVX-512 BF16, or with AMX)";
  }
};

TEST_F(Conv1x1WgradBf16, MatchesFloat64ReferenceOnAssortedShapes) {
  // {N, H, W, C, K, stride}: K 6, 64 (a 4-row remainder), 13; C one panel and three; an odd
  // pixel count (3 x 5 x 7 = 105); 2 x 20 x 20 = 800 pixels: four chunks, the last short.
  const Conv1x1Geo shapes[] = {{2, 4, 4, 64, 6, 1},  {1, 3, 5, 64, 13, 1}, {3, 5, 7, 192, 64, 1},
                               {2, 20, 20, 128, 64, 1}, {2, 9, 9, 64, 20, 2}, {1, 8, 8, 256, 7, 2}};
  uint32_t seed = 7;
  for (const Conv1x1Geo& g : shapes) {
    SCOPED_TRACE(::testing::Message() << "N" << g.N << " H" << g.H << " W" << g.W << " C" << g.C
                                      << " K" << g.K << " stride " << g.stride);
    const auto x = random_bf16(g.N * g.H * g.W * g.C, seed++);
    const auto dy = random_bf16(g.N * g.OH() * g.OW() * g.K, seed++);
    std::vector<double> ref, mag;
    reference(g, x, dy, ref, mag);
    const auto dw = run_kernel(g, x, dy);
    int64_t bad = 0;
    for (size_t i = 0; i < dw.size(); ++i) {
      // One bf16 rounding of the result (2^-8 relative) plus f32 summation (tiny here).
      const double tol = std::fabs(ref[i]) * (1.0 / 256) + mag[i] * 1e-5 + 1e-6;
      if (std::fabs(bf16_to_float(dw[i]) - ref[i]) > tol && bad++ < 5)
        ADD_FAILURE() << "dw[" << i << "] = " << bf16_to_float(dw[i]) << ", reference " << ref[i];
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST_F(Conv1x1WgradBf16, OneThreadAndTwoGiveTheSameBits) {
  // Column panels split between two threads (C = 128), then rows (C = 64, K = 70).
  for (const Conv1x1Geo g : {Conv1x1Geo{2, 10, 10, 128, 40, 1}, Conv1x1Geo{2, 10, 10, 64, 70, 1}}) {
    const auto x = random_bf16(g.N * g.H * g.W * g.C, 11);
    const auto dy = random_bf16(g.N * g.OH() * g.OW() * g.K, 12);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one = run_kernel(g, x, dy);
    omp_set_num_threads(2);
    const auto two = run_kernel(g, x, dy);
    omp_set_num_threads(saved);
    EXPECT_EQ(one, two) << "C " << g.C << " K " << g.K;
  }
}

TEST_F(Conv1x1WgradBf16, TheBackendTakesItAt7x7AndAgreesWithOnednn) {
  onednn::set_conv_algo(onednn::ConvAlgo::automatic);
  const bool taken = onednn::conv1x1_own_wgrad_allowed(DType::bf16, 49);
  onednn::set_conv_algo(std::nullopt);
  ASSERT_TRUE(taken) << "the policy should send 7x7-output bf16 1x1 weight gradients to the "
                        "kernel on a CPU whose build has it";
  std::unique_ptr<Backend> be = make_backend("onednn");
  // ResNet-50's layer4 shapes at batch 2: 512 -> 256 at 7x7, and 256 -> 128 stride 2 from 14x14.
  for (const Conv1x1Geo g :
       {Conv1x1Geo{2, 7, 7, 512, 256, 1}, Conv1x1Geo{2, 14, 14, 256, 128, 2}}) {
    auto tensor = [&](std::vector<int64_t> shape, uint32_t seed) {
      Tensor t = Tensor::empty(std::move(shape), DType::bf16, Layout::NHWC);
      const auto v = random_bf16(t.numel(), seed);
      std::copy(v.begin(), v.end(), t.data_as<uint16_t>());
      return t;
    };
    const Tensor x = tensor({g.N, g.C, g.H, g.W}, 21), dy = tensor({g.N, g.K, g.OH(), g.OW()}, 22);
    Tensor own = Tensor::empty({g.K, g.C, 1, 1}, DType::bf16);
    Tensor ref = Tensor::empty({g.K, g.C, 1, 1}, DType::bf16);
    const Conv2dParams p{static_cast<int>(g.stride), 0};
    onednn::set_conv_algo(onednn::ConvAlgo::direct);
    be->conv2d_bwd_weights(p, x, dy, ref);
    onednn::set_conv_algo(onednn::ConvAlgo::automatic);
    be->conv2d_bwd_weights(p, x, dy, own);
    onednn::set_conv_algo(std::nullopt);
    int64_t bad = 0;
    for (int64_t i = 0; i < own.numel(); ++i) {
      const float a = bf16_to_float(own.data_as<uint16_t>()[i]);
      const float b = bf16_to_float(ref.data_as<uint16_t>()[i]);
      // Both round an f32 sum of the same products once to bf16; the sums' order differs.
      if (std::fabs(a - b) > std::fabs(b) * (1.0f / 64) + 0.05f && bad++ < 5)
        ADD_FAILURE() << "dw[" << i << "] own " << a << ", oneDNN " << b;
    }
    EXPECT_EQ(bad, 0) << "C " << g.C << " K " << g.K << " stride " << g.stride;
  }
}

TEST_F(Conv1x1WgradBf16, RejectsChannelCountsOffThePanel) {
  EXPECT_FALSE(onednn::conv1x1_wgrad_bf16_fits(Conv1x1Geo{1, 4, 4, 48, 8, 1}));
  const Conv1x1Geo g{1, 4, 4, 96, 8, 1};
  std::vector<uint16_t> x(16 * 96), dy(16 * 8), dw(8 * 96);
  std::vector<float> work(8 * 96);
  EXPECT_THROW(onednn::conv1x1_wgrad_bf16(g, x.data(), dy.data(), dw.data(), work.data()),
               rn50::Error);
}

}  // namespace
}  // namespace rn50::test
