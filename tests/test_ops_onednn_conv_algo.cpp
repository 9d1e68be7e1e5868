// oneDNN backend: the convolution algorithm policy (src/backend/cpu/conv_algo.h).
//  * Under ConvAlgo::matmul every 1x1 pad-0 conv on NHWC activations runs as a oneDNN matmul
//    (src/backend/cpu/conv_matmul.cpp) in all three directions, in f32 and bf16, on any CPU:
//    checked against the float64 reference backend for stride 1 and 2 (odd and even sizes, so
//    the gather of every second row and column and the scatter of the data gradient into a
//    zeroed dx are exercised), with both weight layouts, outputs pre-filled with NaN (an element
//    the path forgets to write fails). Tolerances are the op harness's (op_backend_fixture.h).
//  * Routing: which convolutions take the matmul path under each policy (never the forward or
//    f32 by default, never with `direct`, never for 3x3, padded, or NCHW convs).
// The op harness (test_ops_conv_bn.cpp) runs the same conv shapes under the default policy;
// on an AMX CPU that already includes the bf16 NHWC backward through matmuls.
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_matmul.h"
#include "backend/cpu/onednn_backend.h"
#include "op_backend_fixture.h"
#include "rn50/backend.h"

namespace rn50::test {
namespace {

using onednn::ConvAlgo;
using onednn::ConvDir;

/// Sets the policy for one scope and hands the choice back to RN50_CONV_ALGO afterwards.
struct AlgoScope {
  explicit AlgoScope(ConvAlgo a) { onednn::set_conv_algo(a); }
  ~AlgoScope() { onednn::set_conv_algo(std::nullopt); }
};

const ConvShape k1x1Shapes[] = {
    {"1x1 s1 (reduce)", 2, 64, 14, 14, 32, 1, 1, 0},
    {"1x1 s1 (expand, 7x7)", 2, 32, 7, 7, 128, 1, 1, 0},
    {"1x1 s2 (downsample, odd)", 2, 64, 15, 15, 96, 1, 2, 0},
    {"1x1 s2 (downsample, even)", 3, 48, 16, 16, 40, 1, 2, 0},
};

std::vector<DType> dtypes() {
  std::vector<DType> v{DType::f32};
  if (onednn::OnednnBackend::bf16_available()) v.push_back(DType::bf16);
  return v;
}

class Conv1x1Matmul : public ::testing::Test {
 protected:
  void SetUp() override { be_ = make_backend("onednn"); }
  Tensor rand(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    return random_tensor(std::move(shape), rng_, lo, hi, F32, NCHW);
  }
  Tensor out(std::vector<int64_t> shape, DType d, Layout l = NCHW) {
    return nan_output(*be_, std::move(shape), d, l);
  }
  static Tensor rout(std::vector<int64_t> shape) { return Tensor::empty(std::move(shape), F64); }
  void check(const std::string& what, const Tensor& dev, const Tensor& want, DType d) {
    EXPECT_TRUE(all_close(what + " " + dtype_name(d), download(*be_, dev), want,
                          for_dtype(kConv, d)));
  }
  std::unique_ptr<Backend> be_;
  std::mt19937_64 rng_{20261126};
};

TEST_F(Conv1x1Matmul, AllDirectionsMatchTheReference) {
  AlgoScope forced(ConvAlgo::matmul);
  Backend& ref = ref_backend();
  for (DType d : dtypes()) {
    for (const ConvShape& s : k1x1Shapes) {
      SCOPED_TRACE(std::string(s.name) + " " + dtype_name(d));
      const Conv2dParams p{s.stride, s.pad};
      const double ws = 1.0 / std::sqrt(double(s.C));
      Tensor x = rand({s.N, s.C, s.H, s.W}), w = rand({s.K, s.C, 1, 1}, -ws, ws);
      Tensor dy = rand({s.N, s.K, s.OH(), s.OW()});
      Tensor yr = rout({s.N, s.K, s.OH(), s.OW()}), dxr = rout({s.N, s.C, s.H, s.W});
      Tensor dwr = rout({s.K, s.C, 1, 1});
      ref.conv2d_fwd(p, ref_input(x, d, NHWC), ref_input(w, d, NCHW), yr);
      ref.conv2d_bwd_data(p, ref_input(dy, d, NHWC), ref_input(w, d, NCHW), dxr);
      ref.conv2d_bwd_weights(p, ref_input(x, d, NHWC), ref_input(dy, d, NHWC), dwr);
      for (Layout wl : {NCHW, NHWC}) {
        const std::string wn = std::string("(weights ") + layout_name(wl) + ")";
        Tensor y = out({s.N, s.K, s.OH(), s.OW()}, d, NHWC);
        be_->conv2d_fwd(p, upload(*be_, x, d, NHWC), upload(*be_, w, d, wl), y);
        check("conv2d_fwd y " + wn, y, yr, d);
        Tensor dx = out({s.N, s.C, s.H, s.W}, d, NHWC);
        be_->conv2d_bwd_data(p, upload(*be_, dy, d, NHWC), upload(*be_, w, d, wl), dx);
        check("conv2d_bwd_data dx " + wn, dx, dxr, d);
        Tensor dw = out({s.K, s.C, 1, 1}, d, wl);
        be_->conv2d_bwd_weights(p, upload(*be_, x, d, NHWC), upload(*be_, dy, d, NHWC), dw);
        check("conv2d_bwd_weights dw " + wn, dw, dwr, d);
      }
    }
  }
}

// A stride-2 data gradient lands only on the even rows and columns: the rest must be zero,
// also when dx held other values before (a reused activation-gradient buffer).
TEST_F(Conv1x1Matmul, StridedDataGradientZeroesTheSkippedPositions) {
  AlgoScope forced(ConvAlgo::matmul);
  const Conv2dParams p{2, 0};
  Tensor dy = rand({1, 8, 3, 3}), w = rand({8, 16, 1, 1});
  Tensor dx = out({1, 16, 5, 5}, DType::f32, NHWC);
  be_->conv2d_bwd_data(p, upload(*be_, dy, DType::f32, NHWC),
                       upload(*be_, w, DType::f32, NCHW), dx);
  const Tensor h = convert(download(*be_, dx), F64, NCHW);
  int nonzero_even = 0;
  for (int64_t c = 0; c < 16; ++c)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        const double v = h.data_as<double>()[(c * 5 + i) * 5 + j];
        if (i % 2 || j % 2)
          EXPECT_EQ(v, 0.0) << "c " << c << " row " << i << " col " << j;
        else
          nonzero_even += v != 0.0;
      }
  EXPECT_GT(nonzero_even, 0) << "the strided positions got no gradient";
}

// ---------------------------------------------------------------- routing

Tensor meta(std::vector<int64_t> shape, DType d, Layout l) {
  return Tensor::empty(std::move(shape), d, l);
}

TEST(ConvAlgoPolicy, WhichConvsRunAsMatmuls) {
  constexpr DType B = DType::bf16, F = DType::f32;
  const Tensor x = meta({2, 64, 8, 8}, B, NHWC), y = meta({2, 32, 8, 8}, B, NHWC);
  const Tensor w1 = meta({32, 64, 1, 1}, B, NCHW), w3 = meta({32, 64, 3, 3}, B, NCHW);
  const Tensor xc = meta({2, 64, 8, 8}, B, NCHW), yc = meta({2, 32, 8, 8}, B, NCHW);
  const Tensor xf = meta({2, 64, 8, 8}, F, NHWC), yf = meta({2, 32, 8, 8}, F, NHWC);
  const Conv2dParams s1{1, 0}, s2{2, 0}, pad1{1, 1};
  const ConvDir dirs[] = {ConvDir::fwd, ConvDir::bwd_data, ConvDir::bwd_weights};
  {
    AlgoScope a(ConvAlgo::matmul);
    for (ConvDir dir : dirs) {
      EXPECT_TRUE(onednn::conv1x1_as_matmul(dir, s1, x, w1, y));
      EXPECT_TRUE(onednn::conv1x1_as_matmul(dir, s2, x, w1, y));
      EXPECT_TRUE(onednn::conv1x1_as_matmul(dir, s1, xf, w1, yf));
      EXPECT_FALSE(onednn::conv1x1_as_matmul(dir, s1, xc, w1, yc)) << "NCHW activations";
      EXPECT_FALSE(onednn::conv1x1_as_matmul(dir, s1, x, w3, y)) << "3x3";
      EXPECT_FALSE(onednn::conv1x1_as_matmul(dir, pad1, x, w1, y)) << "padded 1x1";
    }
  }
  {
    AlgoScope a(ConvAlgo::direct);
    for (ConvDir dir : dirs) EXPECT_FALSE(onednn::conv1x1_as_matmul(dir, s1, x, w1, y));
    EXPECT_FALSE(onednn::conv_winograd_allowed());
  }
  {
    AlgoScope a(ConvAlgo::automatic);
    EXPECT_TRUE(onednn::conv_winograd_allowed());
    const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    const bool has_amx = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
    EXPECT_FALSE(onednn::conv1x1_as_matmul(ConvDir::fwd, s1, x, w1, y)) << "forward stays direct";
    for (ConvDir dir : dirs) EXPECT_FALSE(onednn::conv1x1_as_matmul(dir, s1, xf, w1, yf)) << "f32";
    EXPECT_EQ(onednn::conv1x1_as_matmul(ConvDir::bwd_data, s1, x, w1, y), has_amx);
    EXPECT_EQ(onednn::conv1x1_as_matmul(ConvDir::bwd_weights, s2, x, w1, y), has_amx);
  }
}

}  // namespace
}  // namespace rn50::test
