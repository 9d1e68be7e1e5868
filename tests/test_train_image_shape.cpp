// --image-shape C,H,W (DLE Paddle/MXNet): the flag, the 4-channel network (a zero fourth input
// channel, the stem conv with 4 input channels) and its weights:
//  * parsing and refusals (C not 3/4, H != W, a conflicting --crop-size, 4 channels with NCHW);
//  * normalize_u8 into 4 channels writes a zero fourth channel (every backend: the op harness);
//  * a 4-channel model holding a 3-channel model's weights (conv1.weight padded with a zero
//    slice on load) gives the 3-channel model's logits and gradients (to f32 rounding: the
//    convolution sums one more zero product), and its state_dict drops back to the 3-channel
//    weights exactly;
//  * the same under QAT (the input quantizer's copy has the input layer's 4 channels);
//  * a training run with --image-shape 4,32,32 checkpoints a [64, 4, 7, 7] conv1.weight, resumes
//    and evaluates only with the same --image-shape, evaluation going through the RGB inference
//    engine.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "model/input_stage.h"
#include "model/weights.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/train.h"
#include "step_test_util.h"
#include "test_train_util.h"
#include "config/config.h"
#include "config/flags.h"

namespace rn50 {
namespace {

using rn50_test::of_type;
using rn50_test::read_jsonl;
using rn50_test::TempDir;
namespace fs = std::filesystem;

Config parsed(const std::vector<std::pair<std::string, std::vector<std::string>>>& flags) {
  Config c;
  c.data = DataKind::synthetic;
  for (const auto& [name, values] : flags) set_flag(c, flag(name), values);
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ImageShape, FlagParsesAndRefuses) {
  Config c = parsed({{"--image-shape", {"4,64,64"}}});
  EXPECT_EQ(c.input_channels, 4);
  EXPECT_EQ(c.crop_size, 64);
  EXPECT_NO_THROW(validate(c));
  EXPECT_EQ(flag("--image-shape").get(c), nlohmann::ordered_json::array({4, 64, 64}));
  c = parsed({{"--image-shape", {"3", "96", "96"}}});
  EXPECT_EQ(c.input_channels, 3);
  EXPECT_EQ(c.crop_size, 96);
  EXPECT_NE(error_of([] {
              parsed({{"--image-shape", {"5,64,64"}}});
            }).find("C must be 3"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parsed({{"--image-shape", {"4,64,32"}}});
            }).find("must be equal"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parsed({{"--image-shape", {"4,64"}}});
            }).find("three integers"),
            std::string::npos);
  // --crop-size before or after a disagreeing --image-shape.
  EXPECT_NE(error_of([] {
              parsed({{"--crop-size", {"32"}}, {"--image-shape", {"4,64,64"}}});
            }).find("disagree"),
            std::string::npos);
  c = parsed({{"--image-shape", {"4,64,64"}}, {"--crop-size", {"32"}}});
  EXPECT_NE(error_of([&] { validate(c); }).find("disagree"), std::string::npos);
  c = parsed({{"--image-shape", {"4,64,64"}}, {"--crop-size", {"64"}}});
  EXPECT_NO_THROW(validate(c));
  c = parsed({{"--image-shape", {"4,64,64"}}, {"--data-layout", {"NCHW"}}});
  EXPECT_NE(error_of([&] { validate(c); }).find("NHWC"), std::string::npos);
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / std::max(den, 1e-30);
}

TEST(ImageShape, FourChannelModelEqualsRgbModel) {
  for (const std::string& name : available_backends()) {
    SCOPED_TRACE(name);
    auto be = make_backend(name);
    ModelOptions m3;
    m3.num_classes = 10;
    ModelOptions m4 = m3;
    m4.input_channels = 4;
    ResNet rgb(*be, kNet, m3), four(*be, kNet, m4);
    rgb.init(5);
    four.init(9);  // overwritten below
    std::map<std::string, Tensor> sd;
    for (auto& [k, t] : rgb.state_dict()) sd.emplace(k, t);
    four.load_state_dict(sd);
    // The padded stem weight: the RGB slices, then zeros.
    std::map<std::string, Tensor> sd4;
    for (auto& [k, t] : four.state_dict()) sd4.emplace(k, t);
    const Tensor w4 = with_input_channels(sd4.at("conv1.weight"), 4);
    ASSERT_EQ(w4.c(), 4);
    for (int64_t k = 0; k < w4.n(); ++k)
      for (int64_t r = 0; r < 7; ++r)
        for (int64_t s = 0; s < 7; ++s) ASSERT_EQ(w4.data_as<float>()[w4.offset4(k, 3, r, s)], 0.f);
    const Tensor back = with_input_channels(w4, 3);
    const Tensor w3 = with_input_channels(sd.at("conv1.weight"), 3);
    for (int64_t i = 0; i < w3.numel(); ++i)
      ASSERT_EQ(back.data_as<float>()[i], w3.data_as<float>()[i]) << "4 -> 3 is exact";

    const Batch b = random_batch(4, 32, 10, 11);
    InputStage in3(*be, Layout::NHWC, DType::f32, 10, 1),
        in4(*be, Layout::NHWC, DType::f32, 10, 1, {}, false, 4);
    in3.load(b);
    in4.load(b);
    ASSERT_EQ(in4.x().c(), 4);
    const std::vector<double> x4 = host_values(*be, in4.x());  // NCHW order
    const int64_t plane = 32 * 32;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < plane; ++i) ASSERT_EQ(x4[(n * 4 + 3) * plane + i], 0.0);
    const std::vector<double> z3 = host_values(*be, rgb.forward(in3.x(), true));
    const std::vector<double> z4 = host_values(*be, four.forward(in4.x(), true));
    EXPECT_LE(max_rel(z4, z3), 1e-5) << "the zero channel adds nothing";
  }
}

// QAT quantizes the network input in a copy shaped as the input layer (4 channels here: the
// schedule takes its shape from layer_shapes). On the reference backend (float64 sums, to
// which the zero channel adds exactly nothing) the logits are the RGB QAT model's, bit for bit.
TEST(ImageShape, FourChannelQatModelEqualsRgbModel) {
  auto be = make_backend("ref");
  ModelOptions m3;
  m3.num_classes = 10;
  m3.qat = true;
  ModelOptions m4 = m3;
  m4.input_channels = 4;
  ResNet rgb(*be, kNet, m3), four(*be, kNet, m4);
  rgb.init(5);
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : rgb.state_dict()) sd.emplace(k, t);
  four.load_state_dict(sd);
  const Batch b = random_batch(2, 32, 10, 11);
  InputStage in3(*be, Layout::NHWC, DType::f32, 10, 1),
      in4(*be, Layout::NHWC, DType::f32, 10, 1, {}, false, 4);
  in3.load(b);
  in4.load(b);
  const std::vector<double> z3 = host_values(*be, rgb.forward(in3.x(), true));
  const std::vector<double> z4 = host_values(*be, four.forward(in4.x(), true));
  EXPECT_EQ(z4, z3);
}

TEST(ImageShape, TrainCheckpointResumeAndEval) {
  TempDir tmp("image_shape");
  Config c;
  c.data = DataKind::synthetic;
  c.synthetic_samples = 16;
  c.num_classes = 4;
  c.arch = "resnet18";
  c.batch_size = 8;
  c.epochs = 1;
  c.warmup_epochs = 0;
  c.run_scope = RunScope::train_only;
  c.checkpoint_dir = (tmp.path / "ckpt").string();
  c.report_file = (tmp.path / "r.jsonl").string();
  set_flag(c, flag("--image-shape"), {"4,32,32"});
  ASSERT_EQ(run_train(c), 0);
  const auto cfg = read_jsonl(c.report_file).front();
  EXPECT_EQ(cfg["image_shape"], nlohmann::json::array({4, 32, 32}));
  for (const auto& s : of_type(read_jsonl(c.report_file), "step"))
    EXPECT_TRUE(std::isfinite(s["train.loss"].get<double>()));
  const fs::path ck = tmp.path / "ckpt" / "resnet18" / "0";
  const SafeTensorsFile f = load_safetensors((ck / "model.safetensors").string());
  EXPECT_EQ(f.tensors.at("conv1.weight").shape(), (std::vector<int64_t>{64, 4, 7, 7}));

  // Resuming with 3 channels is refused, naming the flag.
  Config r = c;
  r.input_channels = 3;
  r.image_shape_hw = 0;
  r.given.clear();
  r.epochs = 2;
  r.from_checkpoint = (tmp.path / "ckpt" / "resnet18").string();
  r.report_file.clear();
  ::testing::internal::CaptureStderr();
  EXPECT_NE(run_train(r), 0) << "resumed with another input shape";
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("pass the same --image-shape"), std::string::npos) << err;
  // Evaluation with the same shape: through the RGB inference engine on the CPU (the zero
  // channel's weights dropped); with another shape it is refused like resuming.
  for (int channels : {4, 3}) {
    Config e;
    e.data = DataKind::synthetic;
    e.synthetic_samples = 8;
    e.num_classes = 4;
    e.arch = "resnet18";
    e.batch_size = 8;
    e.crop_size = 32;
    e.input_channels = channels;
    e.from_checkpoint = ck.string();
    e.report_file = (tmp.path / ("eval" + std::to_string(channels) + ".jsonl")).string();
    if (channels == 3) {
      ::testing::internal::CaptureStderr();
      EXPECT_NE(run_eval(e), 0);
      const std::string eerr = ::testing::internal::GetCapturedStderr();
      EXPECT_NE(eerr.find("pass the same --image-shape"), std::string::npos) << eerr;
      continue;
    }
    EXPECT_EQ(run_eval(e), 0) << channels;
    const auto ev = of_type(read_jsonl(e.report_file), "eval");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_TRUE(std::isfinite(ev[0]["val.loss"].get<double>()));
  }
}

}  // namespace
}  // namespace rn50
