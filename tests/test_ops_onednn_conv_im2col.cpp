// oneDNN backend: the weight gradient of KxK convolutions as im2col + matmuls
// (src/backend/cpu/conv_im2col.cpp).
//  * Under ConvAlgo::matmul every KxK conv's weight gradient on NHWC activations takes that path,
//    in f32 and bf16, on any CPU: checked against the float64 reference backend for 3x3 stride 1
//    and 2 (odd and even sizes), pad 0 on a non-square input, the stem's 7x7 stride 2 pad 3 with
//    3 channels and a 5x5 whose taps overhang both sides, with both weight layouts and dw
//    pre-filled with NaN, in one chunk and in many chunks with a shorter last one (a profile
//    counts the im2col chunks, so a test cannot pass on the direct path by accident).
//  * Routing: which convs take it under each policy (by default only bf16 on AMX CPUs with
//    outputs of at most 14x14 pixels; never 1x1, NCHW, mixed dtypes or with `direct`).
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_im2col.h"
#include "backend/cpu/onednn_backend.h"
#include "op_backend_fixture.h"
#include "rn50/backend.h"
#include "rn50/profile.h"

namespace rn50::test {
namespace {

using onednn::ConvAlgo;

/// Sets the policy (and the chunk size) for one scope, handing both back afterwards.
struct AlgoScope {
  explicit AlgoScope(ConvAlgo a, std::optional<size_t> chunk = std::nullopt) {
    onednn::set_conv_algo(a);
    onednn::set_im2col_chunk_bytes(chunk);
  }
  ~AlgoScope() {
    onednn::set_conv_algo(std::nullopt);
    onednn::set_im2col_chunk_bytes(std::nullopt);
  }
};

const ConvShape kShapes[] = {
    {"3x3 s1 pad 1", 2, 16, 9, 9, 24, 3, 1, 1},
    {"3x3 s2 pad 1 (odd)", 2, 16, 15, 15, 8, 3, 2, 1},
    {"3x3 s2 pad 1 (even)", 3, 8, 14, 14, 16, 3, 2, 1},
    {"3x3 s1 pad 0 (non-square)", 2, 8, 7, 10, 12, 3, 1, 0},
    {"7x7 s2 pad 3 (stem, C=3)", 2, 3, 23, 23, 16, 7, 2, 3},
    {"5x5 s1 pad 2 (overhanging taps)", 1, 4, 6, 6, 4, 5, 1, 2},
};

std::vector<DType> dtypes() {
  std::vector<DType> v{DType::f32};
  if (onednn::OnednnBackend::bf16_available()) v.push_back(DType::bf16);
  return v;
}

/// The im2col chunks an active profiler counted.
int64_t im2col_calls(const OpProfiler& p) {
  for (const OpProfiler::Row& r : p.rows())
    if (r.op == "im2col activations (conv bwd_weights)") return r.calls;
  return 0;
}

class ConvIm2col : public ::testing::Test {
 protected:
  void SetUp() override { be_ = make_backend("onednn"); }
  Tensor rand(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    return random_tensor(std::move(shape), rng_, lo, hi, F32, NCHW);
  }
  std::unique_ptr<Backend> be_;
  std::mt19937_64 rng_{20261126};
};

TEST_F(ConvIm2col, WeightGradientMatchesTheReference) {
  Backend& ref = ref_backend();
  for (DType d : dtypes()) {
    for (const ConvShape& s : kShapes) {
      const Conv2dParams p{s.stride, s.pad};
      Tensor x = rand({s.N, s.C, s.H, s.W}), dy = rand({s.N, s.K, s.OH(), s.OW()});
      Tensor dwr = Tensor::empty({s.K, s.C, s.R, s.R}, F64);
      ref.conv2d_bwd_weights(p, ref_input(x, d, NHWC), ref_input(dy, d, NHWC), dwr);
      const int64_t P = s.N * s.OH() * s.OW();
      const size_t row_bytes = static_cast<size_t>(s.R * s.R * s.C) * dtype_size(d);
      // One chunk (the default size), then rows of 16 (at least 2 chunks, the last shorter
      // unless 16 divides P).
      for (std::optional<size_t> chunk : {std::optional<size_t>(), std::optional(row_bytes)}) {
        AlgoScope forced(ConvAlgo::matmul, chunk);
        const int64_t rows = chunk ? std::min<int64_t>(16, P) : P;
        const int64_t chunks = (P + rows - 1) / rows;
        for (Layout wl : {NCHW, NHWC}) {
          SCOPED_TRACE(std::string(s.name) + " " + dtype_name(d) + " weights " + layout_name(wl) +
                       " chunks " + std::to_string(chunks));
          Tensor dw = nan_output(*be_, {s.K, s.C, s.R, s.R}, d, wl);
          OpProfiler prof;
          {
            OpProfiler::Activation on(prof);
            be_->conv2d_bwd_weights(p, upload(*be_, x, d, NHWC), upload(*be_, dy, d, NHWC), dw);
          }
          EXPECT_EQ(im2col_calls(prof), chunks) << "the im2col path, chunk by chunk";
          EXPECT_TRUE(all_close(std::string("conv2d_bwd_weights dw ") + dtype_name(d),
                                download(*be_, dw), dwr, for_dtype(kConv, d)));
        }
      }
    }
  }
}

// ---------------------------------------------------------------- routing

Tensor meta(std::vector<int64_t> shape, DType d, Layout l) {
  return Tensor::empty(std::move(shape), d, l);
}

TEST(ConvIm2colPolicy, WhichWeightGradientsRunAsIm2col) {
  constexpr DType B = DType::bf16, F = DType::f32;
  const Conv2dParams s1{1, 1}, s2{2, 1};
  // 256 -> 256 at 14x14 (ResNet-50 layer3) and 128 -> 128 at 28x28 (layer2), bf16 NHWC.
  const Tensor x14 = meta({2, 256, 14, 14}, B, NHWC), dy14 = meta({2, 256, 14, 14}, B, NHWC);
  const Tensor x28 = meta({2, 128, 28, 28}, B, NHWC), dy28 = meta({2, 128, 28, 28}, B, NHWC);
  const Tensor dys2 = meta({2, 128, 14, 14}, B, NHWC);
  const Tensor w3 = meta({256, 256, 3, 3}, B, NCHW), w3b = meta({128, 128, 3, 3}, B, NCHW);
  const Tensor w1 = meta({256, 256, 1, 1}, B, NCHW);
  const Tensor xf = meta({2, 256, 14, 14}, F, NHWC), dyf = meta({2, 256, 14, 14}, F, NHWC);
  const Tensor wf = meta({256, 256, 3, 3}, F, NCHW);
  const Tensor xc = meta({2, 256, 14, 14}, B, NCHW), dyc = meta({2, 256, 14, 14}, B, NCHW);
  {
    AlgoScope a(ConvAlgo::matmul);
    EXPECT_TRUE(onednn::conv_bwd_weights_as_im2col(s1, x14, w3, dy14));
    EXPECT_TRUE(onednn::conv_bwd_weights_as_im2col(s1, x28, w3b, dy28));
    EXPECT_TRUE(onednn::conv_bwd_weights_as_im2col(s1, xf, wf, dyf)) << "f32 too";
    EXPECT_FALSE(onednn::conv_bwd_weights_as_im2col({1, 0}, x14, w1, dy14)) << "1x1";
    EXPECT_FALSE(onednn::conv_bwd_weights_as_im2col(s1, xc, w3, dyc)) << "NCHW";
    EXPECT_FALSE(onednn::conv_bwd_weights_as_im2col(s1, xf, w3, dy14)) << "mixed dtypes";
  }
  {
    AlgoScope a(ConvAlgo::direct);
    EXPECT_FALSE(onednn::conv_bwd_weights_as_im2col(s1, x14, w3, dy14));
  }
  {
    AlgoScope a(ConvAlgo::automatic);
    const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    const bool has_amx = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
    EXPECT_EQ(onednn::conv_bwd_weights_as_im2col(s1, x14, w3, dy14), has_amx) << "14x14";
    EXPECT_EQ(onednn::conv_bwd_weights_as_im2col(s2, x28, w3b, dys2), has_amx)
        << "stride 2 to 14x14";
    EXPECT_FALSE(onednn::conv_bwd_weights_as_im2col(s1, x28, w3b, dy28)) << "28x28 stays direct";
    // f32: im2col on CPUs without AVX-512 (every shape); with it Winograd for stride 1,
    // direct for the stem, im2col for the stride-2 3x3s.
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    const bool has_avx512 =
        (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx512) == avx512;
    EXPECT_EQ(onednn::conv_bwd_weights_as_im2col(s1, xf, wf, dyf), !has_avx512) << "f32";
    EXPECT_FALSE(onednn::conv_bwd_weights_as_im2col({1, 0}, xf, w1, dyf)) << "f32 1x1";
    const Tensor xf28 = meta({2, 256, 28, 28}, F, NHWC);
    EXPECT_TRUE(onednn::conv_bwd_weights_as_im2col(s2, xf28, wf, dyf)) << "f32 3x3 stride 2";
    const Tensor xstem = meta({2, 3, 56, 56}, F, NHWC), dystem = meta({2, 64, 28, 28}, F, NHWC);
    const Tensor wstem = meta({64, 3, 7, 7}, F, NCHW);
    EXPECT_EQ(onednn::conv_bwd_weights_as_im2col({2, 3}, xstem, wstem, dystem), !has_avx512)
        << "f32 stem";
  }
}

}  // namespace
}  // namespace rn50::test
