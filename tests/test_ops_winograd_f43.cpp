// Our Winograd F(4x4, 3x3) convolution (src/backend/cpu/winograd_f43.cpp), used by the CPU
// inference engine where oneDNN has none:
//  * against a naive float64 3x3 stride-1 pad-1 convolution on random data, nChw8c in and out:
//    one tile, partial edge tiles on a non-square image, several images, with and without
//    ReLU and the residual sum (Y's previous contents added before the ReLU), in one chunk, in
//    many chunks with a shorter last one (set_winograd_chunk_tiles), and with the output
//    channels split over the threads;
//  * the transformed weights equal G g G^T on a hand-checked kernel, panel-packed;
//  * the policies (worthwhile, worthwhile_cached) and the errors for channel counts it cannot take.
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/gemm_f32_panels.h"
#include "backend/cpu/winograd_f43.h"
#include "op_backend_fixture.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/profile.h"

namespace rn50::onednn {
namespace {

using Shape = WinogradF43Conv::Shape;

/// Index of (n, c, h, w) in an nChw8c tensor of C channels, H x W.
size_t blocked_index(const Shape& s, int64_t c_total, int64_t n, int64_t c, int64_t h,
                     int64_t w) {
  return static_cast<size_t>((((n * (c_total / 8) + c / 8) * s.h + h) * s.w + w) * 8 + c % 8);
}

/// y (nChw8c) = ReLU?(conv3x3(x, w) + b (+ y0)), stride 1, zero padding 1, in float64.
std::vector<double> reference(const Shape& s, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& b,
                              const std::vector<float>& y0, bool relu, bool accumulate) {
  std::vector<double> y(y0.size());
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t oh = 0; oh < s.h; ++oh)
        for (int64_t ow = 0; ow < s.w; ++ow) {
          double acc = b[static_cast<size_t>(k)];
          for (int64_t c = 0; c < s.c; ++c)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t q = 0; q < 3; ++q) {
                const int64_t ih = oh - 1 + r, iw = ow - 1 + q;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                acc += double(x[blocked_index(s, s.c, n, c, ih, iw)]) *
                       w[static_cast<size_t>(((k * s.c + c) * 3 + r) * 3 + q)];
              }
          const size_t i = blocked_index(s, s.k, n, k, oh, ow);
          if (accumulate) acc += y0[i];
          y[i] = relu ? std::max(0.0, acc) : acc;
        }
  return y;
}

struct Case {
  const char* name;
  Shape s;
  std::optional<int64_t> chunk;  ///< tiles per chunk (set_winograd_chunk_tiles)
  int threads = 2;               ///< OpenMP threads (the work split follows them)
};

const Case kCases[] = {
    {"one 4x4 tile", {1, 8, 16, 4, 4}, std::nullopt},
    {"partial edge tiles, non-square", {2, 16, 8, 7, 9}, std::nullopt},
    {"several images, one chunk", {3, 24, 32, 13, 13}, std::nullopt},
    {"chunks of 5 tiles, shorter last", {3, 24, 32, 13, 13}, 5},
    {"chunks of 1 tile", {2, 8, 8, 6, 5}, 1},
    {"few tiles: output channels in 2 parts", {1, 16, 128, 6, 7}, std::nullopt},
    {"24 output channels: a panel of 16 and one of 8", {2, 8, 24, 5, 6}, std::nullopt},
    {"chunks of 14 tiles: blocks of 6 rows and one of 2", {3, 16, 48, 9, 10}, std::nullopt},
    {"2 chunks, each in 4 output-channel parts (8 threads)", {4, 8, 256, 20, 20}, std::nullopt,
     8},
};

/// Sets the OpenMP threads for one scope (the work split depends on them), then restores them.
struct ThreadsScope {
  const int saved = omp_get_max_threads();
  explicit ThreadsScope(int n) { omp_set_num_threads(n); }
  ~ThreadsScope() { omp_set_num_threads(saved); }
};

/// `size` floats drawn uniformly from [-1, 1).
std::vector<float> uniform_floats(std::mt19937& rng, size_t size) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(size);
  for (float& e : v) e = u(rng);
  return v;
}

struct ChunkScope {
  explicit ChunkScope(std::optional<int64_t> t) { set_winograd_chunk_tiles(t); }
  ~ChunkScope() { set_winograd_chunk_tiles(std::nullopt); }
};

TEST(WinogradF43, EqualsTheNaiveConvolution) {
  static_assert(std::size(kCases) == 9, "kCases[5] and kCases[8] are the split cases below");
  {
    const ThreadsScope two(2);
    // 4 tiles on 2 threads: one chunk, its 128 output channels in 2 parts of 64.
    const WinogradF43Conv::Split parts = WinogradF43Conv::split(kCases[5].s);
    EXPECT_EQ(parts.chunk_tiles, 4);
    EXPECT_EQ(parts.k_parts, 2);
    const ThreadsScope eight(8);
    // 100 tiles on 8 threads: 2 chunks of 64 and 36 tiles, each transformed by the whole team.
    const WinogradF43Conv::Split eights = WinogradF43Conv::split(kCases[8].s);
    EXPECT_EQ(eights.chunk_tiles, 64);
    EXPECT_EQ(eights.k_parts, 4);
  }
  std::mt19937 rng(7);
  auto random = [&](size_t size) { return uniform_floats(rng, size); };
  for (const Case& cs : kCases)
    for (const bool relu : {false, true})
      for (const bool accumulate : {false, true}) {
        const ThreadsScope threads(cs.threads);
        const ChunkScope scope(cs.chunk);
        const Shape& s = cs.s;
        const std::string what = std::string(cs.name) + (relu ? ", relu" : "") +
                                 (accumulate ? ", residual sum" : "");
        const auto x = random(static_cast<size_t>(s.n * s.c * s.h * s.w));
        const auto w = random(static_cast<size_t>(s.k * s.c * 9));
        const auto b = random(static_cast<size_t>(s.k));
        const auto y0 = random(static_cast<size_t>(s.n * s.k * s.h * s.w));
        const auto want = reference(s, x, w, b, y0, relu, accumulate);
        std::vector<float> y = y0;
        WinogradF43Conv conv(s, WinogradF43Conv::transform_weights(w.data(), s.c, s.k),
                             b.data(), relu, accumulate);
        conv.run(x.data(), y.data());
        double scale = 0;
        for (double v : want) scale = std::max(scale, std::fabs(v));
        ASSERT_GT(scale, 1.0) << what;
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], want[i], 2e-5 * scale) << what << ", element " << i;
        // A second call on the same object (buffers reused) gives the same bits.
        std::vector<float> again = y0;
        conv.run(x.data(), again.data());
        EXPECT_EQ(again, y) << what;
      }
}

// G g G^T at the transformed tile's corners and centre for g = [[1,2,3],[4,5,6],[7,8,9]]:
// row 0 of G is (1/4, 0, 0) and row 5 (0, 0, 1), so U[0][0] = g00/16, U[0][5] = g02/4,
// U[5][5] = g22; row 1 is -(1/6)(1, 1, 1), so U[1][1] = sum(g)/36.
TEST(WinogradF43, TransformedWeightsAreGgGt) {
  const std::vector<float> g{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto u = WinogradF43Conv::transform_weights(g.data(), 1, 1);
  ASSERT_EQ(u->size(), 36u);
  EXPECT_FLOAT_EQ((*u)[0 * 6 + 0], 1.f / 16);
  EXPECT_FLOAT_EQ((*u)[0 * 6 + 5], 3.f / 4);
  EXPECT_FLOAT_EQ((*u)[5 * 6 + 5], 9.f);
  EXPECT_FLOAT_EQ((*u)[1 * 6 + 1], 45.f / 36);
  // With 2 input and 24 output channels, g as the kernel from input 1 to output 17 (the
  // 8-wide second panel) and zeros elsewhere: U[xi] is panel-packed (gemm_f32_panels.h).
  const int64_t C = 2, K = 24;
  std::vector<float> w(static_cast<size_t>(K * C * 9), 0.f);
  std::copy(g.begin(), g.end(), w.begin() + (17 * C + 1) * 9);
  const auto up = WinogradF43Conv::transform_weights(w.data(), C, K);
  for (int xi = 0; xi < 36; ++xi)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K; ++k) {
        const float want = c == 1 && k == 17 ? (*u)[static_cast<size_t>(xi)] : 0.f;
        ASSERT_FLOAT_EQ((*up)[static_cast<size_t>(xi * C * K + panel_offset(c, k, C, K))], want)
            << "position " << xi << ", c " << c << ", k " << k;
      }
}

TEST(WinogradF43, PolicyAndErrors) {
  // Channel counts that are not multiples of 8 are never taken, and refused when forced.
  EXPECT_FALSE(WinogradF43Conv::worthwhile({32, 12, 16, 56, 56}));
  const Shape bad{1, 12, 16, 8, 8};
  const std::vector<float> w(12 * 16 * 9, 0.f), b(16, 0.f);
  try {
    WinogradF43Conv conv(bad, WinogradF43Conv::transform_weights(w.data(), 12, 16),
                         b.data(), false, false);
    ADD_FAILURE() << "12 channels accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 8"), std::string::npos) << e.what();
  }
  // Transformed weights of another layer's size are refused.
  const auto small = WinogradF43Conv::transform_weights(w.data(), 8, 8);
  EXPECT_THROW(WinogradF43Conv({1, 16, 16, 8, 8}, small, b.data(), false, false), Error);
  // With 2 threads (the machine the rules were measured on): ResNet-50's batch-32 stride-1 3x3
  // convs have chunks of 64 tiles and are all taken; one image's 64- to 256-channel convs too,
  // but not its 512-channel 7x7 ones (4 tiles reading 38 MiB of transformed weights); two
  // images' are when U is kept (8 tiles in each of 2 output-channel parts), not when it is
  // transformed on every call (training).
  const ThreadsScope two(2);
  for (const int64_t c : {64, 128, 256, 512}) {
    const int64_t hw = 56 * 64 / c;
    // 1568 tiles at 128 channels: 13 chunks of 61 per thread (the last 43), not 24.5 x 64.
    EXPECT_EQ(WinogradF43Conv::split({32, c, c, hw, hw}).chunk_tiles, c == 128 ? 61 : 64) << c;
    for (const bool cached : {false, true}) {
      const auto taken = [&](const Shape& s) {
        return cached ? WinogradF43Conv::worthwhile_cached(s) : WinogradF43Conv::worthwhile(s);
      };
      EXPECT_TRUE(taken({32, c, c, hw, hw})) << c << " cached " << cached;
      EXPECT_EQ(taken({1, c, c, hw, hw}), c <= 256) << c << " cached " << cached;
      EXPECT_EQ(taken({2, c, c, hw, hw}), cached || c <= 256) << c << " cached " << cached;
    }
  }
  // A tiny training run's layers (ResNet-18 at 32 px, batch 8): 8 tiles per chunk of 1x1 to
  // 4x4 outputs. Only the 4x4 one is taken with U kept; none when U is transformed per call
  // but the 64-channel one (16 tiles per chunk, 64 x 64 channels).
  EXPECT_TRUE(WinogradF43Conv::worthwhile({8, 64, 64, 8, 8}));
  EXPECT_TRUE(WinogradF43Conv::worthwhile_cached({8, 128, 128, 4, 4}));
  for (const int64_t c : {128, 256, 512}) {
    const int64_t hw = 512 / c;
    EXPECT_FALSE(WinogradF43Conv::worthwhile({8, c, c, hw, hw})) << c;
    if (hw < 4) {
      EXPECT_FALSE(WinogradF43Conv::worthwhile_cached({8, c, c, hw, hw})) << c;
    }
  }
  EXPECT_EQ(WinogradF43Conv::split({1, 128, 128, 28, 28}).chunk_tiles, 25);
  // One 64-channel 56x56 image: 196 tiles as 2 chunks of 49 per thread (not 64, 64, 64, 4);
  // the override still gives chunks of exactly its size.
  EXPECT_EQ(WinogradF43Conv::split({1, 64, 64, 56, 56}).chunk_tiles, 49);
  {
    const ChunkScope fixed(64);
    EXPECT_EQ(WinogradF43Conv::split({1, 64, 64, 56, 56}).chunk_tiles, 64);
  }
  // One 256-channel 14x14 image: 16 tiles, 8 per thread would be too few: one chunk of 16,
  // its output channels in 2 parts.
  const WinogradF43Conv::Split one = WinogradF43Conv::split({1, 256, 256, 14, 14});
  EXPECT_EQ(one.chunk_tiles, 16);
  EXPECT_EQ(one.k_parts, 2);
  EXPECT_EQ(WinogradF43Conv::tiles({2, 8, 8, 7, 9}), 2 * 2 * 3);
}

// The tile transforms write a destination of more than 4 MiB (36 positions x ld rows) through
// a staging block in L2 with non-temporal stores when the caller allows it (may_stream: the
// weight gradient; a few tiles per block at 512 channels, so several blocks per call), a
// smaller one, or one the forward writes, directly: every path gives the same bits, also at a
// destination not 32-byte aligned, and writes nothing outside the rows.
TEST(WinogradF43, TileTransformsGiveTheSameBitsThroughEveryWritePath) {
  std::mt19937 rng(20261128);
  auto random_vec = [&](size_t size) { return uniform_floats(rng, size); };
  for (const bool nhwc : {false, true}) {
    const Shape s{2, 512, 256, 9, 7, nhwc};
    const int64_t rows = WinogradF43Conv::tiles(s) - 1, p0 = 1;  // 11 of 12 tiles
    const std::vector<float> x = random_vec(static_cast<size_t>(s.n * s.c * s.h * s.w));
    const std::vector<float> dy = random_vec(static_cast<size_t>(s.n * s.k * s.h * s.w));
    // The input transform with and without may_stream; the output gradient's always may.
    for (const int path : {0, 1, 2}) {
      const bool grad = path == 2, stream = path != 0;
      const int64_t ch = grad ? s.k : s.c;
      auto transform = [&](float* out, int64_t ld) {
        if (grad)
          WinogradF43Conv::transform_output_grad_tiles(s, dy.data(), p0, rows, out, ld);
        else
          WinogradF43Conv::transform_input_tiles(s, x.data(), p0, rows, out, ld, stream);
      };
      std::vector<float> small(static_cast<size_t>(36 * rows * ch), NAN);
      transform(small.data(), rows);
      // 36 x 128 rows x 256 or 512 channels: 4.5 or 9 MiB (streamed where the path may); one
      // float in (unaligned).
      const int64_t ld = 128;
      std::vector<float> big(static_cast<size_t>(36 * ld * ch + 1), -7.f);
      transform(big.data() + 1, ld);
      EXPECT_EQ(big[0], -7.f);
      int64_t differ = 0, nan = 0, outside = 0;
      for (int64_t xi = 0; xi < 36; ++xi)
        for (int64_t r = 0; r < ld; ++r)
          for (int64_t c = 0; c < ch; ++c) {
            const float b = big[static_cast<size_t>(1 + (xi * ld + r) * ch + c)];
            if (r >= rows) {
              outside += b != -7.f;
              continue;
            }
            const float a = small[static_cast<size_t>((xi * rows + r) * ch + c)];
            nan += std::isnan(a);
            differ += std::memcmp(&a, &b, sizeof a) != 0;
          }
      EXPECT_EQ(differ, 0) << "nhwc " << nhwc << " path " << path;
      EXPECT_EQ(nan, 0) << "nhwc " << nhwc << " path " << path;
      EXPECT_EQ(outside, 0) << "nhwc " << nhwc << " path " << path;
    }
  }
}

// ---------------------------------------------------------------- the training backend

// The oneDNN backend's conv2d_fwd and conv2d_bwd_data on NHWC f32 activations run as our
// Winograd (conv_winograd.h) under the `matmul` policy on any CPU (and by default on CPUs
// without AVX-512): both match the float64 reference backend, with OIHW and OHWI weights,
// outputs pre-filled with NaN; a profile counts one weight transform per call, so the test
// cannot pass on the direct path. The policy: never with `direct`, never NCHW, bwd_weights,
// stride 2 or channels that are not multiples of 8.
TEST(WinogradF43Training, FwdAndBwdDataMatchTheReference) {
  using namespace rn50::test;
  const ThreadsScope two(2);
  set_conv_algo(ConvAlgo::matmul);
  std::unique_ptr<Backend> be = make_backend("onednn");
  Backend& ref = ref_backend();
  std::mt19937_64 rng(20261127);
  const Conv2dParams p{1, 1};
  const int64_t C = 16, K = 24;
  const Tol tol{2e-4, 1e-4};  // Winograd's rounding: ~1e-5 of the outputs' magnitude (~3)
  // 2 images of 16x13 (partial edge tiles): 32 tiles, 2 chunks of 16 per thread; 16 images of
  // 2x2 and 24 of 1x3 (one partial tile each, as ResNet's last stage at 64 px and below).
  for (const auto& [N, H, W] : {std::array<int64_t, 3>{2, 16, 13}, {16, 2, 2}, {24, 1, 3}}) {
    SCOPED_TRACE("N, H, W = " + std::to_string(N) + ", " + std::to_string(H) + ", " +
                 std::to_string(W));
    const Tensor x = random_tensor({N, C, H, W}, rng), dy = random_tensor({N, K, H, W}, rng);
    const Tensor w = random_tensor({K, C, 3, 3}, rng, -0.5, 0.5);
    Tensor yr = Tensor::empty({N, K, H, W}, F64), dxr = Tensor::empty({N, C, H, W}, F64);
    ref.conv2d_fwd(p, ref_input(x, F32, NHWC), ref_input(w, F32, NCHW), yr);
    ref.conv2d_bwd_data(p, ref_input(dy, F32, NHWC), ref_input(w, F32, NCHW), dxr);
    for (Layout wl : {NCHW, NHWC}) {
      SCOPED_TRACE(std::string("weights ") + layout_name(wl));
      const Tensor xd = upload(*be, x, F32, NHWC), dyd = upload(*be, dy, F32, NHWC);
      const Tensor wd = upload(*be, w, F32, wl);
      Tensor y = nan_output(*be, {N, K, H, W}, F32, NHWC);
      Tensor dx = nan_output(*be, {N, C, H, W}, F32, NHWC);
      EXPECT_TRUE(conv_as_own_winograd(ConvDir::fwd, p, xd, wd, y));
      EXPECT_TRUE(conv_as_own_winograd(ConvDir::bwd_data, p, dx, wd, dyd));
      OpProfiler prof;
      {
        OpProfiler::Activation on(prof);
        be->conv2d_fwd(p, xd, wd, y);
        be->conv2d_bwd_data(p, dyd, wd, dx);
      }
      int64_t transforms = 0;
      for (const OpProfiler::Row& r : prof.rows())
        if (r.op == "winograd weight transform") transforms = r.calls;
      EXPECT_EQ(transforms, 2);
      EXPECT_TRUE(all_close("conv2d_fwd y", download(*be, y), yr, tol));
      EXPECT_TRUE(all_close("conv2d_bwd_data dx", download(*be, dx), dxr, tol));
    }
  }
  const int64_t N = 2, H = 16, W = 13;
  const Tensor xn = Tensor::empty({N, C, H, W}, F32, NCHW);
  const Tensor yn = Tensor::empty({N, K, H, W}, F32, NCHW);
  const Tensor xh = Tensor::empty({N, C, H, W}, F32, NHWC);
  const Tensor yh = Tensor::empty({N, K, H, W}, F32, NHWC);
  const Tensor wf = Tensor::empty({K, C, 3, 3}, F32);
  EXPECT_FALSE(conv_as_own_winograd(ConvDir::fwd, p, xn, wf, yn)) << "NCHW";
  EXPECT_FALSE(conv_as_own_winograd(ConvDir::bwd_weights, p, xh, wf, yh)) << "bwd_weights";
  EXPECT_FALSE(conv_as_own_winograd(ConvDir::fwd, {2, 1}, xh, wf, yh)) << "stride 2";
  const Tensor x12 = Tensor::empty({N, 12, H, W}, F32, NHWC);
  const Tensor w12 = Tensor::empty({K, 12, 3, 3}, F32);
  EXPECT_FALSE(conv_as_own_winograd(ConvDir::fwd, p, x12, w12, yh)) << "12 channels";
  set_conv_algo(ConvAlgo::direct);
  EXPECT_FALSE(conv_as_own_winograd(ConvDir::fwd, p, xh, wf, yh)) << "direct";
  set_conv_algo(std::nullopt);
}

// The weight gradient (conv_bwd_weights_own_winograd) against the float64 reference backend:
// three shapes of 64 tiles (partial edge tiles; 2x2 and 1x3 images, one partial tile each),
// OIHW and OHWI dw pre-filled with NaN, the tiles in 3 chunks (22, 22 and a shorter 20) and in
// one; the profile's tile-transform row counts the chunks, so the test cannot pass on another
// path.
TEST(WinogradF43Training, WeightGradientMatchesTheReference) {
  using namespace rn50::test;
  const ThreadsScope two(2);
  set_conv_algo(ConvAlgo::matmul);
  std::unique_ptr<Backend> be = make_backend("onednn");
  Backend& ref = ref_backend();
  std::mt19937_64 rng(20261128);
  const Conv2dParams p{1, 1};
  const int64_t C = 16, K = 24;
  const Tol tol{2e-4, 1e-4};  // sums of ~1e3 products of values ~1: Winograd's rounding ~1e-5
  for (const auto& [N, H, W] : {std::array<int64_t, 3>{4, 16, 13}, {64, 2, 2}, {64, 1, 3}}) {
    SCOPED_TRACE("N, H, W = " + std::to_string(N) + ", " + std::to_string(H) + ", " +
                 std::to_string(W));
    const Tensor x = random_tensor({N, C, H, W}, rng), dy = random_tensor({N, K, H, W}, rng);
    Tensor dwr = Tensor::empty({K, C, 3, 3}, F64);
    ref.conv2d_bwd_weights(p, ref_input(x, F32, NHWC), ref_input(dy, F32, NHWC), dwr);
    const size_t row_bytes = 36 * (C + K) * sizeof(float);
    for (const size_t chunk_bytes : {row_bytes * 24, size_t{16} << 20})
      for (Layout wl : {NCHW, NHWC}) {
        SCOPED_TRACE(std::string("dw ") + layout_name(wl) + ", chunk bytes " +
                     std::to_string(chunk_bytes));
        set_winograd_wgrad_chunk_bytes(chunk_bytes);
        const Tensor xd = upload(*be, x, F32, NHWC), dyd = upload(*be, dy, F32, NHWC);
        Tensor dw = nan_output(*be, {K, C, 3, 3}, F32, wl);
        EXPECT_TRUE(conv_bwd_weights_as_own_winograd(p, xd, dw, dyd));
        OpProfiler prof;
        {
          OpProfiler::Activation on(prof);
          be->conv2d_bwd_weights(p, xd, dyd, dw);
        }
        int64_t chunks = 0;
        for (const OpProfiler::Row& r : prof.rows())
          if (r.op == "winograd tiles (conv bwd_weights)") chunks = r.calls;
        EXPECT_EQ(chunks, chunk_bytes == row_bytes * 24 ? 3 : 1);
        EXPECT_TRUE(all_close("conv2d_bwd_weights dw", download(*be, dw), dwr, tol));
      }
  }
  set_winograd_wgrad_chunk_bytes(std::nullopt);
  // The measured rule (winograd_f43.cpp): 48 tiles, 96 for layers wider than 256 x 256.
  using S = WinogradF43Conv::Shape;
  EXPECT_TRUE(WinogradF43Conv::weight_grad_worthwhile(S{1, 128, 128, 28, 28}));  // 49 tiles
  EXPECT_FALSE(WinogradF43Conv::weight_grad_worthwhile(S{2, 256, 256, 14, 14}));  // 32
  EXPECT_TRUE(WinogradF43Conv::weight_grad_worthwhile(S{4, 256, 256, 14, 14}));
  EXPECT_FALSE(WinogradF43Conv::weight_grad_worthwhile(S{16, 512, 512, 7, 7}));  // 64
  EXPECT_TRUE(WinogradF43Conv::weight_grad_worthwhile(S{32, 512, 512, 7, 7}));
  EXPECT_FALSE(WinogradF43Conv::weight_grad_worthwhile(S{32, 12, 16, 56, 56})) << "12 channels";
  // Not for fewer tiles, NCHW, stride 2, or with the direct policy.
  const Tensor xs = Tensor::empty({1, C, 8, 8}, F32, NHWC);
  const Tensor dys = Tensor::empty({1, K, 8, 8}, F32, NHWC);
  const Tensor dwf = Tensor::empty({K, C, 3, 3}, F32);
  EXPECT_FALSE(conv_bwd_weights_as_own_winograd(p, xs, dwf, dys)) << "4 tiles";
  const Tensor xh = Tensor::empty({64, C, 4, 4}, F32, NHWC);
  const Tensor dyh = Tensor::empty({64, K, 4, 4}, F32, NHWC);
  EXPECT_TRUE(conv_bwd_weights_as_own_winograd(p, xh, dwf, dyh));
  const Tensor xn = Tensor::empty({64, C, 4, 4}, F32, NCHW);
  const Tensor dyn = Tensor::empty({64, K, 4, 4}, F32, NCHW);
  EXPECT_FALSE(conv_bwd_weights_as_own_winograd(p, xn, dwf, dyn)) << "NCHW";
  EXPECT_FALSE(conv_bwd_weights_as_own_winograd({2, 1}, xh, dwf, dyh)) << "stride 2";
  set_conv_algo(ConvAlgo::direct);
  EXPECT_FALSE(conv_bwd_weights_as_own_winograd(p, xh, dwf, dyh)) << "direct";
  set_conv_algo(std::nullopt);
}

}  // namespace
}  // namespace rn50::onednn
