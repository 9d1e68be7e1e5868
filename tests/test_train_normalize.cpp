// --normalize-mean / --normalize-std: the flags' checks, the input stage's arithmetic against
// the formula on random pixels, and a training run that records the normalisation in its
// checkpoint and inference model (and rn50 export carries it over).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "model/input_stage.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "test_train_util.h"
#include "config/flags.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

void expect_error(const char* flag, std::vector<std::string> values, const std::string& text) {
  Config c;
  try {
    set_flag(c, rn50::flag(flag), values);
    validate(c);  // range checks run here
    ADD_FAILURE() << flag << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Normalize, FlagChecks) {
  Config c;
  set_flag(c, flag("--normalize-mean"), {"0.5,0.5,0.5"});
  set_flag(c, flag("--normalize-std"), {"0.5", "0.25", "0.125"});
  EXPECT_EQ(c.normalize_mean, (std::array<double, 3>{0.5, 0.5, 0.5}));
  const Normalization n = normalization(c);
  EXPECT_FLOAT_EQ(n.std[2], 0.125f);
  EXPECT_EQ(config_to_json(c)["normalize_std"], nlohmann::json::array({0.5, 0.25, 0.125}));
  expect_error("--normalize-mean", {"0.5,0.5"}, "expected three numbers");
  expect_error("--normalize-std", {"0.2,0.2,0.2,0.2"}, "expected three numbers");
  expect_error("--normalize-std", {"0.2,-0.2,0.2"}, "must be > 0");
  expect_error("--normalize-std", {"0.2,0,0.2"}, "must be > 0");
  expect_error("--normalize-mean", {"0.5,1.5,0.5"}, "in [0, 1]");
  expect_error("--normalize-mean", {"0.5,x,0.5"}, "--normalize-mean");
}

TEST(Normalize, InputStageAppliesTheFormula) {
  auto be = make_backend("onednn");
  Normalization norm;
  norm.mean = {0.3f, 0.5f, 0.7f};
  norm.std = {0.1f, 0.2f, 0.4f};
  InputStage in(*be, Layout::NHWC, DType::f32, 10, 1, norm);
  Batch b;
  b.size = 2;
  b.images = Tensor::empty({2, 3, 4, 5}, DType::u8, Layout::NHWC);
  b.labels = Tensor::empty({2}, DType::i32);
  std::mt19937 rng(7);
  uint8_t* px = b.images.data_as<uint8_t>();
  for (int64_t i = 0; i < b.images.numel(); ++i) px[i] = static_cast<uint8_t>(rng() % 256);
  b.labels.data_as<int32_t>()[0] = 1;
  b.labels.data_as<int32_t>()[1] = 9;
  in.load(b);
  be->synchronize();
  const float* x = in.x().data_as<const float>();
  for (int64_t i = 0; i < b.images.numel(); ++i) {
    const int c = static_cast<int>(i % 3);  // NHWC: channel fastest
    const double want = (px[i] / 255.0 - norm.mean[c]) / norm.std[c];
    ASSERT_NEAR(x[i], want, 1e-5 * (1 + std::abs(want))) << i;
  }
}

TEST(Normalize, RecordedInCheckpointAndInferenceModel) {
  rn50_test::TempDir tmp("normalize");
  const std::string cli = RN50_CLI;
  const fs::path ckpt = tmp.path / "ckpt", inf = tmp.path / "inf", exp = tmp.path / "exp";
  std::string out;
  ASSERT_EQ(rn50_test::run_command(
                cli +
                    " train --data synthetic --synthetic-samples 8 --batch-size 4 --epochs 1 "
                    "--warmup-epochs 0 --arch resnet18 --crop-size 32 --resize-short 36 "
                    "--num-of-class 4 --normalize-mean 0.5,0.5,0.5 --normalize-std 0.25,0.25,0.25 "
                    "--checkpoint-dir " +
                    ckpt.string() + " --inference-dir " + inf.string(),
                &out),
            0)
      << out;
  auto preprocessing = [](const fs::path& dir) {
    std::ifstream f(dir / "model.json");
    return nlohmann::json::parse(f)["preprocessing"];
  };
  EXPECT_EQ(preprocessing(inf)["mean"], nlohmann::json::array({0.5, 0.5, 0.5}));
  EXPECT_EQ(preprocessing(inf)["std"], nlohmann::json::array({0.25, 0.25, 0.25}));
  ASSERT_EQ(rn50_test::run_command(cli + " export --format rn50 --from-checkpoint " +
                                       (ckpt / "resnet18").string() + " --output " + exp.string(),
                                   &out),
            0)
      << out;
  EXPECT_EQ(preprocessing(exp)["mean"], nlohmann::json::array({0.5, 0.5, 0.5}));
  EXPECT_EQ(preprocessing(exp)["std"], nlohmann::json::array({0.25, 0.25, 0.25}));
}

}  // namespace
}  // namespace rn50
