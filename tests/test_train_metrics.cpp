// Host metrics: top-1/top-5 from logits (deterministic ties), smoothed cross-entropy, softmax,
// throughput meter.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "train/metrics.h"

using namespace rn50;

TEST(TrainMetrics, TopkOnHandMadeLogits) {
  // 4 samples x 7 classes.
  const std::vector<float> lg = {
      0.1f, 0.9f, 0.3f, 0.2f, 0.0f, -1.f, 0.5f,   // order 1,6,2,3,0,4,5
      5.f,  4.f,  3.f,  2.f,  1.f,  0.f,  -1.f,   // order 0..6
      0.f,  0.f,  0.f,  0.f,  0.f,  0.f,  1.f,    // 6 first, then ties 0,1,2,...
      -3.f, -2.f, -1.f, -4.f, -5.f, -6.f, -7.f};  // order 2,1,0,3,4,5,6
  const std::vector<int32_t> labels = {1, 5, 3, 3};
  EXPECT_EQ(label_rank(lg.data() + 0, 7, 1), 0);
  EXPECT_EQ(label_rank(lg.data() + 7, 7, 5), 5);
  EXPECT_EQ(label_rank(lg.data() + 14, 7, 3), 4);  // 6, then ties broken by index: 0,1,2,3
  EXPECT_EQ(label_rank(lg.data() + 21, 7, 3), 3);
  TopkCounts c = topk_correct(lg.data(), 4, 7, labels.data());
  EXPECT_EQ(c.top1, 1);
  EXPECT_EQ(c.top5, 3);  // ranks 0, 5, 4, 3
  EXPECT_EQ(topk_indices(lg.data() + 14, 7, 5), (std::vector<int64_t>{6, 0, 1, 2, 3}));
  EXPECT_EQ(topk_indices(lg.data(), 7, 3), (std::vector<int64_t>{1, 6, 2}));
}

TEST(TrainMetrics, AllTiedAndNaN) {
  std::vector<float> lg(10, 0.25f);
  // All equal: class j has rank j (lower index first), so only classes 0..4 are in the top 5.
  for (int j = 0; j < 10; ++j) EXPECT_EQ(label_rank(lg.data(), 10, j), j);
  lg[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(label_rank(lg.data(), 10, 7), 10);  // a NaN label logit is never correct
  EXPECT_EQ(label_rank(lg.data(), 10, 8), 7);   // a NaN elsewhere does not outrank
  auto idx = topk_indices(lg.data(), 10, 10);
  EXPECT_EQ(idx.back(), 7);  // NaN sorts last
  EXPECT_THROW(label_rank(lg.data(), 10, 10), std::exception);
}

TEST(TrainMetrics, TopkMatchesSortOnRandomLogits) {
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  const int n = 50, k = 20;
  std::vector<float> lg(n * k);
  std::vector<int32_t> lab(n);
  for (auto& v : lg) v = nd(g);
  for (auto& v : lab) v = static_cast<int32_t>(g() % k);
  int64_t t1 = 0, t5 = 0;
  for (int i = 0; i < n; ++i) {
    auto idx = topk_indices(lg.data() + i * k, k, 5);
    t1 += idx[0] == lab[i];
    t5 += std::find(idx.begin(), idx.end(), lab[i]) != idx.end();
  }
  TopkCounts c = topk_correct(lg.data(), n, k, lab.data());
  EXPECT_EQ(c.top1, t1);
  EXPECT_EQ(c.top5, t5);
}

TEST(TrainMetrics, Softmax) {
  const std::vector<float> lg = {1.5f, -0.25f, 0.75f, 2.0f};
  const int k = 4;
  double m = 2.0, s = 0;
  for (float v : lg) s += std::exp(v - m);
  const double lse = m + std::log(s);
  std::vector<float> p(k);
  softmax_row(lg.data(), k, p.data());
  double sum = 0;
  for (int j = 0; j < k; ++j) {
    EXPECT_NEAR(p[j], std::exp(lg[j] - lse), 1e-6);
    sum += p[j];
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(TrainMetrics, MetricSumsWeightBySamples) {
  MetricSums m;
  EXPECT_TRUE(std::isnan(m.loss()));
  m.add_loss(2.0, 10);
  m.add_loss(1.0, 30);
  EXPECT_DOUBLE_EQ(m.loss(), 1.25);
  m.add_topk({3, 7}, 10);
  m.add_topk({1, 2}, 6);
  EXPECT_DOUBLE_EQ(m.top1_pct(), 25.0);
  EXPECT_DOUBLE_EQ(m.top5_pct(), 56.25);
}

TEST(TrainMetrics, ThroughputExcludesWarmup) {
  ThroughputMeter t(2);
  t.start();
  for (int i = 0; i < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // slow warmup steps
    t.step(8, 0.01, 0.02);
  }
  EXPECT_EQ(t.ips(), 0.0);
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    t.step(8, 0.001, 0.009);
  }
  EXPECT_EQ(t.measured_steps(), 3);
  EXPECT_EQ(t.measured_images(), 24);
  EXPECT_GE(t.measured_seconds(), 0.030);
  EXPECT_LT(t.measured_seconds(), 0.060 + 0.5);  // generous: loaded machines
  EXPECT_NEAR(t.ips(), 24 / t.measured_seconds(), 1e-9);
  EXPECT_NEAR(t.mean_data_time(), (0.02 + 0.003) / 5, 1e-12);
  EXPECT_NEAR(t.mean_compute_time(), (0.04 + 0.027) / 5, 1e-12);
}
