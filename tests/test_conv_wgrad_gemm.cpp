// The weight gradient of NHWC convolutions by our own AVX-512 GEMM
// (src/backend/cpu/conv_wgrad_gemm.cpp), in bf16 and in f32, against a float64 reference on
// random data: 1x1 shapes with rows and columns that do and do not fill the 6 x 64 register
// tile, an odd pixel count (a bf16 pair padded with zero), several pixel chunks, stride 2; 3x3
// shapes with padding at strides 1 and 2, a 2x2 kernel without padding, 1x3 and 3x1 kernels,
// each on 1 and 2 threads; larger ones with the output pixels split between 2 and 3 threads;
// 1 and 2 threads giving the same bits where dW's rows or columns are split; OHWI and OIHW
// holding the same bits; and, through the oneDNN backend's conv2d_bwd_weights (which takes it
// for some of these convolutions on CPUs with AVX-512 and no AMX), the answer oneDNN's direct
// kernel gives. Skips where the build has no such kernel (bf16: a CPU without AVX-512 BF16,
// or with AMX; f32: a CPU without AVX-512).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/conv_rules.h"
#include "backend/cpu/conv_wgrad_gemm.h"
#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/tensor.h"

namespace rn50::test {
namespace {

using onednn::WgradGeo;

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& e : v) e = float_to_bf16(d(rng));
  return v;
}

std::vector<float> random_f32(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

std::vector<double> widen(const std::vector<uint16_t>& v) {
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_float(v[i]);
  return o;
}
std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// dw[k][c][r][s] = sum_p dy[p][k] * x[in(p, r, s)][c] in float64 (x zero in the padding), and
/// sum_p |dy| |x| (the error scale); both OIHW.
void reference(const WgradGeo& g, const std::vector<double>& x, const std::vector<double>& dy,
               std::vector<double>& dw, std::vector<double>& mag) {
  const int64_t OH = g.OH(), OW = g.OW(), RS = g.R * g.S;
  dw.assign(static_cast<size_t>(g.K * g.C * RS), 0.0);
  mag.assign(dw.size(), 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t r = 0; r < g.R; ++r)
          for (int64_t q = 0; q < g.S; ++q) {
            const int64_t ih = oh * g.stride - g.pad + r, iw = ow * g.stride - g.pad + q;
            if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
            const int64_t p = (n * OH + oh) * OW + ow, i = (n * g.H + ih) * g.W + iw;
            for (int64_t k = 0; k < g.K; ++k) {
              const double a = dy[static_cast<size_t>(p * g.K + k)];
              for (int64_t c = 0; c < g.C; ++c) {
                const double b = x[static_cast<size_t>(i * g.C + c)];
                const auto o = static_cast<size_t>((k * g.C + c) * RS + r * g.S + q);
                dw[o] += a * b;
                mag[o] += std::fabs(a * b);
              }
            }
          }
}

/// f() on `threads` OpenMP threads, the previous count restored after.
template <class F>
auto on_threads(int threads, F f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto r = f();
  omp_set_num_threads(saved);
  return r;
}

/// For each shape (none of which `splits` the pixels on 2 threads): run(g, x, dy) on 1 and on
/// 2 threads gives the same bits; x and dy from random(n, seed).
template <class Random, class Run>
void expect_same_bits_on_1_and_2_threads(std::initializer_list<WgradGeo> shapes,
                                         bool (*splits)(const WgradGeo&, int), Random random,
                                         Run run) {
  for (const WgradGeo& g : shapes) {
    ASSERT_FALSE(splits(g, 2));
    const auto x = random(g.N * g.H * g.W * g.C, 11);
    const auto dy = random(g.N * g.OH() * g.OW() * g.K, 12);
    const auto one = on_threads(1, [&] { return run(g, x, dy); });
    const auto two = on_threads(2, [&] { return run(g, x, dy); });
    EXPECT_EQ(one, two) << "C " << g.C << " K " << g.K << " " << g.R << "x" << g.S;
  }
}

std::vector<uint16_t> run_kernel(const WgradGeo& g, const std::vector<uint16_t>& x,
                                 const std::vector<uint16_t>& dy) {
  std::vector<uint16_t> dw(static_cast<size_t>(g.K * g.cols()), 0xffff);
  std::vector<float> work(static_cast<size_t>(onednn::conv_wgrad_bf16_workspace(g)));
  onednn::conv_wgrad_bf16(g, x.data(), dy.data(), dw.data(), work.data());
  return dw;
}

/// The oneDNN backend's conv2d_bwd_weights under policy `automatic` (our kernel where
/// conv_own_wgrad_allowed takes the shape) against policy `direct` (oneDNN's kernel) on random
/// NHWC tensors of `dt` (f32 or bf16), weights in OIHW and in KRSC (OHWI) order alike; each
/// element judged by close(own, onednn) (as floats). Fails if the policy does not take one of
/// `shapes` on this CPU.
template <class Close>
void expect_backend_agrees_with_onednn(DType dt, const std::vector<WgradGeo>& shapes,
                                       Close close) {
  std::unique_ptr<Backend> be = make_backend("onednn");
  auto tensor = [&](std::vector<int64_t> shape, uint32_t seed) {
    Tensor t = Tensor::empty(std::move(shape), dt, Layout::NHWC);
    if (dt == DType::bf16) {
      const auto v = random_bf16(t.numel(), seed);
      std::copy(v.begin(), v.end(), t.data_as<uint16_t>());
    } else {
      const auto v = random_f32(t.numel(), seed);
      std::copy(v.begin(), v.end(), t.data_as<float>());
    }
    return t;
  };
  auto at = [&](const Tensor& t, int64_t i) {
    return dt == DType::bf16 ? bf16_to_float(t.data_as<uint16_t>()[i]) : t.data_as<float>()[i];
  };
  onednn::set_conv_algo(onednn::ConvAlgo::automatic);
  for (const WgradGeo& g : shapes)
    ASSERT_TRUE(onednn::conv_own_wgrad_allowed(dt, {g.C, g.K, g.R, g.stride, g.OH() * g.OW()}))
        << "C " << g.C << " K " << g.K << " " << g.R << "x" << g.S << " stride " << g.stride
        << ": the policy leaves it to oneDNN, so the comparison would be oneDNN against itself";
  onednn::set_conv_algo(std::nullopt);
  for (const Layout wl : {Layout::NCHW, Layout::NHWC}) {
    for (const WgradGeo& g : shapes) {
      const Tensor x = tensor({g.N, g.C, g.H, g.W}, 21);
      const Tensor dy = tensor({g.N, g.K, g.OH(), g.OW()}, 22);
      Tensor own = Tensor::empty({g.K, g.C, g.R, g.S}, dt, wl);
      Tensor ref = Tensor::empty({g.K, g.C, g.R, g.S}, dt, wl);
      const Conv2dParams p{static_cast<int>(g.stride), static_cast<int>(g.pad)};
      onednn::set_conv_algo(onednn::ConvAlgo::direct);
      be->conv2d_bwd_weights(p, x, dy, ref);
      onednn::set_conv_algo(onednn::ConvAlgo::automatic);
      be->conv2d_bwd_weights(p, x, dy, own);
      onednn::set_conv_algo(std::nullopt);
      int64_t bad = 0;
      for (int64_t i = 0; i < own.numel(); ++i) {
        const float a = at(own, i), b = at(ref, i);
        if (!close(a, b) && bad++ < 5)
          ADD_FAILURE() << "dw[" << i << "] own " << a << ", oneDNN " << b;
      }
      EXPECT_EQ(bad, 0) << "C " << g.C << " K " << g.K << " " << g.R << "x" << g.S << " stride "
                        << g.stride << (wl == Layout::NHWC ? " OHWI" : " OIHW");
    }
  }
}

class ConvWgradBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn::conv_wgrad_bf16_built())
      GTEST_SKIP() << "this build has no AVX-512 BF16 weight-gradient kernel (CPU without "
                      "AVX-512 BF16, or with AMX)";
  }
};

/// Checks the kernel on `threads` OpenMP threads against the float64 reference.
void expect_matches_reference(const WgradGeo& g, int threads, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "N" << g.N << " H" << g.H << " W" << g.W << " C" << g.C
                                    << " K" << g.K << " " << g.R << "x" << g.S << " stride "
                                    << g.stride << " pad " << g.pad << ", " << threads
                                    << " thread(s)");
  const auto x = random_bf16(g.N * g.H * g.W * g.C, seed);
  const auto dy = random_bf16(g.N * g.OH() * g.OW() * g.K, seed + 1);
  std::vector<double> ref, mag;
  reference(g, widen(x), widen(dy), ref, mag);
  const auto dw = on_threads(threads, [&] { return run_kernel(g, x, dy); });
  int64_t bad = 0;
  for (size_t i = 0; i < dw.size(); ++i) {
    // One bf16 rounding of the result (2^-8 relative) plus f32 summation (tiny here).
    const double tol = std::fabs(ref[i]) * (1.0 / 256) + mag[i] * 1e-5 + 1e-6;
    if (std::fabs(bf16_to_float(dw[i]) - ref[i]) > tol && bad++ < 5)
      ADD_FAILURE() << "dw[" << i << "] = " << bf16_to_float(dw[i]) << ", reference " << ref[i];
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(ConvWgradBf16, MatchesFloat64ReferenceOnAssortedShapes) {
  // {N, H, W, C, K, stride, R, S, pad}: 1x1 with K 6, 64 (a 4-row remainder), 13; C one panel
  // and three; an odd pixel count (3 x 5 x 7 = 105); 2 x 20 x 20 = 800 pixels: four chunks, the
  // last short; stride 2. 3x3 with padding 1 at stride 1 (odd pixel count, two chunks) and
  // stride 2 (even input: the bottom and right taps never reach the padding); 2x2 unpadded;
  // kernels that are not square: 1x3 padded, 3x1 at stride 2.
  const WgradGeo shapes[] = {
      {2, 4, 4, 64, 6, 1},        {1, 3, 5, 64, 13, 1},       {3, 5, 7, 192, 64, 1},
      {2, 20, 20, 128, 64, 1},    {2, 9, 9, 64, 20, 2},       {1, 8, 8, 256, 7, 2},
      {3, 7, 7, 64, 10, 1, 3, 3, 1}, {2, 14, 14, 128, 13, 2, 3, 3, 1},
      {1, 6, 5, 64, 8, 1, 2, 2, 0}, {2, 5, 7, 64, 9, 1, 1, 3, 1},   {1, 6, 4, 64, 5, 2, 3, 1, 0}};
  uint32_t seed = 7;
  for (const WgradGeo& g : shapes)
    for (const int threads : {1, 2}) expect_matches_reference(g, threads, seed += 2);
}

TEST_F(ConvWgradBf16, SplitsThePixelsBetweenThreadsAndMatchesTheReference) {
  // Outputs larger than 7x7 with at least two 256-pixel chunks per thread: 1x1 at 24x24 (1152
  // pixels: 5 chunks, the last short; K = 70 not a whole number of 6-row tiles), stride 2 from
  // 28x28 (784 pixels), a 3x3 with padding (800 pixels: its taps in the padding left out per
  // chunk), and 43 x 43 = 1849 pixels, an odd count, on 3 threads: 2, 3 and 3 of the 8 chunks
  // (the last one 57 pixels).
  const WgradGeo two[] = {{2, 24, 24, 64, 70, 1},
                          {4, 28, 28, 128, 20, 2},
                          {2, 20, 20, 64, 16, 1, 3, 3, 1}};
  uint32_t seed = 101;
  for (const WgradGeo& g : two) {
    ASSERT_TRUE(onednn::conv_wgrad_bf16_splits_pixels(g, 2));
    expect_matches_reference(g, 2, seed += 2);
  }
  const WgradGeo odd{1, 43, 43, 64, 12, 1};
  ASSERT_TRUE(onednn::conv_wgrad_bf16_splits_pixels(odd, 3));
  expect_matches_reference(odd, 3, seed += 2);
  // One thread, 7x7 outputs, or fewer than two chunks per thread: dW's rows or columns split.
  EXPECT_FALSE(onednn::conv_wgrad_bf16_splits_pixels(two[0], 1));
  EXPECT_FALSE(onednn::conv_wgrad_bf16_splits_pixels(WgradGeo{32, 7, 7, 512, 2048, 1}, 2));
  EXPECT_FALSE(onednn::conv_wgrad_bf16_splits_pixels(WgradGeo{2, 20, 20, 64, 16, 1}, 3));
}

TEST_F(ConvWgradBf16, WritesOhwiWhenAsked) {
  // The same sums, stored (K, R, S, C) instead of (K, C, R, S): the bits match element by element.
  WgradGeo g{2, 7, 7, 128, 10, 2, 3, 3, 1};
  const auto x = random_bf16(g.N * g.H * g.W * g.C, 31);
  const auto dy = random_bf16(g.N * g.OH() * g.OW() * g.K, 32);
  const auto oihw = run_kernel(g, x, dy);
  g.ohwi = true;
  const auto ohwi = run_kernel(g, x, dy);
  int64_t bad = 0;
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t t = 0; t < g.R * g.S; ++t)
        bad += oihw[static_cast<size_t>((k * g.C + c) * 9 + t)] !=
               ohwi[static_cast<size_t>((k * 9 + t) * g.C + c)];
  EXPECT_EQ(bad, 0);
}

TEST_F(ConvWgradBf16, OneThreadAndTwoGiveTheSameBits) {
  // Column panels split between two threads (C = 128; a 3x3 with C = 64), then rows (C = 64,
  // K = 70); none has the two pixel chunks per thread that a pixel split needs.
  expect_same_bits_on_1_and_2_threads(
      {WgradGeo{2, 10, 10, 128, 40, 1}, WgradGeo{2, 10, 10, 64, 70, 1},
       WgradGeo{2, 10, 10, 64, 40, 2, 3, 3, 1}},
      &onednn::conv_wgrad_bf16_splits_pixels, &random_bf16, &run_kernel);
}

TEST_F(ConvWgradBf16, TheBackendTakesItWhereItIsFasterAndAgreesWithOnednn) {
  onednn::set_conv_algo(onednn::ConvAlgo::automatic);
  const bool taken_1x1 = onednn::conv_own_wgrad_allowed(DType::bf16, {512, 256, 1, 1, 49});
  const bool taken_3x3 = onednn::conv_own_wgrad_allowed(DType::bf16, {512, 512, 3, 2, 49});
  const bool taken_3x3_s1 = onednn::conv_own_wgrad_allowed(DType::bf16, {512, 512, 3, 1, 49});
  const bool taken_14x14 = onednn::conv_own_wgrad_allowed(DType::bf16, {256, 256, 3, 1, 196});
  const bool taken_wide = onednn::conv_own_wgrad_allowed(DType::bf16, {64, 256, 1, 1, 3136});
  const bool taken_strided = onednn::conv_own_wgrad_allowed(DType::bf16, {256, 512, 1, 2, 784});
  const bool taken_narrow = onednn::conv_own_wgrad_allowed(DType::bf16, {256, 64, 1, 1, 3136});
  const bool taken_64 = onednn::conv_own_wgrad_allowed(DType::bf16, {64, 64, 1, 1, 3136});
  const bool taken_s2_14 = onednn::conv_own_wgrad_allowed(DType::bf16, {256, 256, 3, 2, 196});
  const bool taken_s2_28 = onednn::conv_own_wgrad_allowed(DType::bf16, {128, 128, 3, 2, 784});
  onednn::set_conv_algo(onednn::ConvAlgo::direct);
  const bool taken_direct = onednn::conv_own_wgrad_allowed(DType::bf16, {512, 256, 1, 1, 49});
  onednn::set_conv_algo(std::nullopt);
  ASSERT_TRUE(taken_1x1 && taken_3x3 && taken_3x3_s1)
      << "the policy should send 7x7-output bf16 1x1 and 3x3 weight gradients to the kernel on "
         "a CPU whose build has it";
  EXPECT_FALSE(taken_14x14) << "oneDNN's kernel is the faster one for 3x3s at 14x14 outputs";
  EXPECT_TRUE(taken_wide && taken_strided)
      << "the pixel split beats oneDNN for 1x1s that widen fourfold or are strided";
  EXPECT_EQ(taken_narrow, onednn::cpu_class() == onednn::kCpuZen5)
      << "the kernel beats oneDNN for 1x1s that narrow the channels on Zen 5 only";
  EXPECT_FALSE(taken_64) << "oneDNN's kernel is faster for the 64 -> 64 1x1 at 56x56";
  EXPECT_TRUE(taken_s2_14) << "the kernel beats oneDNN for strided 3x3s to 14x14";
  EXPECT_FALSE(taken_s2_28) << "oneDNN's kernel is level or faster for strided 3x3s to 28x28";
  EXPECT_FALSE(taken_direct) << "policy `direct` must keep oneDNN's kernels";
  // ResNet-50's layer4 shapes at batch 2: 512 -> 256 at 7x7, 256 -> 128 stride 2 from 14x14,
  // and the 3x3 512 -> 512 stride 2 from 14x14 (here with 128 channels); a 1x3 kernel
  // (padding 1, stride 2: 7x6 outputs); and layer1's 64 -> 256 at 28x28 instead of 56x56 (1568
  // pixels, split between the threads), and on Zen 5 layer1's narrowing 256 -> 64 there.
  std::vector<WgradGeo> taken = {WgradGeo{2, 7, 7, 512, 256, 1}, WgradGeo{2, 14, 14, 256, 128, 2},
                                 WgradGeo{2, 14, 14, 128, 128, 2, 3, 3, 1},
                                 WgradGeo{2, 12, 12, 64, 32, 2, 1, 3, 1},
                                 WgradGeo{2, 28, 28, 64, 256, 1}};
  if (onednn::cpu_class() == onednn::kCpuZen5)
    taken.push_back(WgradGeo{2, 28, 28, 256, 64, 1});
  expect_backend_agrees_with_onednn(
      DType::bf16, taken,
      [](float a, float b) {
        // Both round an f32 sum of the same products once to bf16; the sums' order differs.
        return std::fabs(a - b) <= std::fabs(b) * (1.0f / 64) + 0.05f;
      });
}

TEST_F(ConvWgradBf16, RejectsChannelCountsOffThePanel) {
  EXPECT_FALSE(onednn::conv_wgrad_bf16_fits(WgradGeo{1, 4, 4, 48, 8, 1}));
  const WgradGeo g{1, 4, 4, 96, 8, 1};
  std::vector<uint16_t> x(16 * 96), dy(16 * 8), dw(8 * 96);
  std::vector<float> work(8 * 96);
  EXPECT_THROW(onednn::conv_wgrad_bf16(g, x.data(), dy.data(), dw.data(), work.data()),
               rn50::Error);
}

// ---- f32 ----

std::vector<float> run_kernel_f32(const WgradGeo& g, const std::vector<float>& x,
                                  const std::vector<float>& dy) {
  std::vector<float> dw(static_cast<size_t>(g.K * g.cols()), std::nanf(""));
  const int64_t ws = onednn::conv_wgrad_f32_workspace(g);
  std::vector<float> work(static_cast<size_t>(ws));
  onednn::conv_wgrad_f32(g, x.data(), dy.data(), dw.data(), ws == 0 ? nullptr : work.data());
  return dw;
}

class ConvWgradF32 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn::conv_wgrad_f32_built())
      GTEST_SKIP() << "this build has no AVX-512 f32 weight-gradient kernel";
  }
};

/// Checks the f32 kernel on `threads` OpenMP threads against the float64 reference.
void expect_f32_matches_reference(const WgradGeo& g, int threads, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "N" << g.N << " H" << g.H << " W" << g.W << " C" << g.C
                                    << " K" << g.K << " " << g.R << "x" << g.S << " stride "
                                    << g.stride << " pad " << g.pad << (g.ohwi ? " OHWI" : "")
                                    << ", " << threads << " thread(s)");
  const auto x = random_f32(g.N * g.H * g.W * g.C, seed);
  const auto dy = random_f32(g.N * g.OH() * g.OW() * g.K, seed + 1);
  std::vector<double> ref, mag;
  reference(g, widen(x), widen(dy), ref, mag);
  const auto dw = on_threads(threads, [&] { return run_kernel_f32(g, x, dy); });
  const int64_t taps = g.R * g.S;
  int64_t bad = 0;
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        const auto i = static_cast<size_t>((k * g.C + c) * taps + t);
        const auto o = g.ohwi ? static_cast<size_t>((k * taps + t) * g.C + c) : i;
        // f32 sums of at most a few thousand products: well inside 1e-5 of their magnitudes.
        const double tol = mag[i] * 1e-5 + 1e-6;
        if (!(std::fabs(dw[o] - ref[i]) <= tol) && bad++ < 5)
          ADD_FAILURE() << "dw[" << k << "][" << c << "][tap " << t << "] = " << dw[o]
                        << ", reference " << ref[i];
      }
  EXPECT_EQ(bad, 0);
}

TEST_F(ConvWgradF32, MatchesFloat64ReferenceOnAssortedShapes) {
  // As the bf16 test's shapes (1x1 and KxK, rows and columns off the tile, strides, padding,
  // kernels that are not square), each in OIHW and OHWI: a 1x1 or OHWI gradient whose pixels
  // are not split is summed straight into dW, the others through the workspace.
  const WgradGeo shapes[] = {
      {2, 4, 4, 64, 6, 1},        {1, 3, 5, 64, 13, 1},       {3, 5, 7, 192, 64, 1},
      {2, 20, 20, 128, 64, 1},    {2, 9, 9, 64, 20, 2},       {1, 8, 8, 256, 7, 2},
      {3, 7, 7, 64, 10, 1, 3, 3, 1}, {2, 14, 14, 128, 13, 2, 3, 3, 1},
      {1, 6, 5, 64, 8, 1, 2, 2, 0}, {2, 5, 7, 64, 9, 1, 1, 3, 1},   {1, 6, 4, 64, 5, 2, 3, 1, 0}};
  uint32_t seed = 501;
  for (WgradGeo g : shapes)
    for (const bool ohwi : {false, true}) {
      g.ohwi = ohwi;
      for (const int threads : {1, 2}) expect_f32_matches_reference(g, threads, seed += 2);
    }
}

TEST_F(ConvWgradF32, SplitsThePixelsBetweenThreadsAndMatchesTheReference) {
  // Outputs larger than 7x7 with at least two 64-pixel chunks per thread: 1x1 at 12x12 (288
  // pixels: 5 chunks, the last short; K = 70 not a whole number of 6-row tiles), stride 2 from
  // 16x16 (4 images of 8x8: exactly two chunks per thread), a 3x3 with padding (288 pixels),
  // and 23 x 23 = 529 pixels on 3 threads (9 chunks, the last 17 pixels).
  const WgradGeo two[] = {{2, 12, 12, 64, 70, 1},
                          {4, 16, 16, 128, 20, 2},
                          {2, 12, 12, 64, 16, 1, 3, 3, 1}};
  uint32_t seed = 601;
  for (const WgradGeo& g : two) {
    ASSERT_TRUE(onednn::conv_wgrad_f32_splits_pixels(g, 2));
    expect_f32_matches_reference(g, 2, seed += 2);
  }
  const WgradGeo odd{1, 23, 23, 64, 12, 1};
  ASSERT_TRUE(onednn::conv_wgrad_f32_splits_pixels(odd, 3));
  expect_f32_matches_reference(odd, 3, seed += 2);
  EXPECT_FALSE(onednn::conv_wgrad_f32_splits_pixels(two[0], 1));
  EXPECT_FALSE(onednn::conv_wgrad_f32_splits_pixels(WgradGeo{32, 7, 7, 512, 2048, 1}, 2));
  // A split gradient needs a partial per thread; an unsplit 1x1 none.
  if (omp_get_max_threads() >= 2) {
    EXPECT_EQ(onednn::conv_wgrad_f32_workspace(two[0]), 2 * 70 * 64);
  }
  EXPECT_EQ(onednn::conv_wgrad_f32_workspace(WgradGeo{1, 4, 4, 64, 8, 1}), 0);
}

TEST_F(ConvWgradF32, OneThreadAndTwoGiveTheSameBits) {
  // dW's column panels split (C = 128), then its rows (K = 70), then a 3x3 through the
  // workspace: no pixel split, so each sum is formed in the same order on any thread count.
  expect_same_bits_on_1_and_2_threads(
      {WgradGeo{1, 10, 10, 128, 40, 1}, WgradGeo{2, 7, 7, 64, 70, 1},
       WgradGeo{2, 10, 10, 64, 40, 2, 3, 3, 1}},
      &onednn::conv_wgrad_f32_splits_pixels, &random_f32, &run_kernel_f32);
}

TEST_F(ConvWgradF32, TheBackendTakesItWhereItIsFasterAndAgreesWithOnednn) {
  onednn::set_conv_algo(onednn::ConvAlgo::automatic);
  const bool widening = onednn::conv_own_wgrad_allowed(DType::f32, {64, 256, 1, 1, 3136});
  const bool keeping = onednn::conv_own_wgrad_allowed(DType::f32, {64, 64, 1, 1, 3136});
  const bool strided = onednn::conv_own_wgrad_allowed(DType::f32, {1024, 2048, 1, 2, 49});
  const bool narrow_7x7 = onednn::conv_own_wgrad_allowed(DType::f32, {2048, 512, 1, 1, 49});
  const bool narrow_56 = onednn::conv_own_wgrad_allowed(DType::f32, {256, 64, 1, 1, 3136});
  const bool kxk = onednn::conv_own_wgrad_allowed(DType::f32, {512, 512, 3, 1, 49});
  onednn::set_conv_algo(onednn::ConvAlgo::direct);
  const bool taken_direct = onednn::conv_own_wgrad_allowed(DType::f32, {64, 256, 1, 1, 3136});
  onednn::set_conv_algo(std::nullopt);
  EXPECT_FALSE(taken_direct) << "policy `direct` must keep oneDNN's kernels";
  EXPECT_FALSE(narrow_56) << "oneDNN's kernel is faster for 1x1s that narrow at 56x56";
  EXPECT_FALSE(kxk) << "the f32 KxK weight gradients stay with oneDNN and Winograd";
  if (!widening)
    GTEST_SKIP() << "the policy leaves f32 weight gradients to oneDNN on this CPU (AMX)";
  const bool zen5 = onednn::cpu_class() == onednn::kCpuZen5;
  for (const bool taken : {keeping, strided, narrow_7x7})
    EXPECT_EQ(taken, zen5) << "the kernel beats oneDNN for 1x1s that keep the channels, strided "
                              "ones and those at 7x7 on Zen 5 only";
  // Shapes the policy takes: widening 64 -> 256 at 56x56 at batch 1 (pixels split), and on
  // Zen 5 at batch 2 the same at 28x28, strided 256 -> 512 from 14x14, 512 -> 128 at 7x7
  // (narrowing at 7x7).
  std::vector<WgradGeo> taken = {WgradGeo{1, 56, 56, 64, 256, 1}};
  if (zen5)
    taken.insert(taken.end(), {WgradGeo{2, 28, 28, 64, 256, 1}, WgradGeo{2, 14, 14, 256, 512, 2},
                               WgradGeo{2, 7, 7, 512, 128, 1}});
  expect_backend_agrees_with_onednn(DType::f32, taken, [](float a, float b) {
    // Sums of up to 3136 products of N(0, 1) values (magnitude ~56), in different orders.
    return std::fabs(a - b) <= 1e-4f * (std::fabs(b) + 56.f);
  });
}

// The rule table's own_wgrad_gemm rows on ResNet-50's convolutions, for every CPU class (any
// CPU: no kernel runs). Their measurements are the rows' evidence files (conv_rules.cpp).
TEST(ConvOwnWgradRule, ZenFourAndZenFiveTakeWhatWasMeasuredFasterThere) {
  using onednn::CpuClass;
  auto faster = [](DType dt, onednn::ConvShapeInfo s, CpuClass c) {
    return onednn::conv_rule_takes(c, "own_wgrad_gemm", onednn::ConvDir::bwd_weights, dt, s);
  };
  for (const CpuClass t : {onednn::kCpuAvx512, onednn::kCpuZen5}) {
    const bool zen5 = t == onednn::kCpuZen5;
    // bf16, both: 7x7 outputs, strided or fourfold-widening 1x1s, strided 3x3s to 14x14.
    EXPECT_TRUE(faster(DType::bf16, {2048, 512, 1, 1, 49}, t));
    EXPECT_TRUE(faster(DType::bf16, {512, 512, 3, 1, 49}, t));
    EXPECT_TRUE(faster(DType::bf16, {64, 256, 1, 1, 3136}, t));
    EXPECT_TRUE(faster(DType::bf16, {256, 512, 1, 2, 784}, t));
    EXPECT_TRUE(faster(DType::bf16, {256, 256, 3, 2, 196}, t));
    EXPECT_FALSE(faster(DType::bf16, {64, 64, 1, 1, 3136}, t));
    EXPECT_FALSE(faster(DType::bf16, {256, 256, 3, 1, 196}, t));
    EXPECT_FALSE(faster(DType::bf16, {128, 128, 3, 2, 784}, t));
    // bf16 narrowing 1x1s: Zen 5 only.
    EXPECT_EQ(faster(DType::bf16, {256, 64, 1, 1, 3136}, t), zen5);
    EXPECT_EQ(faster(DType::bf16, {1024, 256, 1, 1, 196}, t), zen5);
    // f32: the fourfold widening at 56x56 on both; keeping, other widening, strided and 7x7
    // 1x1s on Zen 5 only; narrowing ones above 7x7 and every KxK on neither.
    EXPECT_TRUE(faster(DType::f32, {64, 256, 1, 1, 3136}, t));
    EXPECT_EQ(faster(DType::f32, {64, 64, 1, 1, 3136}, t), zen5);
    EXPECT_EQ(faster(DType::f32, {256, 1024, 1, 1, 196}, t), zen5);
    EXPECT_EQ(faster(DType::f32, {1024, 2048, 1, 2, 49}, t), zen5);
    EXPECT_EQ(faster(DType::f32, {2048, 512, 1, 1, 49}, t), zen5);
    EXPECT_FALSE(faster(DType::f32, {256, 64, 1, 1, 3136}, t));
    EXPECT_FALSE(faster(DType::f32, {512, 512, 3, 1, 49}, t));
    EXPECT_FALSE(faster(DType::f16, {64, 256, 1, 1, 3136}, t));
  }
  // AMX CPUs take oneDNN's AMX matmuls instead; AVX2 CPUs have no kernel (and no rule).
  for (const CpuClass t : {onednn::kCpuAmx, onednn::kCpuAvx2}) {
    EXPECT_FALSE(faster(DType::bf16, {2048, 512, 1, 1, 49}, t)) << onednn::cpu_class_name(t);
    EXPECT_FALSE(faster(DType::f32, {64, 256, 1, 1, 3136}, t)) << onednn::cpu_class_name(t);
  }
}

TEST_F(ConvWgradF32, RejectsChannelCountsOffThePanel) {
  EXPECT_FALSE(onednn::conv_wgrad_f32_fits(WgradGeo{1, 4, 4, 48, 8, 1}));
  const WgradGeo g{1, 4, 4, 96, 8, 1};
  std::vector<float> x(16 * 96), dy(16 * 8), dw(8 * 96), work(8 * 96);
  EXPECT_THROW(onednn::conv_wgrad_f32(g, x.data(), dy.data(), dw.data(), work.data()),
               rn50::Error);
}

}  // namespace
}  // namespace rn50::test
