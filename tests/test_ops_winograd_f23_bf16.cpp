// The bf16 3x3 stride-1 convolution as Winograd F(2x2, 3x3) (src/backend/cpu/
// winograd_f23_bf16.cpp) against a float64 reference on random data: the forward conv and the
// backward-data conv (the weights transposed and rotated by the weight transform), OIHW and
// OHWI weights, even and odd image sizes (a last row and column of tiles half outside), one
// chunk and several with a shorter last one, 1 and 2 threads; the weight gradient (through the
// backend's conv2d_bwd_weights, conv_winograd.cpp), one chunk and several; and, through the
// oneDNN backend's conv2d_fwd / conv2d_bwd_data / conv2d_bwd_weights (which take it where
// conv_own_winograd_bf16_allowed says), the answer oneDNN's direct bf16 kernel gives.
// Skips where the build has no such op (a CPU without AVX-512 BF16, or with AMX).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/onednn_backend.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "core/bf16.h"
#include "rn50/backend.h"
#include "rn50/tensor.h"

namespace rn50::test {
namespace {

using onednn::WinogradF23Bf16;
using Order = WinogradF23Bf16::WeightOrder;
using Shape = WinogradF23Bf16::Shape;

/// n bf16 values: |normal| (post-ReLU activations) or normal * scale (weights, gradients).
std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed, bool relu, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& e : v) e = float_to_bf16(relu ? std::fabs(d(rng)) : d(rng) * scale);
  return v;
}

/// Output (n, h, w, ko) of the direct 3x3 conv, stride 1, pad 1, in float64, from `in` (n, h,
/// w, ci) NHWC; tap (r, q) of output channel ko from input channel ci is wt(ko, ci, r, q). Also
/// sum |in| |w| per output (the error scale).
template <class Wt>
void reference(const Shape& s, int64_t ci_n, int64_t ko_n, const std::vector<uint16_t>& in,
               Wt wt, std::vector<double>& out, std::vector<double>& mag) {
  out.assign(static_cast<size_t>(s.n * s.h * s.w * ko_n), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t w = 0; w < s.w; ++w)
        for (int r = 0; r < 3; ++r)
          for (int q = 0; q < 3; ++q) {
            const int64_t ih = h + r - 1, iw = w + q - 1;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            const uint16_t* px = &in[static_cast<size_t>(((n * s.h + ih) * s.w + iw) * ci_n)];
            for (int64_t ko = 0; ko < ko_n; ++ko) {
              double a = 0, b = 0;
              for (int64_t ci = 0; ci < ci_n; ++ci) {
                const double p = bf16_to_float(px[ci]) * double{wt(ko, ci, r, q)};
                a += p;
                b += std::fabs(p);
              }
              const auto o = static_cast<size_t>(((n * s.h + h) * s.w + w) * ko_n + ko);
              out[o] += a;
              mag[o] += b;
            }
          }
}

/// Runs the op on `threads` threads in direction fwd (x -> y) or bwd_data (dy -> dx) and checks
/// it against the float64 conv: every element within 2^-8 of its value plus 2^-6 of its sum of
/// |products| (the transformed operands' bf16 roundings), and the relative RMS error under 6e-3
/// (3.6-3.8e-3 expected at ResNet-50's shapes; the direct bf16 conv has 1.7e-3).
void expect_matches_reference(const Shape& fwd, bool bwd_data, bool ohwi, int threads,
                              uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "N" << fwd.n << " " << fwd.h << "x" << fwd.w << " C"
                                    << fwd.c << " K" << fwd.k << (bwd_data ? " bwd_data" : " fwd")
                                    << (ohwi ? " OHWI" : " OIHW") << ", " << threads
                                    << " thread(s)");
  const int64_t C = fwd.c, K = fwd.k;
  const auto w = random_bf16(K * C * 9, seed, false, 0.1f);  // the forward conv's (K, C, 3, 3)
  auto wf = [&](int64_t ko, int64_t ci, int r, int q) {      // forward tap, either order
    const int64_t i = ohwi ? ((ko * 3 + r) * 3 + q) * C + ci : (ko * C + ci) * 9 + r * 3 + q;
    return bf16_to_float(w[static_cast<size_t>(i)]);
  };
  // The op's own shape: the backward-data conv maps dy's K channels to dx's C.
  const Shape s{fwd.n, bwd_data ? K : C, bwd_data ? C : K, fwd.h, fwd.w};
  const auto in = random_bf16(s.n * s.h * s.w * s.c, seed + 1, !bwd_data);
  std::vector<double> ref, mag;
  if (bwd_data)  // dx[c] at (h, w) = sum dy[k] at (h - r + 1, w - q + 1) W[k][c][r][q]
    reference(
        s, K, C, in, [&](int64_t c, int64_t k, int r, int q) { return wf(k, c, 2 - r, 2 - q); },
        ref, mag);
  else
    reference(s, C, K, in, wf, ref, mag);
  const Order order = bwd_data ? (ohwi ? Order::ohwi_bwd_data : Order::oihw_bwd_data)
                               : (ohwi ? Order::ohwi : Order::oihw);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<uint16_t> u(WinogradF23Bf16::weight_elems(s));
  WinogradF23Bf16::transform_weights_into(w.data(), s.c, s.k, order, u.data());
  std::vector<uint16_t> out(ref.size(), 0x7fc0);  // NaN: every element must be written
  {
    WinogradF23Bf16 op(dnnl::engine(dnnl::engine::kind::cpu, 0), s);
    op.run(u.data(), in.data(), out.data());
  }
  omp_set_num_threads(saved);
  int64_t bad = 0;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double got = bf16_to_float(out[i]), e = got - ref[i];
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    const double tol = std::fabs(ref[i]) / 256 + mag[i] / 64 + 1e-6;
    if (!(std::fabs(e) <= tol) && bad++ < 5)
      ADD_FAILURE() << "output " << i << " = " << got << ", reference " << ref[i];
  }
  EXPECT_EQ(bad, 0);
  EXPECT_LT(std::sqrt(err2 / ref2), 6e-3);
}

class WinogradF23Bf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!WinogradF23Bf16::built())
      GTEST_SKIP() << "this build has no AVX-512 BF16 Winograd (CPU without AVX-512 BF16, or "
                      "with AMX)";
  }
  void TearDown() override { onednn::set_winograd_f23_chunk_tiles(std::nullopt); }
};

TEST_F(WinogradF23Bf16Test, ForwardMatchesFloat64Reference) {
  // 8x8 (whole tiles), 7x7 and 5x6 (a last row or column of tiles half outside), 14x14 at
  // ResNet-50's channel ratio; one chunk per thread.
  uint32_t seed = 3;
  for (const Shape& s : {Shape{2, 32, 48, 8, 8}, Shape{3, 16, 16, 7, 7}, Shape{1, 64, 32, 5, 6},
                         Shape{2, 64, 64, 14, 14}})
    for (const int threads : {1, 2})
      for (const bool ohwi : {false, true})
        expect_matches_reference(s, false, ohwi, threads, seed += 2);
}

TEST_F(WinogradF23Bf16Test, BackwardDataMatchesFloat64Reference) {
  // C != K so that a transposition mistake changes the shapes' roles.
  uint32_t seed = 51;
  for (const Shape& s : {Shape{2, 32, 48, 8, 8}, Shape{3, 16, 64, 7, 7}})
    for (const int threads : {1, 2})
      for (const bool ohwi : {false, true})
        expect_matches_reference(s, true, ohwi, threads, seed += 2);
}

TEST_F(WinogradF23Bf16Test, EpilogueAddsBiasAndResidualThenReLU) {
  // The inference engine's fused conv: y = ReLU(conv(x) + bias + y), 7x7 (half tiles), 2
  // threads, f32 weights (transformed straight into bf16 U).
  const Shape s{2, 32, 48, 7, 7};
  const auto x = random_bf16(s.n * s.h * s.w * s.c, 301, true);
  const auto wb = random_bf16(s.k * s.c * 9, 302, false, 0.1f);
  std::vector<float> w(wb.size()), bias(static_cast<size_t>(s.k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(wb[i]);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i % 7) - 3.f;
  const auto res = random_bf16(s.n * s.h * s.w * s.k, 303, false);
  std::vector<double> ref, mag;
  reference(s, s.c, s.k, x,
            [&](int64_t ko, int64_t ci, int r, int q) {
              return w[static_cast<size_t>((ko * s.c + ci) * 9 + r * 3 + q)];
            },
            ref, mag);
  std::vector<uint16_t> u(WinogradF23Bf16::weight_elems(s)), y = res;
  WinogradF23Bf16::transform_weights_into(w.data(), s.c, s.k, Order::oihw, u.data());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  {
    WinogradF23Bf16 op(dnnl::engine(dnnl::engine::kind::cpu, 0), s,
                       WinogradF23Bf16::Epilogue{bias.data(), true, true});
    op.run(u.data(), x.data(), y.data());
  }
  omp_set_num_threads(saved);
  int64_t bad = 0, zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double pre = ref[i] + bias[i % bias.size()] + bf16_to_float(res[i]);
    const double want = std::max(0.0, pre), got = bf16_to_float(y[i]);
    zeros += want == 0;
    const double tol = std::fabs(pre) / 256 + mag[i] / 64 + 1e-6;
    if (!(std::fabs(got - want) <= tol) && bad++ < 5)
      ADD_FAILURE() << "y[" << i << "] = " << got << ", expected " << want;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(zeros, static_cast<int64_t>(y.size()) / 10) << "the ReLU should clip many outputs";
}

TEST_F(WinogradF23Bf16Test, SeveralChunksWithAShortLastOne) {
  // 2 x 4 x 4 = 32 tiles (7x7 images); chunks of 5: 16 tiles per thread on 2 threads as 5, 5,
  // 5, 1, and the single-thread run's 32 as six of 5 and one of 2.
  onednn::set_winograd_f23_chunk_tiles(5);
  const Shape s{2, 32, 16, 7, 7};
  EXPECT_EQ(WinogradF23Bf16::chunk_tiles(s), 5);
  expect_matches_reference(s, false, false, 1, 91);
  expect_matches_reference(s, false, true, 2, 93);
  expect_matches_reference(s, true, false, 2, 95);
}

TEST_F(WinogradF23Bf16Test, ChunksAreEqualPerThread) {
  // 32 x 7 x 7 = 1568 tiles of a 14x14 layer at batch 32: 784 per thread on 2 threads, in
  // chunks of at most 2 MiB of V and M (24 KiB per tile at 256 channels: 85 tiles).
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const int64_t chunk = WinogradF23Bf16::chunk_tiles({32, 256, 256, 14, 14});
  omp_set_num_threads(saved);
  const int64_t per_thread = (784 + chunk - 1) / chunk;
  const int64_t most = WinogradF23Bf16::kChunkBytes / (16 * (2 * 256 + 4 * 256));
  EXPECT_LE(chunk, most);
  EXPECT_GT(chunk, most / 2) << "as few chunks as the cap allows";
  // Equal chunks: together they overshoot the thread's 784 tiles by less than one per chunk.
  EXPECT_LT(per_thread * chunk - 784, per_thread);
}

TEST_F(WinogradF23Bf16Test, TheBackendTakesItFrom14x14UpAndAgreesWithOnednn) {
  onednn::set_conv_algo(onednn::ConvAlgo::automatic);
  const bool at_14 = onednn::conv_own_winograd_bf16_allowed({256, 256, 3, 1, 14 * 14});
  const bool at_56 = onednn::conv_own_winograd_bf16_allowed({64, 64, 3, 1, 56 * 56});
  const bool at_7 = onednn::conv_own_winograd_bf16_allowed({512, 512, 3, 1, 7 * 7});
  onednn::set_conv_algo(onednn::ConvAlgo::direct);
  const bool direct = onednn::conv_own_winograd_bf16_allowed({256, 256, 3, 1, 14 * 14});
  onednn::set_conv_algo(std::nullopt);
  EXPECT_TRUE(at_14 && at_56) << "F(2x2, 3x3) beats oneDNN's direct bf16 kernel from 14x14 up";
  EXPECT_FALSE(at_7) << "oneDNN's direct kernel is the faster one at 7x7";
  EXPECT_FALSE(direct) << "policy `direct` must keep oneDNN's kernels";

  // Batch 6 at 14x14 (294 tiles: 147 per thread on 2 threads, at least kMinTilesPerThread),
  // 64 -> 32 channels, weights OIHW and OHWI: forward, backward data and the weight gradient
  // through the backend under `automatic` (this op) and `direct` (oneDNN's kernel).
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  ASSERT_TRUE(WinogradF23Bf16::worthwhile({6, 64, 32, 14, 14}));
  EXPECT_FALSE(WinogradF23Bf16::worthwhile({2, 64, 32, 14, 14})) << "98 tiles: too few";
  std::unique_ptr<Backend> be = make_backend("onednn");
  auto tensor = [&](std::vector<int64_t> shape, uint32_t seed, bool relu, float scale,
                    Layout l) {
    Tensor t = Tensor::empty(std::move(shape), DType::bf16, l);
    const auto v = random_bf16(t.numel(), seed, relu, scale);
    std::copy(v.begin(), v.end(), t.data_as<uint16_t>());
    return t;
  };
  using onednn::ConvDir;
  for (const Layout wl : {Layout::NCHW, Layout::NHWC})
    for (const ConvDir dir : {ConvDir::fwd, ConvDir::bwd_data, ConvDir::bwd_weights}) {
      SCOPED_TRACE(::testing::Message() << static_cast<int>(dir) << " (0 fwd, 1 bwd_data, 2 "
                                        << "bwd_weights)" << (wl == Layout::NHWC ? " OHWI"
                                                                                 : " OIHW"));
      const Tensor w = tensor({32, 64, 3, 3}, 61, false, 0.1f, wl);
      const Tensor x = tensor({6, 64, 14, 14}, 63, true, 1.f, Layout::NHWC);
      const Tensor dy = tensor({6, 32, 14, 14}, 62, false, 1.f, Layout::NHWC);
      const std::vector<int64_t> out_shape =
          dir == ConvDir::fwd        ? std::vector<int64_t>{6, 32, 14, 14}
          : dir == ConvDir::bwd_data ? std::vector<int64_t>{6, 64, 14, 14}
                                     : std::vector<int64_t>{32, 64, 3, 3};
      const Layout out_layout = dir == ConvDir::bwd_weights ? wl : Layout::NHWC;
      Tensor own = Tensor::empty(out_shape, DType::bf16, out_layout);
      Tensor ref = Tensor::empty(out_shape, DType::bf16, out_layout);
      const Conv2dParams p{1, 1};
      for (const auto algo : {onednn::ConvAlgo::direct, onednn::ConvAlgo::automatic}) {
        onednn::set_conv_algo(algo);
        Tensor& out = algo == onednn::ConvAlgo::direct ? ref : own;
        if (dir == ConvDir::fwd)
          be->conv2d_fwd(p, x, w, out);
        else if (dir == ConvDir::bwd_data)
          be->conv2d_bwd_data(p, dy, w, out);
        else
          be->conv2d_bwd_weights(p, x, dy, out);
      }
      onednn::set_conv_algo(std::nullopt);
      double d2 = 0, r2 = 0;
      int64_t differ = 0;
      for (int64_t i = 0; i < own.numel(); ++i) {
        const double a = bf16_to_float(own.data_as<uint16_t>()[i]);
        const double b = bf16_to_float(ref.data_as<uint16_t>()[i]);
        d2 += (a - b) * (a - b);
        r2 += b * b;
        differ += a != b;
      }
      // Both within 1.7e-3 / 3.8e-3 RMS of the exact conv: their difference under 6e-3.
      EXPECT_LT(std::sqrt(d2 / r2), 6e-3);
      EXPECT_GT(differ, 0) << "the same bits as oneDNN's direct kernel: was this op taken?";
    }
  omp_set_num_threads(saved);
}

/// The weight gradient through the backend's conv2d_bwd_weights under policy `matmul` (which
/// sends every bf16 3x3 stride-1 conv that fits to this op) against float64: dw[k][c][r][q] =
/// sum over n, h, w of dy[n][h][w][k] x[n][h + r - 1][w + q - 1][c]. Every element within 2^-7
/// of its value plus 2^-6 of its sum of |products|, the relative RMS error under 6e-3.
void expect_weight_grad_matches_reference(const Shape& s, Layout wl, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "weight gradient N" << s.n << " " << s.h << "x" << s.w
                                    << " C" << s.c << " K" << s.k
                                    << (wl == Layout::NHWC ? " OHWI" : " OIHW"));
  const auto xv = random_bf16(s.n * s.h * s.w * s.c, seed, true);
  const auto dyv = random_bf16(s.n * s.h * s.w * s.k, seed + 1, false);
  std::vector<double> ref(static_cast<size_t>(s.k * s.c * 9), 0.0), mag(ref.size(), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t w = 0; w < s.w; ++w)
        for (int r = 0; r < 3; ++r)
          for (int q = 0; q < 3; ++q) {
            const int64_t ih = h + r - 1, iw = w + q - 1;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            const uint16_t* px = &xv[static_cast<size_t>(((n * s.h + ih) * s.w + iw) * s.c)];
            const uint16_t* g = &dyv[static_cast<size_t>(((n * s.h + h) * s.w + w) * s.k)];
            for (int64_t k = 0; k < s.k; ++k)
              for (int64_t c = 0; c < s.c; ++c) {
                const double p = double{bf16_to_float(g[k])} * bf16_to_float(px[c]);
                const auto o = static_cast<size_t>((k * s.c + c) * 9 + r * 3 + q);
                ref[o] += p;
                mag[o] += std::fabs(p);
              }
          }
  auto tensor = [](std::vector<int64_t> shape, const std::vector<uint16_t>& v) {
    Tensor t = Tensor::empty(std::move(shape), DType::bf16, Layout::NHWC);
    std::copy(v.begin(), v.end(), t.data_as<uint16_t>());
    return t;
  };
  const Tensor x = tensor({s.n, s.c, s.h, s.w}, xv), dy = tensor({s.n, s.k, s.h, s.w}, dyv);
  Tensor dw = Tensor::empty({s.k, s.c, 3, 3}, DType::bf16, wl);
  std::unique_ptr<Backend> be = make_backend("onednn");
  onednn::set_conv_algo(onednn::ConvAlgo::matmul);
  be->conv2d_bwd_weights(Conv2dParams{1, 1}, x, dy, dw);
  onednn::set_conv_algo(std::nullopt);
  int64_t bad = 0;
  double err2 = 0, ref2 = 0;
  for (int64_t k = 0; k < s.k; ++k)
    for (int64_t c = 0; c < s.c; ++c)
      for (int t = 0; t < 9; ++t) {
        const auto i = static_cast<size_t>((k * s.c + c) * 9 + t);
        const int64_t at = wl == Layout::NHWC ? (k * 9 + t) * s.c + c : (k * s.c + c) * 9 + t;
        const double got = bf16_to_float(dw.data_as<uint16_t>()[at]), e = got - ref[i];
        err2 += e * e;
        ref2 += ref[i] * ref[i];
        if (!(std::fabs(e) <= std::fabs(ref[i]) / 128 + mag[i] / 64 + 1e-6) && bad++ < 5)
          ADD_FAILURE() << "dw[" << k << "][" << c << "] tap " << t << " = " << got
                        << ", reference " << ref[i];
      }
  EXPECT_EQ(bad, 0);
  EXPECT_LT(std::sqrt(err2 / ref2), 6e-3);
}

TEST_F(WinogradF23Bf16Test, WeightGradMatchesFloat64Reference) {
  // Even and odd images (a last row and column of 2x2 gradient tiles half outside), C != K,
  // OIHW and OHWI; then chunks of 4 KiB (a few tiles each, the last shorter), whose products
  // add into M.
  uint32_t seed = 201;
  for (const Layout wl : {Layout::NCHW, Layout::NHWC}) {
    expect_weight_grad_matches_reference({2, 32, 48, 8, 8}, wl, seed += 2);
    expect_weight_grad_matches_reference({3, 16, 32, 7, 7}, wl, seed += 2);
  }
  onednn::set_winograd_wgrad_chunk_bytes(4096);
  expect_weight_grad_matches_reference({2, 16, 32, 7, 5}, Layout::NHWC, seed += 2);
  onednn::set_winograd_wgrad_chunk_bytes(std::nullopt);
}

TEST_F(WinogradF23Bf16Test, RejectsChannelsThatAreNotMultiplesOf16) {
  EXPECT_FALSE(WinogradF23Bf16::fits({1, 24, 32, 8, 8}));
  EXPECT_FALSE(WinogradF23Bf16::fits({1, 32, 40, 8, 8}));
  EXPECT_TRUE(WinogradF23Bf16::fits({1, 32, 48, 8, 8}));
  EXPECT_THROW(WinogradF23Bf16(dnnl::engine(dnnl::engine::kind::cpu, 0), {1, 24, 32, 8, 8}),
               std::exception);
}

}  // namespace
}  // namespace rn50::test
