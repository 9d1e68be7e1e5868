// The CPU inference engine (rn50/inference.h): its logits equal the training graph's in eval
// mode (reference backend, float64 accumulation) on random weights and BN statistics, for NCHW
// and NHWC input, NHWC and blocked activations, and across batch sizes (plans and buffers
// reused); blocked activations are what oneDNN's convolutions get, and batch invariant; 3x3
// convs run as Winograd (oneDNN's or our own) except in a batch-invariant engine;
// concurrent calls from several threads on one engine give the same logits as one call; bad
// input and unsupported options give clear errors.
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "core/report.h"
#include "core/stats.h"
#include "infer_test_util.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "rn50/profile.h"

namespace rn50 {
namespace {

struct Fixture {
  std::unique_ptr<Backend> be = make_backend("ref");
  std::unique_ptr<ResNet> model;
  std::map<std::string, Tensor> sd;
  int classes;
  Fixture(const std::string& arch, int k) : classes(k) {
    ModelOptions opt;
    opt.num_classes = k;
    opt.layout = Layout::NCHW;
    model = std::make_unique<ResNet>(*be, arch_from_name(arch), opt);
    model->init(21);
    sd = randomise_bn(*model, 22);
  }
  /// Eval-mode logits of the training graph on the reference backend.
  Tensor reference(const Tensor& x) {
    Tensor xd = be->alloc(x.shape(), DType::f32, Layout::NCHW);
    be->copy(x, xd);
    const Tensor& y = model->forward(xd, /*train=*/false);
    Tensor h = Tensor::empty(y.shape(), DType::f32);
    be->copy(y, h);
    be->synchronize();
    return h;
  }
  std::unique_ptr<InferenceEngine> engine(
      CpuActivationLayout layout = CpuActivationLayout::automatic, bool batch_invariant = false) {
    EngineOptions o;
    o.cpu_activations = layout;
    o.batch_invariant = batch_invariant;
    return make_inference_engine(fold_network(model->desc(), sd), o);
  }
};

void expect_close(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, std::fabs(double(want.data_as<float>()[i])));
  ASSERT_GT(scale, 1e-3) << what << ": logits too small to compare";
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data_as<float>()[i], want.data_as<float>()[i], rel * scale)
        << what << " logit " << i;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

class InferEngine
    : public ::testing::TestWithParam<std::tuple<const char*, CpuActivationLayout>> {};

TEST_P(InferEngine, LogitsEqualTheTrainingGraphInEvalMode) {
  const auto [arch, layout] = GetParam();
  Fixture f(arch, 9);
  auto eng = f.engine(layout);
  EXPECT_EQ(eng->num_classes(), 9);
  EXPECT_EQ(eng->precision(), "fp32");
  for (int64_t n : {3, 1, 3}) {  // a new shape, then the first shape's plan again
    const Tensor x = random_images(n, 64, 100 + n);
    const Tensor want = f.reference(x);
    const Tensor got = eng->run(x);
    expect_close(got, want, 1e-4, std::string(arch) + " batch " + std::to_string(n));
    EXPECT_TRUE(same_bits(eng->run(x), got)) << "a second call on the same plan differs";
    expect_close(eng->run(x.to_layout(Layout::NHWC)), want, 1e-4, "NHWC input");
  }
}

// On CPUs without AVX-512 oneDNN has no bf16 kernels: the engine says so and names the way out.
TEST(InferEngineBf16, CloseToFp32ButNotEqual) {
  Fixture f("resnet50", 10);
  EngineOptions o;
  o.precision = "bf16";
  if (!make_backend("onednn")->supports(Op::conv2d, DType::bf16, Layout::NHWC)) {
    auto bf = make_inference_engine(fold_network(f.model->desc(), f.sd), o);
    try {
      bf->run(random_images(4, 64, 300));
      ADD_FAILURE() << "bf16 inference ran on a CPU without oneDNN bf16 kernels";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("use --precision fp32"), std::string::npos)
          << e.what();
    }
    return;
  }
  auto bf = make_inference_engine(fold_network(f.model->desc(), f.sd), o);
  EXPECT_EQ(bf->precision(), "bf16");
  auto fp = f.engine();
  const Tensor x = random_images(4, 64, 300);
  const Tensor a = fp->run(x), b = bf->run(x);
  ASSERT_EQ(a.shape(), b.shape());
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(b.data_as<float>()[i]) - a.data_as<float>()[i];
    num += d * d;
    den += double(a.data_as<float>()[i]) * a.data_as<float>()[i];
  }
  const double rel = std::sqrt(num / den);
  // bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 0.2%) over 50 layers.
  EXPECT_LT(rel, 3e-2) << "relative L2 error of bf16 logits";
  EXPECT_GT(rel, 1e-5) << "bf16 logits equal fp32's: bf16 is not in use";
  std::printf("resnet50 bf16 vs fp32 logits: relative L2 error %.4f\n", rel);
}

INSTANTIATE_TEST_SUITE_P(ArchsLayouts, InferEngine,
                         ::testing::Combine(::testing::Values("resnet18", "resnet50"),
                                            ::testing::Values(CpuActivationLayout::nhwc,
                                                              CpuActivationLayout::blocked)));

/// Batch invariance: each image of the NCHW batch `x` run alone through `eng` gives the bits
/// of its row of `batch_logits` (eng's logits for the whole batch).
void expect_each_image_alone_as_in_batch(InferenceEngine& eng, const Tensor& x,
                                         const Tensor& batch_logits) {
  const int64_t n = x.n(), per = x.numel() / n, k = batch_logits.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    Tensor one = Tensor::empty({1, 3, x.h(), x.w()}, DType::f32, Layout::NCHW);
    std::memcpy(one.data_as<float>(), x.data_as<const float>() + i * per, per * sizeof(float));
    const Tensor y = eng.run(one);
    EXPECT_EQ(
        std::memcmp(y.data(), batch_logits.data_as<const float>() + i * k, k * sizeof(float)), 0)
        << "image " << i << " alone differs from its row in the batch";
  }
}

/// oneDNN's verbose lines (level 2: creation and execution, with each argument's memory format)
/// of `eng`'s first run on `x` (a new plan), captured from stdout.
std::string onednn_log_of_first_run(InferenceEngine& eng, const Tensor& x) {
  dnnl::set_verbose(2);
  ::testing::internal::CaptureStdout();
  eng.run(x);
  std::fflush(stdout);
  dnnl::set_verbose(0);
  return ::testing::internal::GetCapturedStdout();
}

/// The lines of `log` that contain every one of `parts`.
std::vector<std::string> lines_with(const std::string& log,
                                    std::initializer_list<std::string_view> parts) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (std::all_of(parts.begin(), parts.end(),
                    [&](std::string_view p) { return line.find(p) != std::string::npos; }))
      out.push_back(line);
  return out;
}

/// The lines of `log` that describe a convolution primitive.
std::vector<std::string> conv_lines(const std::string& log) {
  return lines_with(log, {",convolution,"});
}

// Forced blocked activations: every conv but the stem reads and writes nChw16c on AVX-512 CPUs,
// nChw8c without (oneDNN's aBcd16b, aBcd8b), the stem reads the NCHW image (abcd); forced NHWC:
// every conv reads NHWC (acdb).
// Both give the training graph's logits (above) and each other's within rounding, and the
// blocked engine, batch invariant as rn50 serve's, gives each image alone the bits it gets in a
// batch of 4.
TEST(InferEngineLayouts, BlockedIsWhatTheConvsGetAndBatchInvariant) {
  Fixture f("resnet50", 10);
  auto nhwc = f.engine(CpuActivationLayout::nhwc, true);
  auto blocked = f.engine(CpuActivationLayout::blocked, true);
  const Tensor x = random_images(4, 64, 500);
  const auto bl = conv_lines(onednn_log_of_first_run(*blocked, x));
  const auto nl = conv_lines(onednn_log_of_first_run(*nhwc, x));
  ASSERT_GE(bl.size(), 53u) << "oneDNN's verbose output shows no convolutions";
  ASSERT_GE(nl.size(), 53u);
  int blocked_src = 0, nchw_src = 0;
  const std::string block_tag =
      "src_f32::blocked:aBcd" + std::to_string(onednn::infer_activation_block()) + "b";
  for (const std::string& l : bl) {
    blocked_src += l.find(block_tag) != std::string::npos;
    nchw_src += l.find("src_f32::blocked:abcd") != std::string::npos;
    EXPECT_EQ(l.find("dst_f32::blocked:acdb"), std::string::npos) << l;
  }
  EXPECT_GE(blocked_src, 52) << "convs reading " << block_tag;
  EXPECT_GE(nchw_src, 1) << "the stem reading the NCHW image";
  for (const std::string& l : nl)
    EXPECT_NE(l.find("src_f32::blocked:acdb"), std::string::npos) << l;

  const Tensor a = nhwc->run(x), b = blocked->run(x);
  expect_close(b, a, 1e-4, "blocked vs NHWC");
  expect_each_image_alone_as_in_batch(*blocked, x, b);
}

/// Whether oneDNN implements Winograd f32 3x3 convolution on this CPU (it needs AVX-512).
bool onednn_winograd_implemented() {
  using dnnl::memory;
  try {
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    const memory::desc x({2, 64, 16, 16}, memory::data_type::f32, memory::format_tag::any),
        w({64, 64, 3, 3}, memory::data_type::f32, memory::format_tag::any);
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_winograd, x, w, x,
                                            {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(d, eng);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

/// Calls of the op named `name` in one profiled run of `eng` on `x`.
int64_t calls_of(InferenceEngine& eng, const Tensor& x, const std::string& name) {
  OpProfiler prof;
  {
    OpProfiler::Activation on(prof);
    eng.run(x);
  }
  for (const OpProfiler::Row& r : prof.rows())
    if (r.op == name) return r.calls;
  return 0;
}

/// Convs our own Winograd ran in one profiled run of `eng` on `x` (its row of the profile).
int64_t own_winograd_convs(InferenceEngine& eng, const Tensor& x) {
  return calls_of(eng, x, "conv fwd, own winograd (bias, add, relu fused)");
}

// fp32 3x3 stride-1 convs run as Winograd by default (src/backend/cpu/conv_algo.h): oneDNN's
// where it has one (AVX-512), on the blocked (default) engine's nChw16c buffers as they are,
// on an NHWC engine's between activation reorders; else, with blocked activations, our own
// (winograd_f43.h) where there are enough tiles; a batch-invariant engine (rn50 serve's)
// runs them direct, and its logits do not depend on the batch. Both stay within rounding of
// each other (and of the training graph, LogitsEqualTheTrainingGraphInEvalMode).
TEST(InferEngineWinograd, DefaultUsesItBatchInvariantDoesNot) {
  // Two threads, as on the machine WinogradF43Conv::worthwhile was measured on: at 64x64 px
  // and batch 4 ResNet-50's three layer1 stride-1 3x3 convs (64 channels, 16x16: 64 tiles in 2
  // chunks of 32) and three layer2 ones (128 channels, 8x8: 16 tiles, one chunk, its output
  // channels in 2 parts) take it; layer3's and layer4's (4 tiles or 1) do not.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  Fixture f("resnet50", 10);
  auto wino = f.engine(CpuActivationLayout::nhwc);
  auto blocked = f.engine();  // automatic: blocked
  ASSERT_TRUE(onednn::infer_blocked_activations_preferred());
  EngineOptions o;
  o.batch_invariant = true;
  auto direct = make_inference_engine(fold_network(f.model->desc(), f.sd), o);
  const Tensor x = random_images(4, 64, 400);
  // ResNet-50: 16 bottlenecks, 13 of whose 3x3 convs have stride 1: one reorder in, one out,
  // where oneDNN implements Winograd (AVX-512; not on AVX2-only CPUs, which run direct).
  const bool onednn_wino = onednn_winograd_implemented();
  EXPECT_EQ(calls_of(*wino, x, "reorder activations (winograd)"), onednn_wino ? 26 : 0);
  EXPECT_EQ(calls_of(*direct, x, "reorder activations (winograd)"), 0);
  const std::string blocked_log = onednn_log_of_first_run(*blocked, x);
  EXPECT_EQ(calls_of(*blocked, x, "reorder activations (winograd)"), 0);
  EXPECT_EQ(own_winograd_convs(*blocked, x), onednn_wino ? 0 : 6);
  // oneDNN's Winograd on the nChw16c buffers: its 13 convs, each built once and run once.
  EXPECT_EQ(lines_with(blocked_log, {",convolution,", "wino"}).size(), onednn_wino ? 26u : 0u);
  // No oneDNN conv primitive is built for the convs ours runs (53 in ResNet-50).
  EXPECT_EQ(lines_with(blocked_log, {",create:", ",convolution,"}).size(),
            onednn_wino ? 53u : 47u);
  EXPECT_EQ(own_winograd_convs(*direct, x), 0);
  const Tensor a = wino->run(x), b = direct->run(x), c = blocked->run(x);
  expect_close(a, b, 1e-4, "Winograd vs direct");
  expect_close(c, b, 1e-4, "blocked Winograd vs direct");
  // Batch invariance: each image alone gives the same bits as in the batch of 4.
  expect_each_image_alone_as_in_batch(*direct, x, b);
  {  // RN50_CONV_ALGO=direct's policy: neither Winograd.
    onednn::set_conv_algo(onednn::ConvAlgo::direct);
    auto off = f.engine(CpuActivationLayout::blocked);
    EXPECT_EQ(lines_with(onednn_log_of_first_run(*off, x), {",create:", ",convolution,"}).size(),
              53u);
    EXPECT_EQ(own_winograd_convs(*off, x), 0);
    onednn::set_conv_algo(std::nullopt);
  }
  omp_set_num_threads(threads);
}

// bf16 engines on CPUs with AVX-512 BF16 and no AMX run 3x3 stride-1 convs with outputs of
// 14x14 or more as our own Winograd F(2x2, 3x3) (winograd_f23_bf16.h): at 64x64 px ResNet-50's
// three layer1 ones (16x16), one batched matmul of 16 products each (both threads' chunks
// equal); not under policy `direct` nor in a batch-invariant engine. Its logits stay within
// bf16 rounding of the direct kernels'.
TEST(InferEngineWinograd, Bf16UsesTheF23OpWhereTheBuildHasIt) {
  if (!onednn::WinogradF23Bf16::built()) GTEST_SKIP() << "no AVX-512 BF16 Winograd in this build";
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  Fixture f("resnet50", 10);
  EngineOptions o;
  o.precision = "bf16";
  auto wino = make_inference_engine(fold_network(f.model->desc(), f.sd), o);
  onednn::set_conv_algo(onednn::ConvAlgo::direct);
  auto direct = make_inference_engine(fold_network(f.model->desc(), f.sd), o);
  const Tensor x = random_images(4, 64, 500);
  const std::string direct_log = onednn_log_of_first_run(*direct, x);
  onednn::set_conv_algo(std::nullopt);
  const std::string wino_log = onednn_log_of_first_run(*wino, x);
  auto f23_matmuls = [](const std::string& log) {
    return lines_with(log, {",create:", ",matmul,", ",,16x"}).size();
  };
  EXPECT_EQ(f23_matmuls(wino_log), 3u);
  EXPECT_EQ(lines_with(wino_log, {",create:", ",convolution,"}).size(), 50u);
  EXPECT_EQ(f23_matmuls(direct_log), 0u);
  EngineOptions inv = o;
  inv.batch_invariant = true;
  auto invariant = make_inference_engine(fold_network(f.model->desc(), f.sd), inv);
  EXPECT_EQ(f23_matmuls(onednn_log_of_first_run(*invariant, x)), 0u);
  const Tensor a = wino->run(x), b = direct->run(x);
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(a.data_as<float>()[i]) - b.data_as<float>()[i];
    num += d * d;
    den += double(b.data_as<float>()[i]) * b.data_as<float>()[i];
  }
  EXPECT_LT(std::sqrt(num / den), 3e-2) << "relative L2 difference of the logits";
  EXPECT_GT(num, 0.0) << "the same logits as the direct kernels: was the op taken?";
  omp_set_num_threads(threads);
}

TEST(InferEngineThreads, ConcurrentCallsOnOneEngineGiveTheSameLogits) {
  Fixture f("resnet18", 5);
  auto eng = f.engine();
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(random_images(1 + t % 2, 48, 200 + t));  // two batch sizes, two plans
    expected.push_back(eng->run(inputs.back()));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 3; ++r)
        if (!same_bits(eng->run(inputs[static_cast<size_t>(t)]), expected[static_cast<size_t>(t)]))
          ++mismatches[static_cast<size_t>(t)];
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
}

TEST(InferEngineErrors, BadInputsAndUnsupportedOptionsAreNamed) {
  Fixture f("resnet18", 3);
  auto eng = f.engine();
  const std::string four = error_of([&] { eng->run(Tensor::zeros({1, 4, 32, 32}, DType::f32)); });
  EXPECT_NE(four.find("(N, 3, H, W)"), std::string::npos) << four;
  const std::string f16 = error_of([&] { eng->run(Tensor::zeros({1, 3, 32, 32}, DType::f16)); });
  EXPECT_NE(f16.find("f32"), std::string::npos) << f16;
  EngineOptions o;
  o.precision = "int8";  // an uncalibrated program
  const std::string p =
      error_of([&] { make_inference_engine(fold_network(f.model->desc(), f.sd), o); });
  EXPECT_NE(p.find("--precision int8"), std::string::npos) << p;
  if (cuda_device_count() == 0) {  // without a GPU, --device cuda is refused by name
    o.precision = "fp32";
    o.device = "cuda";
    const std::string d =
        error_of([&] { make_inference_engine(fold_network(f.model->desc(), f.sd), o); });
    EXPECT_NE(d.find("--device cuda"), std::string::npos) << d;
  }
}

}  // namespace
}  // namespace rn50

namespace rn50 {
namespace {

TEST(InferBench, PercentileIsNumpysLinearInterpolation) {
  // numpy.percentile([10, 1, 4, 3, 2], q) for q = 0, 50, 90, 99, 100.
  const std::vector<double> v{10, 1, 4, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3.0);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 7.6);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 9.76);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10.0);
  EXPECT_THROW(percentile({}, 50), Error);
}

TEST(InferBench, WritesOneConformingLinePerBatchSize) {
  const std::string report = std::string(RN50_BINARY_DIR) + "/infer_bench_test.jsonl";
  std::remove(report.c_str());
  InferBenchConfig c;
  c.arch = "resnet18";
  c.num_classes = 4;
  c.batch_sizes = {1, 3};
  c.crop_size = 32;
  c.steps = 4;
  c.warmup_steps = 1;
  c.report_file = report;
  std::ostringstream out;
  const auto points = bench_infer(c, out);
  ASSERT_EQ(points.size(), 2u);
  for (const InferBenchPoint& p : points) {
    EXPECT_GT(p.ips, 0);
    EXPECT_LE(p.latency_p50_ms, p.latency_p90_ms);
    EXPECT_LE(p.latency_p90_ms, p.latency_p99_ms);
    EXPECT_NEAR(p.ips, p.batch_size * 1e3 / p.latency_avg_ms, 1e-6 * p.ips);
  }
  EXPECT_NE(out.str().find("p99 ms"), std::string::npos) << out.str();
  std::ifstream f(report);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(check_report_line(j).empty()) << line;
    EXPECT_EQ(j["batch_size"], c.batch_sizes[static_cast<size_t>(n)]);
    ++n;
  }
  EXPECT_EQ(n, 2);
  c.batch_sizes = {0};
  EXPECT_THROW(bench_infer(c, out), Error);
}

// A device engine (the reference backend's, as CUDA's) is timed on an input kept on the
// device unless --include-upload; the CPU engine on its host input; every line and record says
// which. The device-resident call gives run()'s logits (they stay on the device).
TEST(InferBench, DeviceEnginesTimeADeviceResidentInputUnlessAskedToIncludeTheUpload) {
  Fixture f("resnet18", 4);
  const InferenceProgram prog = fold_network(f.model->desc(), f.sd);
  for (const char* device : {"ref", "cpu"}) {
    for (bool upload : {false, true}) {
      EngineOptions eo;
      eo.device = device;
      auto engine = make_inference_engine(prog, eo);
      const std::string report = std::string(RN50_BINARY_DIR) + "/infer_resident_test.jsonl";
      std::remove(report.c_str());
      InferBenchConfig c;
      c.batch_sizes = {2};
      c.crop_size = 32;
      c.steps = 2;
      c.warmup_steps = 1;
      c.engine = eo;
      c.include_upload = upload;
      std::ostringstream out;
      {
        ReportWriter w(report);
        time_engine(*engine, c, "resnet18", 4, out, &w);
      }
      const std::string want = std::string(device) == "cpu" ? "host"
                               : upload                     ? "host+upload"
                                                            : "device";
      std::ifstream fin(report);
      std::string line;
      ASSERT_TRUE(std::getline(fin, line));
      const auto j = nlohmann::json::parse(line);
      EXPECT_TRUE(check_report_line(j).empty()) << line;
      EXPECT_EQ(j.at("input"), want) << device << " upload " << upload;
      EXPECT_NE(out.str().find(" " + want + "\n"), std::string::npos) << out.str();
    }
  }
  // The staged input runs the same network as run(): nothing staged throws; the CPU engine
  // stages nothing.
  EngineOptions eo;
  eo.device = "ref";
  auto engine = make_inference_engine(prog, eo);
  EXPECT_THROW(engine->run_device_resident(), Error);
  const Tensor x = random_images(2, 32, 5);
  ASSERT_TRUE(engine->stage_on_device(x));
  engine->run_device_resident();
  const Tensor want = engine->run(x);
  EXPECT_EQ(rel_l2(engine->run(x), want), 0.0);
  EXPECT_FALSE(make_inference_engine(prog)->stage_on_device(x));
  EXPECT_THROW(make_inference_engine(prog)->run_device_resident(), Error);
}

// --profile with an engine on a compute backend (here the reference one, as CUDA's): a second
// engine behind the profiling backend runs the profiled calls, one backend op per program op.
TEST(InferBench, ProfilesADeviceEngineThroughTheProfilingBackend) {
  Fixture f("resnet18", 4);
  EngineOptions eo;
  eo.device = "ref";
  auto engine = make_inference_engine(fold_network(f.model->desc(), f.sd), eo);
  const std::string report = std::string(RN50_BINARY_DIR) + "/infer_profile_test.jsonl";
  std::remove(report.c_str());
  InferBenchConfig c;
  c.batch_sizes = {1};
  c.crop_size = 32;
  c.steps = 2;
  c.warmup_steps = 1;
  c.engine = eo;
  c.profile = true;
  std::ostringstream out;
  {
    ReportWriter w(report);
    time_engine(*engine, c, "resnet18", 4, out, &w);
  }
  EXPECT_NE(out.str().find("profile: resnet18 fp32 batch 1 on ref"), std::string::npos)
      << out.str();
  std::ifstream fin(report);
  int profiles = 0;
  for (std::string line; std::getline(fin, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(check_report_line(j).empty()) << line;
    if (j["type"] != "profile") continue;
    ++profiles;
    EXPECT_EQ(j["steps"], 2);
    bool conv = false;
    for (const auto& o : j["ops"])
      if (o["op"] == "conv fwd (bias, add, relu fused)") {
        conv = true;
        EXPECT_DOUBLE_EQ(o["calls_per_step"].get<double>(), 20);  // resnet18's convs
        EXPECT_GT(o["gflops"].get<double>(), 0);
      }
    EXPECT_TRUE(conv) << line;
    EXPECT_GE(j["ops_ms"].get<double>(), 0.95 * j["step_ms"].get<double>()) << line;
  }
  EXPECT_EQ(profiles, 1);
}

}  // namespace
}  // namespace rn50
