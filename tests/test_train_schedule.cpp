// LR schedule: DLE linear warmup + per-step cosine, exactly torch_reference.py's lr_at.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <sstream>

#include "test_train_util.h"
#include "train/lr_schedule.h"
#include "require.h"

using rn50::LrSchedule;

TEST(TrainSchedule, BaseLrScalesWithGlobalBatch) {
  EXPECT_DOUBLE_EQ(LrSchedule::make(0.256, 256, 5, 90, 100).base_lr, 0.256);
  EXPECT_DOUBLE_EQ(LrSchedule::make(0.256, 1024, 5, 90, 100).base_lr, 1.024);
  EXPECT_DOUBLE_EQ(LrSchedule::make(0.256, 64, 5, 90, 100).base_lr, 0.064);
}

TEST(TrainSchedule, WarmupPeakAndCosineEnd) {
  // DLE defaults: 90 epochs, 5 warmup epochs, 5004 steps per epoch (ImageNet at batch 256).
  const int64_t spe = 5004;
  LrSchedule s = LrSchedule::make(0.256, 256, 5, 90, spe);
  const int64_t warm = 5 * spe, total = 90 * spe;
  EXPECT_DOUBLE_EQ(s.at(0), 0.256 / warm);
  EXPECT_DOUBLE_EQ(s.at(99), 0.256 * 100 / warm);
  // Linear warmup: increments are constant.
  EXPECT_NEAR(s.at(1000) - s.at(999), 0.256 / warm, 1e-15);
  // Last warmup step reaches the peak; the first cosine step is the peak too (cos 0 = 1).
  EXPECT_DOUBLE_EQ(s.at(warm - 1), 0.256);
  EXPECT_DOUBLE_EQ(s.at(warm), 0.256);
  // Half-way through the cosine: base / 2.
  EXPECT_NEAR(s.at(warm + (total - warm) / 2), 0.128, 1e-12);
  // Monotone decrease after the peak, towards 0 at the last step.
  for (int64_t st = warm; st + 1 < total; st += 997) EXPECT_GT(s.at(st), s.at(st + 1));
  const double last = s.at(total - 1);
  EXPECT_GT(last, 0.0);
  EXPECT_LT(last, 1e-9);
  EXPECT_NEAR(last, 0.5 * 0.256 * (1 + std::cos(std::numbers::pi * (total - 1 - warm) /
                                                 static_cast<double>(total - warm))),
              1e-18);
}

TEST(TrainSchedule, NoWarmupStartsAtPeak) {
  LrSchedule s = LrSchedule::make(0.1, 256, 0, 10, 7);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_LT(s.at(1), 0.1);
}

TEST(TrainSchedule, FractionalWarmupAndDegenerateSpan) {
  LrSchedule s = LrSchedule::make(0.256, 128, 0.5, 1, 10);  // warm 5 steps, total 10
  EXPECT_DOUBLE_EQ(s.at(0), 0.128 / 5);
  EXPECT_DOUBLE_EQ(s.at(4), 0.128);
  // warmup == total: max(1, total - warm) keeps the division finite.
  LrSchedule d = LrSchedule::make(0.256, 256, 2, 2, 3);
  EXPECT_TRUE(std::isfinite(d.at(6)));
}

// Step-exact agreement with shared/peers/torch_reference.py's lr_at, evaluated by Python.
TEST(TrainSchedule, MatchesTorchReferenceExactly) {
  const std::string peer = std::string(RN50_SOURCE_DIR) + "/../shared/peers";
  RN50_REQUIRE_OR_SKIP("data", rn50_test::fs::exists(peer + "/torch_reference.py"),
                       "no " << peer << "/torch_reference.py (../shared beside the repo)");
  RN50_REQUIRE_OR_SKIP("torch", rn50_test::python_has("torch"),
                       rn50::test::python() << " has no torch");
  struct Case {
    double lr, warmup;
    int bs, epochs;
    int64_t spe;
  };
  const Case cases[] = {{0.256, 5, 256, 90, 5004}, {0.256, 1, 64, 3, 147}, {0.1, 0.5, 32, 4, 13},
                        {0.256, 0, 8, 2, 9}};
  // One Python process for every case (importing torch is slow on a loaded machine).
  std::ostringstream py;
  py << "import sys; sys.path.insert(0, '" << peer << "'); import torch_reference as t\n"
     << "from types import SimpleNamespace as N\n";
  std::vector<std::vector<int64_t>> all_steps;
  for (const Case& c : cases) {
    const int64_t total = c.epochs * c.spe;
    std::vector<int64_t> steps;
    for (int64_t st = 0; st < total; st += std::max<int64_t>(1, total / 211)) steps.push_back(st);
    steps.push_back(total - 1);
    py << "a = N(lr=" << c.lr << ", batch_size=" << c.bs << ", warmup_epochs=" << c.warmup
       << ", epochs=" << c.epochs << ")\n"
       << "for s in [";
    for (int64_t st : steps) py << st << ",";
    py << "]: print(repr(t.lr_at(s, " << c.spe << ", a)))\n";
    all_steps.push_back(steps);
  }
  std::string out;
  ASSERT_EQ(rn50_test::run_command(
                std::string(rn50::test::python()) + " -c " + rn50_test::sh_quote(py.str()), &out),
            0)
      << out;
  std::istringstream in(out);
  for (size_t ci = 0; ci < std::size(cases); ++ci) {
    const Case& c = cases[ci];
    LrSchedule s = LrSchedule::make(c.lr, c.bs, c.warmup, c.epochs, c.spe);
    for (int64_t st : all_steps[ci]) {
      double want = 0;
      ASSERT_TRUE(in >> want) << out;
      const double got = s.at(st);
      // The same IEEE operations in the same order: equal to the last ulp or two.
      EXPECT_NEAR(got, want, 2 * std::abs(want) * 2.3e-16)
          << "lr=" << c.lr << " bs=" << c.bs << " warmup=" << c.warmup << " step " << st;
    }
  }
}

// The other DLE policies and --warmup-start-lr (train/lr_schedule.h): 10 steps per epoch,
// 2 warmup epochs, 10 epochs, base 0.1 (global batch 256).
TEST(TrainSchedule, StepLinearConstantAndWarmupStart) {
  LrSchedule s = LrSchedule::make(0.1, 256, 2, 10, 10);
  s.warmup_start_lr = 0.02;
  EXPECT_DOUBLE_EQ(s.at(0), 0.02 + 0.08 * 1 / 20.0);
  EXPECT_DOUBLE_EQ(s.at(19), 0.1);  // the last warmup step reaches the peak
  s.warmup_start_lr = 0;
  EXPECT_DOUBLE_EQ(s.at(0), 0.1 / 20.0);

  s.policy = "constant";
  EXPECT_DOUBLE_EQ(s.at(20), 0.1);
  EXPECT_DOUBLE_EQ(s.at(99), 0.1);

  s.policy = "linear";  // t = (step - 20) / 80
  EXPECT_DOUBLE_EQ(s.at(20), 0.1);
  EXPECT_DOUBLE_EQ(s.at(60), 0.05);
  EXPECT_NEAR(s.at(99), 0.1 * (1 - 79 / 80.0), 1e-15);

  s.policy = "step";
  s.decay_epochs = {3, 6.5};
  s.decay_rate = 0.1;
  EXPECT_DOUBLE_EQ(s.at(29), 0.1);      // epoch 2.9
  EXPECT_NEAR(s.at(30), 0.01, 1e-15);   // epoch 3: first decay
  EXPECT_NEAR(s.at(64), 0.01, 1e-15);   // epoch 6.4
  EXPECT_NEAR(s.at(65), 0.001, 1e-15);  // epoch 6.5
  EXPECT_NEAR(s.at(99), 0.001, 1e-15);

  s.policy = "cosine";  // unchanged default
  EXPECT_DOUBLE_EQ(s.at(60), 0.05);
}
