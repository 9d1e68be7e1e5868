// Op harness (see op_backend_fixture.h), input and memory ops: normalize_u8 (u8 NHWC images to
// the compute dtype and layout, also into a 4-channel destination), copy (host to device, device
// to device with a layout change, 1-D) and zero. Also the harness's own checks: whether the CUDA
// backend took part (a skip with the reason, never a silent pass) and that oneDNN is under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "op_backend_fixture.h"
#include "rn50/backend.h"
#include "require.h"

namespace rn50::test {
namespace {

// ---------------------------------------------------------------- input

TEST_P(OpsBackend, NormalizeU8) {
  REQUIRE_OP(Op::normalize_u8);
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{2, 3, 17, 19}, std::vector<int64_t>{1, 3, 64, 64}}) {
    Tensor src = Tensor::empty(shape, DType::u8, NHWC);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int64_t i = 0; i < src.numel(); ++i) src.data_as<uint8_t>()[i] = uint8_t(byte(rng_));
    Tensor srcd = be().alloc(shape, DType::u8, NHWC);
    be().copy(src, srcd);
    Tensor dst = out(shape, dt(), lay());
    be().normalize_u8(srcd, mean, stdv, dst);
    Tensor dstr = rout(shape, lay());
    ref().normalize_u8(src, mean, stdv, dstr);
    check("normalize_u8 dst", dst, dstr, tol(kNormalize));
    // A 4-channel destination (--image-shape 4,H,W): the same three channels and a zero fourth.
    const std::vector<int64_t> shape4{shape[0], 4, shape[2], shape[3]};
    Tensor dst4 = out(shape4, dt(), lay());
    be().normalize_u8(srcd, mean, stdv, dst4);
    Tensor d4 = convert(test::download(be(), dst4), F64, NCHW), d3 = convert(dstr, F64, NCHW);
    const int64_t plane = shape[2] * shape[3];
    Tensor first3 = rout(shape), want3 = d3;
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t i = 0; i < 3 * plane; ++i)
        first3.data_as<double>()[n * 3 * plane + i] = d4.data_as<double>()[n * 4 * plane + i];
    EXPECT_TRUE(all_close("normalize_u8 4-channel dst, channels 0-2 [" + cfg() + "]", first3,
                          want3, tol(kNormalize)));
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t i = 0; i < plane; ++i)
        ASSERT_EQ(d4.data_as<double>()[(n * 4 + 3) * plane + i], 0.0) << "the fourth channel";
  }
}

// torchvision's ToTensor() + Normalize() in float, (v / 255 - mean) / std, for every pixel value
// in every channel: the oneDNN backend's result has exactly those bits (f32), or those rounded
// once to bf16 (it looks them up in a table made with that formula).
TEST_P(OpsBackend, NormalizeU8GivesTheFloatFormulasBitsForEveryByte) {
  REQUIRE_OP(Op::normalize_u8);
  if (GetParam().backend != "onednn" || (dt() != F32 && dt() != DType::bf16))
    GTEST_SKIP() << "the oneDNN backend's f32 and bf16 destinations";
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, stdv{0.229f, 0.224f, 0.225f};
  const std::vector<int64_t> shape{1, 3, 16, 16};  // 256 pixels: each value once per channel
  Tensor src = Tensor::empty(shape, DType::u8, NHWC);
  for (int64_t i = 0; i < 256; ++i)
    for (int c = 0; c < 3; ++c) src.data_as<uint8_t>()[3 * i + c] = uint8_t((i + 85 * c) % 256);
  Tensor srcd = be().alloc(shape, DType::u8, NHWC);
  be().copy(src, srcd);
  Tensor dst = out(shape, dt(), lay());
  be().normalize_u8(srcd, mean, stdv, dst);
  const Tensor got = convert(test::download(be(), dst), F64, NCHW);
  for (int c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 256; ++i) {
      const int v = static_cast<int>((i + 85 * c) % 256);
      const float f = (static_cast<float>(v) / 255.f - mean[c]) / stdv[c];
      const double want = dt() == F32 ? double(f) : double(bf16_to_float(float_to_bf16(f)));
      ASSERT_EQ(got.data_as<double>()[c * 256 + i], want) << "channel " << c << " value " << v;
    }
}

// ---------------------------------------------------------------- memory

TEST_P(OpsBackend, CopyAndZero) {
  if (dt() != F32 && !be().supports(Op::conv2d, dt(), lay()))
    GTEST_SKIP() << GetParam().backend << " has no " << dtype_name(dt()) << " tensors";
  Tensor h = rand({2, 5, 3, 7});
  Tensor hd = convert(h, dt(), NCHW);
  Tensor a = be().alloc(h.shape(), dt(), lay());
  be().copy(hd, a);  // host NCHW -> device in the tested layout
  check("copy host -> device", a, rin(h, dt(), NCHW), kCopy);
  Tensor b = be().alloc(h.shape(), dt(), other());
  be().copy(a, b);  // device -> device, layout change
  check("copy device -> device (layout change)", b, rin(h, dt(), NCHW), kCopy);
  Tensor v = be().alloc({37}, dt());
  Tensor hv = convert(rand({37}), dt());
  be().copy(hv, v);
  check("copy 1-D", v, convert(hv, F64), kCopy);
  be().zero(b);
  check("zero", b, Tensor::zeros(h.shape(), F64), kCopy);
  Tensor bad = be().alloc({2, 5, 3, 6}, dt(), lay());
  EXPECT_ANY_THROW(be().copy(a, bad)) << "copy with a shape mismatch must throw";
}

RN50_INSTANTIATE_OPS_BACKEND();

// Says, in the test log, whether the CUDA backend took part: compiled but no GPU (CI) is a
// skip with the reason, never a silent pass.
TEST(OpsBackendCuda, CudaBackendPresence) {
  const auto built = compiled_backends();
  if (std::find(built.begin(), built.end(), "cuda") == built.end())
    GTEST_SKIP() << "CUDA backend not built: " << cuda_unavailable_reason();
  if (cuda_device_count() == 0) {  // braces: EXPECT_* is an if/else inside
    EXPECT_ANY_THROW(make_backend("cuda")) << "creating the cuda backend without a GPU must throw";
  }
  RN50_REQUIRE_OR_SKIP("gpu", cuda_device_count() > 0,
                       "CUDA backend built but not run (no usable GPU: "
                           << cuda_unavailable_reason() << "); the harness ran only the CPU backends");
  const auto avail = available_backends();
  EXPECT_NE(std::find(avail.begin(), avail.end(), "cuda"), avail.end());
}

// The harness must have something to test: the oneDNN backend is always built.
TEST(OpsBackendList, OnednnIsUnderTest) {
  bool onednn = false;
  for (const HarnessParam& p : harness_params()) onednn = onednn || p.backend == "onednn";
  EXPECT_TRUE(onednn) << "available_backends() lacks onednn: the op harness would test nothing";
}

}  // namespace
}  // namespace rn50::test
