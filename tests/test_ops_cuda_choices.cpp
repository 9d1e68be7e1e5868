// The CUDA backend's convolution algorithm policy, memo, cache file and log
// (src/backend/cuda/conv_choices.h), without a GPU: the fastest deterministic result unless
// RN50_CUDNN_NONDET, the fastest rejected alternative named with its reason, choices persisted
// per GPU, cuDNN version and switch, damaged cache lines skipped, one log line per plan.
// Host-logic tests: --gtest_filter='*HostCalls*' selects them with the others of their kind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef RN50_HAVE_CUDA
#include "backend/cuda/conv_choices.h"
#endif

namespace rn50 {
namespace {

#ifdef RN50_HAVE_CUDA
using cuda::Choice;
using cuda::ChoiceStore;
using cuda::pick_result;
using cuda::SearchResult;

/// For its lifetime, RN50_CUDNN_NONDET reads `v`.
struct Nondet {
  explicit Nondet(bool v) { cuda::set_cudnn_nondeterministic(v); }
  ~Nondet() { cuda::set_cudnn_nondeterministic(std::nullopt); }
};

SearchResult result(int algo, float ms, size_t ws, bool det = true, bool ok = true,
                    bool math_ok = true) {
  return {algo, ok, ok ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_NOT_SUPPORTED", ws, ms, 1,
          math_ok, det};
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::vector<std::string> v;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

TEST(CudaConvChoicesHostCalls, PolicyTakesTheFastestDeterministicUnlessAskedOtherwise) {
  const size_t cap = 1000;
  const std::vector<SearchResult> r = {
      result(0, 3.0f, 0),                           // deterministic, slow
      result(1, 1.0f, 100, /*det=*/false),          // fastest: atomics
      result(2, 2.0f, 10),                          // fastest deterministic
      result(3, 0.5f, 5000),                        // over the workspace cap
      result(4, 0.7f, 0, true, /*ok=*/false),       // not supported
      result(5, 0.8f, 0, true, true, /*math=*/false),  // TF32 where it is off
      result(6, -1.f, 0),                           // not timed
  };
  std::string rejected, why;
  auto c = pick_result(r, cap, false, &rejected, &why);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, 2);
  EXPECT_EQ(c->ws_bytes, 10u);
  EXPECT_FLOAT_EQ(c->ms, 2.0f);
  EXPECT_TRUE(c->deterministic);
  // The fastest result faster than the pick (the over-cap one) with its reason.
  EXPECT_NE(rejected.find("algo 3"), std::string::npos) << rejected;
  EXPECT_NE(rejected.find("workspace"), std::string::npos) << rejected;
  EXPECT_NE(why.find("CUDNN_STATUS_NOT_SUPPORTED"), std::string::npos) << why;

  rejected.clear();
  c = pick_result(r, cap, true, &rejected, nullptr);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, 1);
  EXPECT_FALSE(c->deterministic);
  EXPECT_NE(rejected.find("algo 3"), std::string::npos) << rejected;

  // Only the math-type result is faster than the deterministic pick when the cap allows 3.
  std::vector<SearchResult> r2 = {result(0, 2.0f, 0), result(1, 1.0f, 0, true, true, false)};
  rejected.clear();
  c = pick_result(r2, cap, false, &rejected, nullptr);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, 0);
  EXPECT_NE(rejected.find("math type"), std::string::npos) << rejected;

  // A non-deterministic result when no deterministic one qualifies; none at all: nullopt.
  c = pick_result({result(0, 1.0f, 0, false), result(1, 0.5f, 9999)}, cap, false, nullptr,
                  nullptr);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, 0);
  why.clear();
  EXPECT_FALSE(pick_result({result(0, 1.0f, 9999), result(1, 1.f, 0, true, false)}, cap, false,
                           nullptr, &why)
                   .has_value());
  EXPECT_NE(why.find("algo 0"), std::string::npos) << why;
  EXPECT_NE(why.find("algo 1"), std::string::npos) << why;
}

TEST(CudaConvChoicesHostCalls, CachePersistsChoicesPerGpuCudnnAndSwitch) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("rn50_conv_choices_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto cache = dir / "cudnn.cache", log = dir / "cudnn.log";
  const std::string gpu = "NVIDIA H100 80GB HBM3", key = "conv2d_fwd x=[...] in NHWC tf32=1";
  const Choice c{7, 4096, 1, 0.25f, true};
  {
    ChoiceStore s(cache.string(), log.string());
    EXPECT_FALSE(s.find(gpu, 91900, key).has_value());  // no file yet
    s.remember(gpu, 91900, key, c);
    auto hit = s.find(gpu, 91900, key);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->second, ChoiceStore::Source::memo);
    s.log("conv2d_fwd", key, "NHWC", "search", c,
          "algo 1 math 1 0.1 ms 0 bytes (non-deterministic)");
    s.log("conv2d_fwd", key, "NHWC", "memo", c, "");
  }
  ASSERT_EQ(lines_of(cache).size(), 1u);
  {
    ChoiceStore s(cache.string(), "");
    auto hit = s.find(gpu, 91900, key);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->second, ChoiceStore::Source::cache);
    EXPECT_EQ(hit->first.algo, 7);
    EXPECT_EQ(hit->first.ws_bytes, 4096u);
    EXPECT_EQ(hit->first.math, 1);
    EXPECT_EQ(s.cache_loaded(), 1);
    // Another GPU, another cuDNN, the other switch: searched again.
    EXPECT_FALSE(s.find("NVIDIA H200", 91900, key).has_value());
    EXPECT_FALSE(s.find(gpu, 91400, key).has_value());
    const Nondet nd(true);
    EXPECT_FALSE(s.find(gpu, 91900, key).has_value());
  }
  // A torn last line (a run cut while appending) is skipped, the rest kept.
  { std::ofstream(cache, std::ios::app) << "{\"entry\": \"NVIDIA H100 80GB HB"; }
  {
    ChoiceStore s(cache.string(), "");
    EXPECT_TRUE(s.find(gpu, 91900, key).has_value());
    EXPECT_EQ(s.cache_loaded(), 1);
    EXPECT_EQ(s.cache_skipped(), 1);
  }
  const std::vector<std::string> logged = lines_of(log);
  ASSERT_EQ(logged.size(), 2u);
  const auto j = nlohmann::json::parse(logged[0]);
  EXPECT_EQ(j.at("op"), "conv2d_fwd");
  EXPECT_EQ(j.at("source"), "search");
  EXPECT_EQ(j.at("algo"), 7);
  EXPECT_EQ(j.at("ws_bytes"), 4096);
  EXPECT_EQ(j.at("layout"), "NHWC");
  EXPECT_NE(j.at("fastest_rejected").get<std::string>().find("non-deterministic"),
            std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(logged[1]).contains("fastest_rejected"));
  std::filesystem::remove_all(dir);
}
#else
TEST(CudaConvChoicesHostCalls, NeedsTheCudaBackend) {
  GTEST_SKIP() << "built without the CUDA backend (no nvcc / cuDNN at configure time)";
}
#endif

}  // namespace
}  // namespace rn50
