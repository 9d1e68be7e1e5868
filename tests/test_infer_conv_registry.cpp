// rn50 tests: the CPU inference engine's convolution list (src/backend/cpu/conv_infer_registry.h)
// and the engine choosing through it. The list follows the policy (RN50_CONV_ALGO), the rule
// table (conv_rules.h) and the pin (RN50_CONV_IMPL) as training's registry does; int8,
// calibration and batch-invariant engines get oneDNN's direct kernels only; every convolution of
// a plan is named in the profile and in RN50_CONV_LOG. The engine test also runs, in a child
// process, at AVX2 (ONEDNN_MAX_CPU_ISA), where oneDNN has no Winograd and our F(4x4, 3x3) on
// the nChw8c buffers takes those convolutions instead.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <dnnl.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_infer_registry.h"
#include "backend/cpu/conv_registry.h"
#include "backend/cpu/conv_rules.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "infer_test_util.h"
#include "rn50/inference.h"
#include "rn50/profile.h"
#include "sanitizer_build.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

using onednn::InferConvImpl;
using onednn::InferConvQuery;

/// A 3x3 stride-1 pad-1 convolution of c -> c channels at hw x hw, batch n.
InferConvQuery conv3x3(int64_t c, int64_t hw, int block, DType dt = DType::f32, int64_t n = 4) {
  InferConvQuery q;
  q.dt = dt;
  q.n = n;
  q.c = q.k = c;
  q.kernel = 3;
  q.stride = 1;
  q.pad = 1;
  q.oh = q.ow = hw;
  q.block = block;
  return q;
}

/// The names of infer_conv_candidates(q), in order.
std::vector<std::string> candidates(const InferConvQuery& q) {
  std::vector<std::string> out;
  for (const InferConvImpl* i : onednn::infer_conv_candidates(q)) out.emplace_back(i->name);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& name) {
  return std::find(v.begin(), v.end(), name) != v.end();
}

/// RN50_CONV_IMPL pinned to `name` for the scope.
struct Pin {
  explicit Pin(const std::string& name) { onednn::set_conv_impl(name); }
  ~Pin() { onednn::set_conv_impl(std::nullopt); }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
};

/// RN50_CONV_ALGO's policy `a` for the scope.
struct Policy {
  explicit Policy(onednn::ConvAlgo a) { onednn::set_conv_algo(a); }
  ~Policy() { onednn::set_conv_algo(std::nullopt); }
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;
};

const std::vector<std::string> kDirectOnly{"onednn_direct"};

TEST(InferConvList, OrderNamesAndWhatPinsEach) {
  std::vector<std::string> names, pins;
  for (const InferConvImpl& i : onednn::infer_conv_impls()) {
    names.emplace_back(i.name);
    pins.emplace_back(i.pinned_by);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"onednn_winograd", "own_winograd_f43",
                                             "own_winograd_f23_bf16", "onednn_direct"}));
  // Every pin is a name of the training registry, so one RN50_CONV_IMPL serves both.
  const std::vector<std::string> registry = onednn::conv_impl_names();
  for (const std::string& p : pins) EXPECT_TRUE(has(registry, p)) << p;
  EXPECT_EQ(pins.front(), "onednn");
  EXPECT_EQ(pins.back(), "onednn");
}

TEST(InferConvList, Int8CalibrationAndBatchInvariantEnginesRunOneDnnDirectOnly) {
  for (int block : {0, 8, 16}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      InferConvQuery q = conv3x3(64, 56, block, dt);
      q.int8 = true;
      EXPECT_EQ(candidates(q), kDirectOnly) << "int8, block " << block;
      q = conv3x3(64, 56, block, dt);
      q.batch_invariant = true;
      EXPECT_EQ(candidates(q), kDirectOnly) << "batch invariant, block " << block;
      q = conv3x3(64, 56, block, dt);
      q.observed = true;
      EXPECT_EQ(candidates(q), kDirectOnly) << "calibrating, block " << block;
    }
  }
}

TEST(InferConvList, WinogradOnlyForThreeByThreeStrideOne) {
  for (int block : {0, 8, 16}) {
    InferConvQuery one = conv3x3(64, 56, block);
    one.kernel = 1;
    one.pad = 0;
    EXPECT_EQ(candidates(one), kDirectOnly) << "1x1, block " << block;
    InferConvQuery strided = conv3x3(128, 28, block);
    strided.stride = 2;
    EXPECT_EQ(candidates(strided), kDirectOnly) << "3x3 stride 2, block " << block;
    InferConvQuery stem = conv3x3(3, 32, 0);
    stem.k = 64;
    stem.kernel = 7;
    stem.stride = 2;
    stem.pad = 3;
    EXPECT_EQ(candidates(stem), kDirectOnly) << "7x7 stem";
  }
  // f32 3x3 stride 1 without a shortcut: oneDNN's Winograd is tried first (oneDNN may still
  // refuse it: the engine then takes the next); with a shortcut it is not a candidate.
  const std::vector<std::string> plain = candidates(conv3x3(64, 56, 16));
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain.front(), "onednn_winograd");
  InferConvQuery joined = conv3x3(64, 56, 16);
  joined.residual = true;
  EXPECT_FALSE(has(candidates(joined), "onednn_winograd"));
  // bf16: never oneDNN's Winograd (oneDNN 2.6 has none for bf16).
  EXPECT_FALSE(has(candidates(conv3x3(64, 56, 0, DType::bf16)), "onednn_winograd"));
}

TEST(InferConvList, PolicyDirectLeavesOneDnnDirectOnly) {
  Policy direct(onednn::ConvAlgo::direct);
  EXPECT_EQ(candidates(conv3x3(64, 56, 8)), kDirectOnly);
  EXPECT_EQ(candidates(conv3x3(64, 56, 16)), kDirectOnly);
  EXPECT_EQ(candidates(conv3x3(64, 56, 0, DType::bf16, 32)), kDirectOnly);
}

// Our Winograds where the rule table's rows take them on this process's CPU class (the same
// rows as training's), and only where their kernels compute the layout: F(4x4, 3x3) on
// nChw8c, bf16 F(2x2, 3x3) on NHWC.
TEST(InferConvList, TheRuleTableDecidesOurWinograds) {
  const onednn::CpuClass cls = onednn::cpu_class();
  // 64 channels at 56x56, batch 4: 784 tiles, enough for either op on any thread count here.
  const bool f43_rule = onednn::conv_rule_takes(cls, "own_winograd_f43", onednn::ConvDir::fwd,
                                                DType::f32, onednn::ConvShapeInfo{});
  EXPECT_EQ(has(candidates(conv3x3(64, 56, 8)), "own_winograd_f43"), f43_rule)
      << "class " << onednn::cpu_class_name(cls);
  EXPECT_FALSE(has(candidates(conv3x3(64, 56, 16)), "own_winograd_f43"));
  EXPECT_FALSE(has(candidates(conv3x3(64, 56, 0)), "own_winograd_f43"));
  const bool f23_rule =
      onednn::WinogradF23Bf16::built() &&
      onednn::conv_rule_takes(cls, "own_winograd_f23_bf16", onednn::ConvDir::fwd, DType::bf16,
                              onednn::ConvShapeInfo{64, 64, 3, 1, 56 * 56});
  EXPECT_EQ(has(candidates(conv3x3(64, 56, 0, DType::bf16, 32)), "own_winograd_f23_bf16"),
            f23_rule)
      << "class " << onednn::cpu_class_name(cls);
  EXPECT_FALSE(has(candidates(conv3x3(64, 56, 16, DType::bf16, 32)), "own_winograd_f23_bf16"));
  // The rows themselves: F(4x4, 3x3) is AVX2-class only, bf16 F(2x2, 3x3) never on AMX.
  EXPECT_TRUE(onednn::conv_rule_takes(onednn::kCpuAvx2, "own_winograd_f43",
                                      onednn::ConvDir::fwd, DType::f32, onednn::ConvShapeInfo{}));
  EXPECT_FALSE(onednn::conv_rule_takes(onednn::kCpuAvx512, "own_winograd_f43",
                                       onednn::ConvDir::fwd, DType::f32,
                                       onednn::ConvShapeInfo{}));
  EXPECT_FALSE(onednn::conv_rule_takes(onednn::kCpuAmx, "own_winograd_f23_bf16",
                                       onednn::ConvDir::fwd, DType::bf16,
                                       onednn::ConvShapeInfo{64, 64, 3, 1, 56 * 56}));
}

// RN50_CONV_IMPL=name puts its implementation first wherever its kernel computes the call,
// speed rules or not; elsewhere oneDNN runs, as in training.
TEST(InferConvList, APinTakesWhatItsKernelComputes) {
  {
    Pin f43("own_winograd_f43");
    // 2x2 outputs: the speed rule would never give it this layer.
    const std::vector<std::string> tiny = candidates(conv3x3(512, 2, 8, DType::f32, 1));
    ASSERT_FALSE(tiny.empty());
    EXPECT_EQ(tiny.front(), "own_winograd_f43");
    EXPECT_EQ(tiny.back(), "onednn_direct");
    EXPECT_FALSE(has(candidates(conv3x3(64, 56, 16)), "own_winograd_f43")) << "nChw16c";
    EXPECT_FALSE(has(candidates(conv3x3(12, 56, 8)), "own_winograd_f43")) << "12 channels";
    InferConvQuery q8 = conv3x3(64, 56, 8);
    q8.int8 = true;
    EXPECT_EQ(candidates(q8), kDirectOnly);
  }
  {
    Pin onednn("onednn");
    for (int block : {0, 8, 16})
      for (const std::string& n : candidates(conv3x3(64, 56, block)))
        EXPECT_EQ(n.rfind("onednn_", 0), 0u) << n << ", block " << block;
    for (const std::string& n : candidates(conv3x3(64, 56, 0, DType::bf16, 32)))
      EXPECT_EQ(n.rfind("onednn_", 0), 0u) << n;
  }
  {
    // A training-only implementation: every engine conv runs oneDNN's.
    Pin im2col("im2col_matmul");
    EXPECT_EQ(candidates(conv3x3(64, 56, 0, DType::bf16, 32)), kDirectOnly);
    EXPECT_FALSE(has(candidates(conv3x3(64, 56, 8)), "own_winograd_f43"));
  }
  {
    Pin f23("own_winograd_f23_bf16");
    if (onednn::WinogradF23Bf16::built()) {
      const std::vector<std::string> tiny = candidates(conv3x3(64, 2, 0, DType::bf16, 1));
      ASSERT_FALSE(tiny.empty());
      EXPECT_EQ(tiny.front(), "own_winograd_f23_bf16");
    } else {
      EXPECT_THROW(candidates(conv3x3(64, 56, 0, DType::bf16)), Error);
    }
  }
  {
    Pin bogus("own_winograd_f99");
    const std::string msg = error_of([] { candidates(conv3x3(64, 56, 8)); });
    EXPECT_NE(msg.find("RN50_CONV_IMPL is 'own_winograd_f99'"), std::string::npos) << msg;
  }
}

// ---- the engine ----

/// Calls per implementation over the profile's convolution rows of one run of `eng` on `x`,
/// checking that every call of every such row is named.
std::map<std::string, int64_t> conv_impls_of(InferenceEngine& eng, const Tensor& x) {
  OpProfiler prof;
  {
    OpProfiler::Activation on(prof);
    eng.run(x);
  }
  std::map<std::string, int64_t> out;
  for (const OpProfiler::Row& r : prof.rows()) {
    if (r.family != "conv") continue;
    int64_t named = 0;
    for (const auto& [impl, calls] : r.impls) {
      out[impl] += calls;
      named += calls;
    }
    EXPECT_EQ(named, r.calls) << r.op << ": a conv without its implementation's name";
  }
  return out;
}

int64_t total(const std::map<std::string, int64_t>& m) {
  int64_t t = 0;
  for (const auto& [k, v] : m) t += v;
  return t;
}

std::string effective_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx2: return "AVX2";
    default: return "other";
  }
}

// ResNet-50 at 64 px, batch 4, two threads (as InferEngineWinograd's tests): 53 convs, 13 of
// them 3x3 stride 1. On AVX-512 oneDNN's Winograd runs the 13; below it (nChw8c) ours runs the
// 6 with enough tiles (layer1's three at 16x16, layer2's three at 8x8); the rest run direct.
TEST(InferEngineConvImpls, EveryConvOfAPlanIsNamedAndFollowsTheList) {
  if (const char* want = std::getenv("RN50_INFER_CONV_ISA")) {
    ASSERT_EQ(effective_isa_name(), want) << "ONEDNN_MAX_CPU_ISA did not take";
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  std::unique_ptr<Backend> be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 10;
  opt.layout = Layout::NCHW;
  ResNet model(*be, arch_from_name("resnet50"), opt);
  model.init(31);
  const auto sd = randomise_bn(model, 32);
  const Tensor x = random_images(4, 64, 33);
  auto engine = [&](const std::string& precision, bool batch_invariant) {
    EngineOptions o;
    o.precision = precision;
    o.batch_invariant = batch_invariant;
    return make_inference_engine(fold_network(model.desc(), sd), o);
  };
  const bool avx512 = onednn::cpu_class() != onednn::kCpuAvx2;
  const auto f32 = conv_impls_of(*engine("fp32", false), x);
  EXPECT_EQ(total(f32), 53);
  if (avx512) {
    EXPECT_EQ(f32, (std::map<std::string, int64_t>{{"onednn_direct", 40},
                                                   {"onednn_winograd", 13}}));
  } else {
    EXPECT_EQ(f32, (std::map<std::string, int64_t>{{"onednn_direct", 47},
                                                   {"own_winograd_f43", 6}}));
  }
  EXPECT_EQ(conv_impls_of(*engine("fp32", true), x),
            (std::map<std::string, int64_t>{{"onednn_direct", 53}}));
  if (avx512) {  // oneDNN 2.6 has bf16 convolutions from AVX-512 up
    const auto bf16 = conv_impls_of(*engine("bf16", false), x);
    EXPECT_EQ(total(bf16), 53);
    // bf16 F(2x2, 3x3) where built and the rules take layer1's 16x16 outputs (3 convs).
    const bool f23 = onednn::WinogradF23Bf16::built() &&
                     onednn::conv_rule_takes(onednn::cpu_class(), "own_winograd_f23_bf16",
                                             onednn::ConvDir::fwd, DType::bf16,
                                             onednn::ConvShapeInfo{64, 64, 3, 1, 16 * 16});
    EXPECT_EQ(bf16.count("own_winograd_f23_bf16") ? bf16.at("own_winograd_f23_bf16") : 0,
              f23 ? 3 : 0);
  }
  {
    Pin onednn("onednn");
    for (const auto& [impl, calls] : conv_impls_of(*engine("fp32", false), x))
      EXPECT_EQ(impl.rfind("onednn_", 0), 0u) << impl << " ran " << calls << " under the pin";
  }
  omp_set_num_threads(threads);
}

// The test above below AVX-512 in a process of its own, with RN50_CONV_LOG: our F(4x4, 3x3)
// on nChw8c takes the 6 convolutions there, and the log names the choice of each of the
// plan's convolutions.
TEST(InferEngineConvImpls, AtAvx2OurWinogradTakesOverAndTheLogNamesEveryChoice) {
  if (std::getenv("RN50_INFER_CONV_ISA")) GTEST_SKIP() << "a child run";
  if (test::kAddressSanitizer)
    GTEST_SKIP() << "sanitized build: the host's instruction set only (the test code runs at -O0)";
  const auto avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
  if ((static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx2) != avx2)
    GTEST_SKIP() << "this CPU has no AVX2";
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string log = std::string(RN50_BINARY_DIR) + "/infer_conv_registry_" +
                          std::to_string(::getpid()) + ".log";
  std::filesystem::remove(log);
  std::string out;
  const int rc = rn50_test::run_command(
      "ONEDNN_MAX_CPU_ISA=AVX2 RN50_INFER_CONV_ISA=AVX2 RN50_CONV_LOG=" +
          rn50_test::sh_quote(log) + " " + rn50_test::sh_quote(exe) +
          " --gtest_filter=InferEngineConvImpls.EveryConvOfAPlanIsNamedAndFollowsTheList",
      &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  std::ifstream in(log);
  ASSERT_TRUE(in) << "RN50_CONV_LOG wrote no " << log;
  std::map<std::string, int> choices;
  int engine_lines = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("conv fwd (engine) ", 0) != 0) continue;
    ++engine_lines;
    choices[line.substr(line.rfind(": ") + 2)]++;
    // The f32 engines' convs but the stem's read and write the nChw8c buffers.
    if (line.find(" f32 ") != std::string::npos && line.find(",3,7,7]") == std::string::npos) {
      EXPECT_NE(line.find(" nChw8c "), std::string::npos) << line;
    }
  }
  std::filesystem::remove(log);
  // Three engines of 53 convs (f32, batch-invariant f32, f32 pinned to oneDNN; no bf16 engine
  // below AVX-512), a line each per convolution at plan build.
  EXPECT_EQ(engine_lines, 3 * 53);
  EXPECT_EQ(choices["own_winograd_f43"], 6);
  EXPECT_EQ(choices["onednn_winograd"], 0);
}

}  // namespace
}  // namespace rn50
