// Micro-benchmarks (Google Benchmark) of pieces the whole-program benchmarks (bench/*.sh, which
// run the PyTorch peer in the same run) cannot isolate. Not tests: nothing here asserts.
//
//   BM_SampleOneThread/exact:0|1   read + decode + RandomResizedCrop(224) + flip of one training
//                                  sample on one thread (fast DCT-scaled region decode, or the
//                                  PIL-exact path). Images from ../shared/data/imagenette/train
//                                  (or $RN50_BENCH_IMAGES/train). items_per_second = images/s of
//                                  this thread; the CPU column is this thread's CPU time.
//   BM_OnednnConv3x3/<pass>        the oneDNN backend's ResNet-50 3x3 conv (64->64, 56x56, N=32,
//                                  NHWC, f32): pass 0 forward, 1 backward-data, 2 backward-weights,
//                                  with the primitive cache warm (steady state).
//   BM_OnednnConv3x3Cold/<pass>    the same with the primitive cache cleared before every call:
//                                  the difference is what primitive creation costs.
//   BM_ConvBwdWeightsBf16/<im2col>/<shape>  the weight gradient of ResNet-50's KxK convs (N=32,
//                                  NHWC, bf16): shape 0 the stem, 1-7 the 3x3s of layer1..4
//                                  (see kKxK); im2col 0 oneDNN's direct kernel, 1 im2col +
//                                  matmuls (conv_im2col.cpp). What conv_im2col_allowed's
//                                  shape list comes from.
//   BM_Conv1x1BwdWeights{Bf16,F32}/<own>/<shape>  the bf16 / f32 weight gradient of
//                                  ResNet-50's 1x1 convs (N=32, NHWC; k1x1): own 0 oneDNN's
//                                  direct kernel, 1 our AVX-512 GEMM (conv_wgrad_gemm.h).
//   BM_ConvBwdWeightsBf16Own/<shape>  the bf16 weight gradient of kKxK[shape] by our own GEMM
//                                  (conv_wgrad_gemm.h); oneDNN's: BM_ConvBwdWeightsBf16/im2col:0.
//   BM_Conv3x3InferF32/<wino>/<n>/<shape>/<cold>  an inference 3x3 stride-1 conv of
//                                  kKxK[shape] (1, 3, 5, 7) at batch n, f32 nChw8c, bias + ReLU:
//                                  wino 0 oneDNN's direct kernel, 1 our Winograd F(4x4, 3x3)
//                                  (winograd_f43.h); cold 1: the caches evicted before each call
//                                  but for the input (as in the network at small batches). What
//                                  WinogradF43Conv::worthwhile's tile rule comes from.
//   BM_Conv3x3TrainF32/<own>/<pass>/<n>/<shape>  the oneDNN backend's 3x3 stride-1 conv of
//                                  kKxK[shape] at batch n, NHWC f32: pass 0 forward, 1 backward
//                                  data; own 0 oneDNN's direct kernel (policy `direct`), 1 our
//                                  Winograd (policy `matmul`; conv_winograd.h), its weight
//                                  transform included; pass 2 the weight gradient, own 0 as
//                                  im2col + matmuls (conv_im2col.h), 1 our Winograd.
//   BM_Conv3x3TrainBf16/<own>/<pass>/<n>/<shape>  the same in bf16: own 0 oneDNN's direct
//                                  kernel (all three passes), 1 our Winograd F(2x2, 3x3)
//                                  (policy `matmul`; winograd_f23_bf16.h), its weight transform
//                                  included. What conv_own_winograd_bf16_allowed's size rule
//                                  comes from.
//   BM_BatchnormTrain/<op>/<shape>/<f32>  our training batch norm loops (batchnorm_nhwc.h) on
//                                  ResNet-50's activations at batch 32 (kBn, NHWC), f32 0 bf16,
//                                  1 f32: op 0 forward + ReLU, 1 forward + residual + ReLU,
//                                  2 backward through the ReLU, 3 backward fused with the
//                                  join's ReLU backward (two incoming gradients). bytes_per_second
//                                  counts every pass's tensor reads and writes (forward: x twice,
//                                  y; backward: x, dy, y twice, dx), the memory roof's traffic.
// Run: build/rn50_bench_micro [--benchmark_filter=Conv] [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/batchnorm_nhwc.h"
#include "backend/cpu/conv_wgrad_gemm.h"
#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_im2col.h"
#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/onednn_backend.h"
#include "backend/cpu/winograd_f43.h"
#include "core/bf16.h"
#include "data/decode.h"
#include "data/rng.h"
#include "data/sample.h"
#include "rn50/backend.h"
#include "rn50/data.h"

namespace {

using namespace rn50;

std::string image_root() {
  const char* env = std::getenv("RN50_BENCH_IMAGES");
  return env ? std::string(env) : std::string(RN50_SOURCE_DIR) + "/../shared/data/imagenette";
}

void BM_SampleOneThread(benchmark::State& state) {
  const std::string dir = image_root() + "/train";
  if (!std::filesystem::is_directory(dir)) {
    state.SkipWithError(("no images at " + dir + " (set RN50_BENCH_IMAGES)").c_str());
    return;
  }
  const ImageFolderIndex idx = ImageFolderIndex::scan(dir);
  // A fixed spread of files, read once: the benchmark times decode + augmentation, not disk.
  std::vector<std::vector<uint8_t>> files(256);
  std::vector<std::string> paths(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    paths[i] = idx.samples[i * idx.samples.size() / files.size()].first;
    data::read_file(paths[i], files[i]);
  }
  data::SampleSpec spec;
  spec.train = true;
  spec.crop = 224;
  spec.exact = state.range(0) != 0;
  data::SampleScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  uint64_t i = 0;
  for (auto _ : state) {
    const size_t k = i % files.size();
    data::SampleRng rng(0, 0, i++);
    data::process_sample(files[k].data(), files[k].size(), paths[k], spec, &rng, out.data(),
                         scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_SampleOneThread)->ArgName("exact")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

Tensor random_tensor(std::vector<int64_t> shape, std::mt19937& rng, Layout l, float lo = -1.f,
                     float hi = 1.f) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32, l);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

void conv3x3(benchmark::State& state, bool cold) {
  std::unique_ptr<Backend> holder = make_backend("onednn");
  auto& be = dynamic_cast<onednn::OnednnBackend&>(*holder);
  std::mt19937 rng(1);
  const int64_t N = 32, C = 64, H = 56;
  Tensor x = random_tensor({N, C, H, H}, rng, Layout::NHWC);
  Tensor w = random_tensor({C, C, 3, 3}, rng, Layout::NCHW, -0.05f, 0.05f);
  Tensor dy = random_tensor({N, C, H, H}, rng, Layout::NHWC);
  Tensor y = Tensor::empty(x.shape(), DType::f32, Layout::NHWC);
  Tensor dx = Tensor::empty(x.shape(), DType::f32, Layout::NHWC);
  Tensor dw = Tensor::empty(w.shape(), DType::f32);
  const Conv2dParams p{1, 1};
  const int64_t pass = state.range(0);
  auto run = [&] {
    if (pass == 0) be.conv2d_fwd(p, x, w, y);
    if (pass == 1) be.conv2d_bwd_data(p, dy, w, dx);
    if (pass == 2) be.conv2d_bwd_weights(p, x, dy, dw);
    be.synchronize();
  };
  run();  // creates the primitive (and, for the warm case, caches it)
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      be.clear_cache();
      state.ResumeTiming();
    }
    run();
  }
  // 2 * N * K * C * R * S * OH * OW multiply-adds per pass.
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * N * C * C * 9 * H * H, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
void BM_OnednnConv3x3(benchmark::State& state) { conv3x3(state, false); }
void BM_OnednnConv3x3Cold(benchmark::State& state) { conv3x3(state, true); }
BENCHMARK(BM_OnednnConv3x3)->ArgName("pass")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OnednnConv3x3Cold)->ArgName("pass")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

/// ResNet-50's KxK convs at batch 32: C, K, kernel, stride, pad, input size.
struct KxK {
  int64_t C, K, R, stride, pad, H;
};
constexpr KxK kKxK[] = {{3, 64, 7, 2, 3, 224},   {64, 64, 3, 1, 1, 56},   {128, 128, 3, 2, 1, 56},
                        {128, 128, 3, 1, 1, 28}, {256, 256, 3, 2, 1, 28}, {256, 256, 3, 1, 1, 14},
                        {512, 512, 3, 2, 1, 14}, {512, 512, 3, 1, 1, 7}};

/// The weight gradient of kKxK[range(1)], direct (range(0) = 0) or im2col + matmuls (1), in
/// f32 or bf16 (`dt`).
void conv_bwd_weights(benchmark::State& state, DType dt) {
  std::unique_ptr<Backend> holder = make_backend("onednn");
  auto& be = dynamic_cast<onednn::OnednnBackend&>(*holder);
  if (dt == DType::bf16 && !onednn::OnednnBackend::bf16_available()) {
    state.SkipWithError("no bf16 on this CPU");
    return;
  }
  const KxK s = kKxK[state.range(1)];
  onednn::set_conv_algo(state.range(0) ? onednn::ConvAlgo::matmul : onednn::ConvAlgo::direct);
  std::mt19937 rng(1);
  const int64_t N = 32, OH = (s.H + 2 * s.pad - s.R) / s.stride + 1;
  auto as_dt = [&](const Tensor& f) {
    if (dt == DType::f32) return f;
    Tensor t = Tensor::empty(f.shape(), dt, f.layout());
    be.copy(f, t);
    return t;
  };
  const Tensor x = as_dt(random_tensor({N, s.C, s.H, s.H}, rng, Layout::NHWC));
  const Tensor dy = as_dt(random_tensor({N, s.K, OH, OH}, rng, Layout::NHWC));
  Tensor dw = Tensor::empty({s.K, s.C, s.R, s.R}, dt);
  const Conv2dParams p{static_cast<int>(s.stride), static_cast<int>(s.pad)};
  be.conv2d_bwd_weights(p, x, dy, dw);  // primitive creation
  for (auto _ : state) {
    be.conv2d_bwd_weights(p, x, dy, dw);
    be.synchronize();
  }
  onednn::set_conv_algo(std::nullopt);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * N * s.K * s.C * s.R * s.R * OH * OH, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
void BM_ConvBwdWeightsBf16(benchmark::State& state) { conv_bwd_weights(state, DType::bf16); }
void BM_ConvBwdWeightsF32(benchmark::State& state) { conv_bwd_weights(state, DType::f32); }
BENCHMARK(BM_ConvBwdWeightsBf16)
    ->ArgNames({"im2col", "shape"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5, 6, 7}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ConvBwdWeightsF32)
    ->ArgNames({"im2col", "shape"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5, 6, 7}})
    ->Unit(benchmark::kMillisecond);

/// The bf16 weight gradient of kKxK[range(0)] by our own AVX-512 BF16 GEMM (conv_wgrad_bf16
/// called directly; skipped where it does not fit); oneDNN's is BM_ConvBwdWeightsBf16/im2col:0.
/// What conv_own_wgrad_allowed's rule for KxK convs comes from.
void BM_ConvBwdWeightsBf16Own(benchmark::State& state) {
  const KxK s = kKxK[state.range(0)];
  const int64_t N = 32, OH = (s.H + 2 * s.pad - s.R) / s.stride + 1;
  const onednn::WgradGeo g{N, s.H, s.H, s.C, s.K, s.stride, s.R, s.R, s.pad};
  if (!onednn::conv_wgrad_bf16_fits(g)) {
    state.SkipWithError("no own kernel for this shape in this build");
    return;
  }
  std::unique_ptr<Backend> holder = make_backend("onednn");
  std::mt19937 rng(1);
  auto as_bf16 = [&](const Tensor& f) {
    Tensor t = Tensor::empty(f.shape(), DType::bf16, f.layout());
    holder->copy(f, t);
    return t;
  };
  const Tensor x = as_bf16(random_tensor({N, s.C, s.H, s.H}, rng, Layout::NHWC));
  const Tensor dy = as_bf16(random_tensor({N, s.K, OH, OH}, rng, Layout::NHWC));
  Tensor dw = Tensor::empty({s.K, s.C, s.R, s.R}, DType::bf16);
  std::vector<float> work(static_cast<size_t>(onednn::conv_wgrad_bf16_workspace(g)));
  for (auto _ : state)
    onednn::conv_wgrad_bf16(g, x.data_as<uint16_t>(), dy.data_as<uint16_t>(),
                            dw.data_as<uint16_t>(), work.data());
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * N * s.K * s.C * s.R * s.R * OH * OH, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ConvBwdWeightsBf16Own)
    ->ArgNames({"shape"})
    ->DenseRange(0, 7)
    ->Unit(benchmark::kMillisecond);

/// ResNet-50's 1x1 convs at batch 32 (the downsampling ones with their stride 2; H the input's).
constexpr KxK k1x1[] = {
    {64, 64, 1, 1, 0, 56},    {64, 256, 1, 1, 0, 56},   {256, 64, 1, 1, 0, 56},
    {256, 128, 1, 1, 0, 56},  {128, 512, 1, 1, 0, 28},  {512, 128, 1, 1, 0, 28},
    {256, 1024, 1, 1, 0, 14}, {1024, 256, 1, 1, 0, 14}, {512, 2048, 1, 1, 0, 7},
    {2048, 512, 1, 1, 0, 7},  {256, 512, 1, 2, 0, 56},  {1024, 2048, 1, 2, 0, 14},
    {512, 1024, 1, 2, 0, 28}, {512, 256, 1, 1, 0, 28},  {1024, 512, 1, 1, 0, 14}};

/// The weight gradient of k1x1[range(1)] in `dt` (f32 or bf16): oneDNN's direct kernel
/// (range(0) = 0, the backend under policy `direct`) or our own AVX-512 GEMM (1,
/// conv_wgrad_bf16 / conv_wgrad_f32 called directly, at every shape; skipped where the build
/// has none). What conv_own_wgrad_allowed's rules for 1x1s come from.
void conv1x1_bwd_weights(benchmark::State& state, DType dt) {
  std::unique_ptr<Backend> holder = make_backend("onednn");
  auto& be = dynamic_cast<onednn::OnednnBackend&>(*holder);
  const bool bf16 = dt == DType::bf16;
  if (bf16 && !onednn::OnednnBackend::bf16_available()) {
    state.SkipWithError("no bf16 on this CPU");
    return;
  }
  const KxK s = k1x1[state.range(1)];
  const bool own = state.range(0) != 0;
  if (own && !(bf16 ? onednn::conv_wgrad_bf16_built() : onednn::conv_wgrad_f32_built())) {
    state.SkipWithError("no own 1x1 weight-gradient kernel of this precision in this build");
    return;
  }
  onednn::set_conv_algo(onednn::ConvAlgo::direct);
  std::mt19937 rng(1);
  const int64_t N = 32, OH = (s.H - 1) / s.stride + 1;
  auto as_dt = [&](const Tensor& f) {
    if (!bf16) return f;
    Tensor t = Tensor::empty(f.shape(), DType::bf16, f.layout());
    be.copy(f, t);
    return t;
  };
  const Tensor x = as_dt(random_tensor({N, s.C, s.H, s.H}, rng, Layout::NHWC));
  const Tensor dy = as_dt(random_tensor({N, s.K, OH, OH}, rng, Layout::NHWC));
  Tensor dw = Tensor::empty({s.K, s.C, 1, 1}, dt);
  const Conv2dParams p{static_cast<int>(s.stride), 0};
  const onednn::WgradGeo g{N, s.H, s.H, s.C, s.K, s.stride};
  std::vector<float> work(static_cast<size_t>(
      std::max<int64_t>(1, bf16 ? onednn::conv_wgrad_bf16_workspace(g)
                                : onednn::conv_wgrad_f32_workspace(g))));
  auto run = [&] {
    if (own && bf16)
      onednn::conv_wgrad_bf16(g, x.data_as<uint16_t>(), dy.data_as<uint16_t>(),
                              dw.data_as<uint16_t>(), work.data());
    else if (own)
      onednn::conv_wgrad_f32(g, x.data_as<float>(), dy.data_as<float>(), dw.data_as<float>(),
                             work.data());
    else
      be.conv2d_bwd_weights(p, x, dy, dw);
  };
  run();  // primitive creation, first touch
  for (auto _ : state) {
    run();
    be.synchronize();
  }
  onednn::set_conv_algo(std::nullopt);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * N * s.K * s.C * OH * OH, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
void BM_Conv1x1BwdWeightsBf16(benchmark::State& state) { conv1x1_bwd_weights(state, DType::bf16); }
void BM_Conv1x1BwdWeightsF32(benchmark::State& state) { conv1x1_bwd_weights(state, DType::f32); }
BENCHMARK(BM_Conv1x1BwdWeightsBf16)
    ->ArgNames({"own", "shape"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Conv1x1BwdWeightsF32)
    ->ArgNames({"own", "shape"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}})
    ->Unit(benchmark::kMillisecond);

/// Evicts the caches (writes a 64 MiB buffer, twice this machine's 32 MiB L3) and then reads
/// `warm` back in: before a timed call, the state of a layer's weights inside a whole network
/// at batch 1, which streams ~100 MB of weights through the caches per image while each
/// layer's input was just written by the layer before.
void evict_caches_but(const Tensor& warm) {
  // On all threads (as a layer runs), so that the timed call finds them awake, as the
  // network's next layer does.
  static std::vector<char> junk(64 << 20);
  const auto* p = static_cast<const char*>(warm.data());
  const auto n = static_cast<int64_t>(junk.size()), m = static_cast<int64_t>(warm.nbytes());
  char sum = 0;
#pragma omp parallel reduction(+ : sum)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i += 64) junk[i] = static_cast<char>(junk[i] + 1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; i += 64) sum = static_cast<char>(sum + p[i]);
  }
  benchmark::DoNotOptimize(sum);
}

/// The CPU inference engine's f32 3x3 stride-1 conv of kKxK[range(2)] on nChw8c activations at
/// batch range(1), with bias and ReLU: oneDNN's direct convolution (range(0) = 0) or
/// WinogradF43Conv (1); range(3) = 1: the weights evicted from the caches before each call
/// (evict_caches_but), as inside the network.
void BM_Conv3x3InferF32(benchmark::State& state) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const KxK s = kKxK[state.range(2)];
  const int64_t N = state.range(1);
  std::mt19937 rng(1);
  const Tensor x = random_tensor({N, s.C, s.H, s.H}, rng, Layout::NCHW, 0.f, 1.f);  // nChw8c
  const Tensor w = random_tensor({s.K, s.C, 3, 3}, rng, Layout::NCHW, -0.05f, 0.05f);
  const Tensor b = random_tensor({s.K}, rng, Layout::NCHW);
  Tensor y = Tensor::empty({N, s.K, s.H, s.H}, DType::f32);
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::function<void()> run;
  std::unique_ptr<onednn::WinogradF43Conv> wino;
  const memory::desc xd({N, s.C, s.H, s.H}, memory::data_type::f32, tag::nChw8c),
      yd({N, s.K, s.H, s.H}, memory::data_type::f32, tag::nChw8c),
      wd({s.K, s.C, 3, 3}, memory::data_type::f32, tag::any),
      bd({s.K}, memory::data_type::f32, tag::x);
  memory xm(xd, eng, const_cast<void*>(x.data())), ym(yd, eng, y.data()),
      bm(bd, eng, const_cast<void*>(b.data()));
  dnnl::convolution_forward conv;
  memory wm;
  if (state.range(0)) {
    wino = std::make_unique<onednn::WinogradF43Conv>(
        onednn::WinogradF43Conv::Shape{N, s.C, s.K, s.H, s.H},
        onednn::WinogradF43Conv::transform_weights(w.data_as<const float>(), s.C, s.K),
        b.data_as<const float>(), true, false);
    run = [&] { wino->run(x.data_as<const float>(), y.data_as<float>()); };
  } else {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, xd, wd, bd, yd,
                                        {1, 1}, {1, 1}, {1, 1}),
        attr, eng);
    memory wu({{s.K, s.C, 3, 3}, memory::data_type::f32, tag::oihw}, eng,
              const_cast<void*>(w.data()));
    wm = memory(pd.weights_desc(), eng);
    dnnl::reorder(wu, wm).execute(strm, wu, wm);
    conv = dnnl::convolution_forward(pd);
    run = [&] {
      conv.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm},
                          {DNNL_ARG_DST, ym}});
      strm.wait();
    };
  }
  run();
  const bool cold = state.range(3) != 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches_but(x);
      state.ResumeTiming();
    }
    run();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * N * s.K * s.C * 9 * s.H * s.H, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
/// The training backend's forward (range(1) = 0) or backward-data (1) 3x3 stride-1 conv of
/// kKxK[range(3)] at batch range(2), NHWC f32, direct (range(0) = 0) or our Winograd (1); the
/// weight gradient (range(1) = 2) as im2col + matmuls (0) or our Winograd (1).
/// The oneDNN backend's 3x3 stride-1 conv of kKxK[range(3)] at batch range(2), NHWC, in `dt`:
/// pass (range(1)) 0 forward, 1 backward data, 2 the weight gradient; range(0) 0 oneDNN's
/// direct kernel (policy `direct`), 1 our Winograd (policy `matmul`; the f32 weight gradient:
/// 0 im2col + matmuls, 1 our Winograd).
void conv3x3_train(benchmark::State& state, DType dt) {
  std::unique_ptr<Backend> holder = make_backend("onednn");
  auto& be = dynamic_cast<onednn::OnednnBackend&>(*holder);
  if (dt == DType::bf16 && !onednn::OnednnBackend::bf16_available()) {
    state.SkipWithError("no bf16 on this CPU");
    return;
  }
  const KxK s = kKxK[state.range(3)];
  onednn::set_conv_algo(state.range(0) ? onednn::ConvAlgo::matmul : onednn::ConvAlgo::direct);
  std::mt19937 rng(1);
  const int64_t N = state.range(2);
  auto as_dt = [&](const Tensor& f) {
    if (dt == DType::f32) return f;
    Tensor t = Tensor::empty(f.shape(), dt, f.layout());
    be.copy(f, t);
    return t;
  };
  Tensor x = as_dt(random_tensor({N, s.C, s.H, s.H}, rng, Layout::NHWC));  // dx for bwd data
  const Tensor w = as_dt(random_tensor({s.K, s.C, 3, 3}, rng, Layout::NHWC, -0.05f, 0.05f));
  Tensor y = as_dt(random_tensor({N, s.K, s.H, s.H}, rng, Layout::NHWC));  // dy for the bwd
  const Conv2dParams p{1, 1};
  const int64_t pass = state.range(1);
  Tensor dw = Tensor::empty({s.K, s.C, 3, 3}, dt, Layout::NHWC);
  auto run = [&] {
    if (pass == 0)
      be.conv2d_fwd(p, x, w, y);
    else if (pass == 1)
      be.conv2d_bwd_data(p, y, w, x);
    else if (state.range(0))
      onednn::conv_bwd_weights_own_winograd(be, p, x, y, dw);
    else if (dt == DType::f32)
      onednn::conv_bwd_weights_im2col(be, p, x, y, dw);
    else
      be.conv2d_bwd_weights(p, x, y, dw);
    be.synchronize();
  };
  run();
  for (auto _ : state) run();
  onednn::set_conv_algo(std::nullopt);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * N * s.K * s.C * 9 * s.H * s.H, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
void BM_Conv3x3TrainF32(benchmark::State& state) { conv3x3_train(state, DType::f32); }
void BM_Conv3x3TrainBf16(benchmark::State& state) { conv3x3_train(state, DType::bf16); }
BENCHMARK(BM_Conv3x3TrainBf16)
    ->ArgNames({"own", "pass", "n", "shape"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {32}, {1, 3, 5, 7}})
    ->ArgsProduct({{0, 1}, {0}, {1}, {1, 3, 5}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_Conv3x3TrainF32)
    ->ArgNames({"own", "pass", "n", "shape"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {32}, {1, 3, 5, 7}})
    ->ArgsProduct({{0, 1}, {2}, {1, 2, 4, 8, 16}, {1, 3, 5, 7}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_Conv3x3InferF32)
    ->ArgNames({"wino", "n", "shape", "cold"})
    ->ArgsProduct({{0, 1}, {1, 2, 4, 32}, {1, 3, 5, 7}, {0, 1}})
    ->Unit(benchmark::kMillisecond);


/// ResNet-50's batch-norm activations at batch 32: rows M = N*H*W, channels C.
constexpr struct {
  int64_t M, C;
} kBn[] = {{32 * 112 * 112, 64}, {32 * 56 * 56, 64}, {32 * 56 * 56, 256}, {32 * 28 * 28, 128},
           {32 * 28 * 28, 512},  {32 * 14 * 14, 256}, {32 * 14 * 14, 1024}, {32 * 7 * 7, 512},
           {32 * 7 * 7, 2048}};

template <class T>
void batchnorm_train(benchmark::State& state) {
  const auto [M, C] = kBn[state.range(1)];
  const int op = static_cast<int>(state.range(0));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.5f, 1.f);
  auto fill = [&] {
    std::vector<T> v(static_cast<size_t>(M * C));
    for (T& e : v) narrow(e, nd(rng));
    return v;
  };
  std::vector<T> x = fill(), z = fill(), y = fill(), g1 = fill(), g2 = fill(), dx = fill();
  std::vector<float> gamma(C, 1.1f), beta(C, 0.1f), mean(C), var(C), dg(C), db(C);
  onednn::bn_nhwc_fwd_train(x.data(), z.data(), y.data(), M, C, gamma.data(), beta.data(), 1e-5f,
                            true, mean.data(), var.data());
  auto run = [&] {
    switch (op) {
      case 0:
      case 1:
        onednn::bn_nhwc_fwd_train(x.data(), op == 1 ? z.data() : nullptr, dx.data(), M, C,
                                  gamma.data(), beta.data(), 1e-5f, true, mean.data(),
                                  var.data());
        break;
      case 2:
        onednn::bn_nhwc_bwd(x.data(), y.data(), g1.data(), dx.data(), M, C, gamma.data(),
                            mean.data(), var.data(), 1e-5f, true, dg.data(), db.data());
        break;
      default:
        onednn::bn_nhwc_add_relu_bwd(x.data(), y.data(), g1.data(), g2.data(), z.data(),
                                     dx.data(), M, C, gamma.data(), mean.data(), var.data(),
                                     1e-5f, dg.data(), db.data());
    }
  };
  run();
  for (auto _ : state) run();
  // Tensors read or written per pass: forward x, x (+ z), y; backward x, dy, y | x, dy, y, dx;
  // fused backward x, y, g1, g2, dres | x, dres, dx.
  const int tensors[] = {3, 4, 7, 8};
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * tensors[op] * M * C *
                          static_cast<int64_t>(sizeof(T)));
}
void BM_BatchnormTrain(benchmark::State& state) {
  if (state.range(2) == 0)
    batchnorm_train<uint16_t>(state);
  else
    batchnorm_train<float>(state);
}
BENCHMARK(BM_BatchnormTrain)
    ->ArgNames({"op", "shape", "f32"})
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
