// Whole-network parity of rn50::ResNet against torchvision, on every backend of the build.
//
// tests/parity/torch_golden.py (run with /usr/bin/python3; skipped when it cannot import torch)
// builds the torchvision network, perturbs its BatchNorms, and records in float64: the initial
// state_dict, an input batch and labels, train-mode logits and label-smoothed (0.1) loss, every
// parameter gradient, the running statistics after the training forward, eval-mode logits, and
// the losses of SGD steps with the DLE recipe (momentum 0.875, weight decay 1/32768 on conv and
// fc weights only, constant lr). The golden files are cached in the build directory and
// regenerated when the script is newer or the arguments change.
//
// Here the same weights are loaded with load_state_dict on every backend of the build (ref:
// NHWC, not the full resnet50; others: NCHW and NHWC), and forward / softmax_xent / backward /
// sgd_update run in float32. The CUDA cases (TF32 off, cuDNN's deterministic algorithms) skip
// without a GPU, saying so (RN50_REQUIRE=gpu fails them: the GPU window's verdict on whether the
// CUDA step computes torchvision's network, scripts/gpu-window.sh).
//
// Cases: resnet18 (BasicBlock wiring), bottleneck1111 = torchvision ResNet(Bottleneck,
// [1, 1, 1, 1]) (Bottleneck wiring: v1.5 stride on conv2, downsample, bn3, join), both strict;
// the full resnet50, whose float32 gradients are chaotic (below), checked coarsely.
//
// Tolerances, strict cases (|a - b| <= atol + rtol * |ref| unless stated):
//   logits, eval logits, loss         atol 1e-4, rtol 1e-4
//   running_mean / running_var after  atol 1e-4, rtol 1e-4; num_batches_tracked exact
//   SGD losses (3 steps)              atol 1e-4
//   gradients, per tensor             ||a - b|| / ||ref|| <= 2e-3, max|a - b| / max|ref| <= 2e-2;
//                                     whole slab ||a - b|| / ||ref|| <= 1e-3
// Measured: ref ~1e-6 everywhere; onednn forward <= 6e-6, gradients max-rel <= 1.6e-5.
// Why gradients are compared in norm: a ReLU whose float64 input lies within float32 rounding of
// zero may flip in a float32 implementation, and one flip moves a whole gradient row (through
// the BatchNorm backward's batch means) by up to ~1e-2 of the tensor's max-abs. Example:
// bottleneck1111 with an earlier input draw had a layer2.0 join input at 7.6e-8 of its max-abs;
// onednn NHWC flipped it and gave max-rel 8e-3 / rel-L2 6e-4 in layer2.0.downsample.0.weight,
// everything else ~1e-5. The golden script therefore picks the input batch with the largest
// smallest-ReLU margin of 8 draws (--margin-tries), which makes flips rarer, not impossible.
// Under QAT the stem conv's outputs lie on an integer grid, so stem max-pool windows often hold
// two equal maxima; float64 rounding breaks such a tie in an order that depends on summation
// order (FMA or not: -march=native vs RN50_NATIVE=OFF), and the window's gradient goes to either
// one. Both are valid; only conv1.weight's gradient differs, by at most the golden's tie_slack,
// which is taken off its differences elementwise (torch_golden.py, maxpool_tie_slack).
//
// Full resnet50: at this size it is chaotic in float32. Torch itself (float32 vs float64, same
// weights) differs by up to 25% of a gradient's max-abs and 1.4% in relative L2 per tensor; a
// 1e-7 relative perturbation of the float64 weights alone moves gradients by 10%; after one SGD
// step at lr 1e-4 the float32 and float64 losses differ by 1e-2; torch's float32 logits are off
// by 7.7e-5 and running_var by 1.1e-4. Bounds: forward atol/rtol 2e-4; gradients rel-L2 <= 5e-2
// per tensor and for the slab; one SGD step, its loss within 5e-2 (the step moves it by ~0.3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>

#include "core/check.h"
#include "core/safetensors.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "require.h"

namespace rn50 {
namespace {

// The parity tolerances are those of direct convolution: Winograd's rounding (oneDNN's F(4x4,
// 3x3), on by default for f32 3x3 stride-1 convs, see src/backend/cpu/conv.cpp) is amplified by
// BatchNorm's backward on these small batches to about 1% in some weight gradients. Winograd
// itself is checked op by op against the reference in test_ops_conv_bn. Set before main().
[[maybe_unused]] const bool kDirectConv = (setenv("RN50_CONV_ALGO", "direct", 1), true);

namespace fs = std::filesystem;

const char* const kPython = rn50::test::python();
const std::string kScript = std::string(RN50_SOURCE_DIR) + "/tests/parity/torch_golden.py";

struct Tolerances {
  double fwd_atol, fwd_rtol;  ///< logits, eval logits, loss, running statistics
  double grad_l2;             ///< per tensor ||a - b|| / ||ref||
  double grad_max;            ///< per tensor max|a - b| / max|ref| (0: not checked)
  double slab_l2;             ///< whole gradient slab ||a - b|| / ||ref||
  double sgd;                 ///< |loss - ref| per SGD step
};

struct ParityCase {
  const char* id;
  const char* py_arch;  ///< torch_golden.py --arch
  ArchSpec arch;
  int classes, batch, size, seed;
  double lr;
  int steps;         ///< SGD steps (losses compared: steps + 1)
  int margin_tries;  ///< torch_golden.py --margin-tries
  Tolerances tol;
  bool qat = false;  ///< quantization-aware (ModelOptions::qat; torch_golden.py --qat)
};

// See the file comment for where each number comes from.
constexpr Tolerances kStrict{1e-4, 1e-4, 2e-3, 2e-2, 1e-3, 1e-4};
// Full resnet50: torch's own float32 forward is off by 7.7e-5 (logits) and 1.1e-4 (running_var
// of layer4.2.bn1, ~19) from float64 here, so the forward bounds are doubled; gradients and the
// loss after one SGD step are chaotic (see the file comment) and only checked coarsely.
constexpr Tolerances kChaotic{2e-4, 2e-4, 5e-2, 0, 5e-2, 5e-2};
// QAT. Fake quantization makes the network discontinuous: a value within float32 error of a
// rounding boundary of its 8-bit grid lands on the neighbouring code (one step, amax / 127),
// which moves later values across their boundaries too, so a float32 run drifts from torch's
// float64 one by far more than float32 rounding (measured on onednn: logits <= 4.5e-2, ranges
// <= 1.1e-1 of ~4, gradients rel-L2 <= 0.53 per tensor and 0.38 for the slab; a semantic error
// such as an unquantized identity shortcut gave logits 2e-1, ranges 1.04, slab 0.88). The strict
// check is therefore the ref backend computing in float64 (ModelOptions::compute_dtype f64, the
// same grids: ranges kept in float32 on both sides): kQatF64. Its SGD losses after the first
// update see the float32 master weights (torch: float64) land on other weight codes, hence the
// looser SGD bound.
constexpr Tolerances kQat{1e-1, 1e-1, 1.0, 0, 0.6, 1e-1};
constexpr Tolerances kQatF64{1e-5, 1e-5, 1e-4, 1e-3, 1e-4, 5e-2};

const ParityCase kCases[] = {
    {"resnet18", "resnet18", {"resnet18", false, {2, 2, 2, 2}}, 10, 4, 64, 11, 0.01, 3, 8,
     kStrict},
    {"bottleneck1111", "bottleneck:1,1,1,1", {"bottleneck1111", true, {1, 1, 1, 1}}, 10, 4, 64, 22,
     0.001, 3, 8, kStrict},
    // Two blocks per stage adds the identity-shortcut bottleneck blocks. Input draw: seed 47,
    // whose smallest ReLU margin is 4.4e-7 of its max-abs; seed 44's (2.5e-7, a join ReLU) flipped
    // on an AVX2-only CPU (oneDNN's jit:avx2 kernels: layer3.1.bn3.bias gradient max-rel 6.4e-2).
    // With seed 47 ref and onednn agree to 3e-5 (gradients) on AVX2, hence kStrict; float32 runs
    // still drift from the float64 golden after the second update (step-3 loss off by 1.6e-4 on
    // ref, 7e-3 on onednn), so: one SGD step.
    {"bottleneck2222", "bottleneck:2,2,2,2", {"bottleneck2222", true, {2, 2, 2, 2}}, 10, 4, 64, 47,
     0.001, 1, 8, kStrict},
    {"resnet50", "resnet50", {"resnet50", true, {3, 4, 6, 3}}, 16, 4, 64, 33, 1e-4, 1, 0,
     kChaotic},
    // QAT (fake quantization, straight-through backward) against torch's float64 model with
    // the same fake quantization (torch_golden.py --qat): BasicBlock and Bottleneck wiring, the
    // latter with a downsample's residual quantizer.
    {"resnet18_qat", "resnet18", {"resnet18", false, {2, 2, 2, 2}}, 10, 4, 64, 11, 0.01, 3, 2,
     kQat, true},
    {"bottleneck1111_qat", "bottleneck:1,1,1,1", {"bottleneck1111", true, {1, 1, 1, 1}}, 10, 4,
     64, 22, 0.001, 3, 2, kQat, true},
};

std::string golden_args(const ParityCase& c) {
  return fmt::format(
      "--arch {} --classes {} --batch {} --size {} --seed {} --lr {} --steps {} --margin-tries {}",
      c.py_arch, c.classes, c.batch, c.size, c.seed, c.lr, c.steps, c.margin_tries) +
         (c.qat ? " --qat" : "");
}

bool torch_available() {
  static const bool ok =
      std::system((std::string(kPython) + " -c 'import torch, torchvision' >/dev/null 2>&1")
                      .c_str()) == 0;
  return ok;
}

/// The golden file of a case: generated (or regenerated when stale) and loaded once per process.
const SafeTensorsFile& golden(const ParityCase& c) {
  static std::mutex mu;
  static std::map<std::string, SafeTensorsFile> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(c.id); it != cache.end()) return it->second;
  const std::string args = golden_args(c);
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "parity";
  fs::create_directories(dir);
  const fs::path file =
      dir / fmt::format("{}-{:016x}.safetensors", c.id, std::hash<std::string>{}(args));
  if (!fs::exists(file) || fs::last_write_time(file) < fs::last_write_time(kScript)) {
    const fs::path tmp = file.string() + ".tmp";
    const std::string cmd =
        fmt::format("{} {} {} --out {}", kPython, kScript, args, tmp.string());
    std::printf("[parity] generating %s\n  %s\n", file.c_str(), cmd.c_str());
    std::fflush(stdout);
    RN50_CHECK(std::system(cmd.c_str()) == 0, "golden generator failed: {}", cmd);
    fs::rename(tmp, file);
    // Drop this case's goldens for other arguments (each is 60-190 MB).
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (e.path() != file && n.rfind(std::string(c.id) + "-", 0) == 0) fs::remove(e.path());
    }
  }
  return cache.emplace(c.id, load_safetensors(file.string())).first->second;
}

/// Values of a host or backend tensor as doubles (f32/f64/i32/i64).
std::vector<double> values(Backend& be, const Tensor& t) {
  Tensor h = t;
  if (!t.is_cpu() || (t.ndim() == 4 && t.layout() != Layout::NCHW)) {
    h = Tensor::empty(t.shape(), t.dtype(), Layout::NCHW);
    be.copy(t, h);
  }
  std::vector<double> v(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i) {
    switch (h.dtype()) {
      case DType::f32: v[i] = h.data_as<float>()[i]; break;
      case DType::f64: v[i] = h.data_as<double>()[i]; break;
      case DType::i32: v[i] = h.data_as<int32_t>()[i]; break;
      case DType::i64: v[i] = static_cast<double>(h.data_as<int64_t>()[i]); break;
      default: ADD_FAILURE() << "unexpected dtype in " << h.str();
    }
  }
  return v;
}

const Tensor& gt(const SafeTensorsFile& g, const std::string& key) {
  auto it = g.tensors.find(key);
  if (it == g.tensors.end()) throw Error("golden file lacks '" + key + "'");
  return it->second;
}

/// Elementwise |a - b| <= atol + rtol * |b|; returns the max |a - b|.
double expect_close(const std::vector<double>& a, const std::vector<double>& b, double atol,
                    double rtol, const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  double worst = 0, worst_ratio = 0;
  size_t at = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::abs(a[i] - b[i]);
    worst = std::max(worst, d);
    const double r = d / (atol + rtol * std::abs(b[i]));
    if (!(r <= worst_ratio)) worst_ratio = r, at = i;  // also catches NaN
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << at << " is " << a[at] << ", expected "
                              << b[at] << " (atol " << atol << ", rtol " << rtol << ")";
  return worst;
}

struct GradError {
  double rel_max = 0;  ///< max|a-b| / max|b|
  double rel_l2 = 0;   ///< ||a-b|| / ||b||
};

/// Elementwise differences of gradient a from the golden b. slack (empty, or one value per
/// element): the part of |a - b| a valid gradient may show anyway (torch_golden.py's tie_slack:
/// the stem max pool's tied maxima), taken off each |a - b|.
std::vector<double> grad_diff(const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& slack) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    d[i] =
        slack.empty() ? a[i] - b[i] : std::max(0.0, std::abs(a[i] - b[i]) - slack[i] * (1 + 1e-6));
  return d;
}

/// Relative errors of the differences diff (grad_diff) against the golden b.
GradError grad_error(const std::vector<double>& diff, const std::vector<double>& b) {
  double dmax = 0, bmax = 0, d2 = 0, b2 = 0;
  for (size_t i = 0; i < diff.size(); ++i) {
    const double d = diff[i];
    dmax = std::max(dmax, std::abs(d));
    bmax = std::max(bmax, std::abs(b[i]));
    d2 += d * d;
    b2 += b[i] * b[i];
  }
  if (std::isnan(d2)) return {INFINITY, INFINITY};
  return {dmax / std::max(bmax, 1e-30), std::sqrt(d2 / std::max(b2, 1e-60))};
}

struct Param {
  int case_index;
  std::string backend;
  Layout layout;
  /// Compute dtype: f64 for the QAT cases on the ref backend (see kQatF64), else f32.
  DType dtype = DType::f32;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << kCases[p.case_index].id << "/" << p.backend << "/" << layout_name(p.layout) << "/"
      << dtype_name(p.dtype);
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  // Every backend compiled in: the CUDA cases are listed without a GPU too, and skip then
  // (RN50_REQUIRE=gpu, as the GPU window sets it, fails them instead).
  for (int c = 0; c < static_cast<int>(std::size(kCases)); ++c)
    for (const std::string& b : compiled_backends()) {
      // The naive ref backend runs NHWC only and not the full resnet50 (minutes per step).
      if (b == "ref") {
        if (std::string(kCases[c].id) != "resnet50")
          out.push_back({c, b, Layout::NHWC, kCases[c].qat ? DType::f64 : DType::f32});
        continue;
      }
      out.push_back({c, b, Layout::NCHW});
      out.push_back({c, b, Layout::NHWC});
    }
  return out;
}

class ModelParity : public ::testing::TestWithParam<Param> {};

TEST_P(ModelParity, MatchesTorchvision) {
  RN50_REQUIRE_OR_SKIP("torch", torch_available(),
                       kPython << " cannot import torch and torchvision; the torchvision parity "
                               << "test needs them (Debian python3-torch, python3-torchvision)");
  const Param& P = GetParam();
  if (P.backend == "cuda") {
    RN50_REQUIRE_OR_SKIP("gpu", cuda_device_count() > 0,
                         "no usable GPU: " << cuda_unavailable_reason());
  }
  const ParityCase& C = kCases[P.case_index];
  const Tolerances& T = P.dtype == DType::f64 ? kQatF64 : C.tol;
  const SafeTensorsFile& g = golden(C);
  BackendOptions bo;
  bo.allow_tf32 = false;  // strict f32 tolerances: no TF32 on CUDA
  auto be = make_backend(P.backend, bo);

  ModelOptions opt;
  opt.num_classes = C.classes;
  opt.layout = P.layout;
  opt.qat = C.qat;
  opt.compute_dtype = P.dtype;
  ResNet model(*be, C.arch, opt);
  std::map<std::string, Tensor> init;
  for (const auto& [k, t] : g.tensors)
    if (k.rfind("init.", 0) == 0) init[k.substr(5)] = t;
  model.load_state_dict(init, /*strict=*/true);

  // Input and labels on the backend, in the model's layout.
  const Tensor& xin = gt(g, "input");
  Tensor x = be->alloc(xin.shape(), P.dtype, P.layout);
  be->copy(xin.to_layout(P.layout), x);
  const Tensor& lab = gt(g, "labels");
  Tensor labels = be->alloc(lab.shape(), DType::i32);
  be->copy(lab, labels);
  const int64_t N = x.n(), K = C.classes;
  Tensor loss = be->alloc({1}, DType::f32), probs = be->alloc({N, K}, DType::f32),
         dlogits = be->alloc({N, K}, DType::f32);
  const float smoothing = 0.1f;

  // ---- training forward + backward ----
  const Tensor& logits = model.forward(x, true);
  const double e_logits =
      expect_close(values(*be, logits), values(*be, gt(g, "logits")), T.fwd_atol, T.fwd_rtol,
                   "logits");
  be->softmax_xent_fwd(logits, labels, smoothing, loss, probs);
  const double e_loss =
      expect_close(values(*be, loss), values(*be, gt(g, "loss")), T.fwd_atol, T.fwd_rtol, "loss");
  be->softmax_xent_bwd(probs, labels, smoothing, 1.f, dlogits, Tensor());
  model.backward(dlogits);
  be->synchronize();

  GradError worst;
  std::string worst_max_name, worst_l2_name;
  double d2 = 0, b2 = 0;
  for (const ParamInfo& p : model.params()) {
    auto a = values(*be, model.grad(p.name));
    auto b = values(*be, gt(g, "grad." + p.name));
    ASSERT_EQ(a.size(), b.size()) << p.name;
    const auto ts = g.tensors.find("tie_slack." + p.name);
    const std::vector<double> slack =
        ts == g.tensors.end() ? std::vector<double>() : values(*be, ts->second);
    const std::vector<double> diff = grad_diff(a, b, slack);
    GradError e = grad_error(diff, b);
    for (size_t i = 0; i < a.size(); ++i) d2 += diff[i] * diff[i], b2 += b[i] * b[i];
    if (!(e.rel_max <= worst.rel_max)) worst.rel_max = e.rel_max, worst_max_name = p.name;
    if (!(e.rel_l2 <= worst.rel_l2)) worst.rel_l2 = e.rel_l2, worst_l2_name = p.name;
    EXPECT_LE(e.rel_l2, T.grad_l2) << "gradient of " << p.name << ": ||a-b||/||ref|| "
                                   << e.rel_l2 << " (max rel " << e.rel_max << ")";
    if (T.grad_max > 0) {
      EXPECT_LE(e.rel_max, T.grad_max) << "gradient of " << p.name << ": max|a-b|/max|ref| "
                                       << e.rel_max << " (rel L2 " << e.rel_l2 << ")";
    }
  }
  const double slab_l2 = std::sqrt(d2 / b2);
  EXPECT_LE(slab_l2, T.slab_l2) << "whole gradient slab, relative L2";

  double e_stats = 0;
  for (const BufferInfo& b : model.buffers()) {
    auto a = values(*be, model.buffer(b.name));
    auto r = values(*be, gt(g, "after." + b.name));
    if (b.dtype == DType::i64) {
      EXPECT_EQ(a, r) << b.name;
    } else {
      e_stats = std::max(e_stats, expect_close(a, r, T.fwd_atol, T.fwd_rtol, "after " + b.name));
    }
  }

  // ---- QAT: the activation ranges after the training forward ----
  double e_qat = 0;
  for (const auto& [key, t] : model.state_dict()) {
    if (key.size() < 6 || key.compare(key.size() - 6, 6, "._amax") != 0) continue;
    e_qat = std::max(e_qat, expect_close(values(*be, t), values(*be, gt(g, "qat." + key)),
                                         P.dtype == DType::f64 ? 1e-12 : 0.2, 0, "QAT range " + key));
  }
  if (C.qat) std::printf("[parity] %s: QAT ranges within %.2e\n", C.id, e_qat);

  // ---- eval forward with the initial running statistics ----
  model.load_state_dict(init, true);
  const double e_eval = expect_close(values(*be, model.forward(x, false)),
                                     values(*be, gt(g, "eval_logits")), T.fwd_atol, T.fwd_rtol,
                                     "eval logits");

  // ---- 3 SGD steps, DLE recipe (torch.optim.SGD semantics, see Backend::sgd_update) ----
  model.load_state_dict(init, true);
  Tensor mbuf = be->alloc({model.num_params()}, DType::f32);
  be->zero(mbuf);
  SgdParams sp;
  sp.lr = static_cast<float>(C.lr);
  sp.momentum = 0.875f;
  sp.weight_decay = 1.f / 32768.f;
  sp.decay_count = model.decay_count();
  auto ref_losses = values(*be, gt(g, "sgd_losses"));
  std::vector<double> losses;
  for (size_t s = 0; s < ref_losses.size(); ++s) {
    const Tensor& lg = model.forward(x, true);
    be->softmax_xent_fwd(lg, labels, smoothing, loss, probs);
    losses.push_back(values(*be, loss)[0]);
    if (s + 1 == ref_losses.size()) break;
    be->softmax_xent_bwd(probs, labels, smoothing, 1.f, dlogits, Tensor());
    model.backward(dlogits);
    be->sgd_update(sp, model.param_slab(), model.grad_slab(), mbuf);
  }
  double e_sgd = 0;
  for (size_t s = 0; s < losses.size(); ++s) {
    const double d = std::abs(losses[s] - ref_losses[s]);
    {
      EXPECT_LE(d, s == 0 ? T.fwd_atol + T.fwd_rtol * std::abs(ref_losses[s]) : T.sgd)
          << "SGD loss at step " << s << ": " << losses[s] << " vs "
                         << ref_losses[s];
      e_sgd = std::max(e_sgd, d);
    }
  }
  std::string sgd_all;
  for (size_t s = 0; s < losses.size(); ++s)
    sgd_all += fmt::format(" {:+.1e}", losses[s] - ref_losses[s]);

  auto mg = g.metadata.find("relu_margin");
  auto ties = g.metadata.find("pool_ties");
  std::printf(
      "[parity] %s: golden's smallest ReLU margin %s, stem max-pool windows with tied "
      "maxima %s\n",
      C.id, mg == g.metadata.end() ? "?" : mg->second.c_str(),
      ties == g.metadata.end() ? "?" : ties->second.c_str());
  std::printf(
      "[parity] %s %s %s: logits %.2e loss %.2e eval %.2e stats %.2e | grad max-rel %.2e (%s) "
      "rel-L2 %.2e (%s) slab-L2 %.2e | sgd %.2e (diffs%s)\n",
      C.id, P.backend.c_str(), layout_name(P.layout), e_logits, e_loss, e_eval, e_stats,
      worst.rel_max, worst_max_name.c_str(), worst.rel_l2, worst_l2_name.c_str(), slab_l2, e_sgd,
      sgd_all.c_str());
}

INSTANTIATE_TEST_SUITE_P(Torchvision, ModelParity, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return std::string(kCases[i.param.case_index].id) + "_" +
                                  i.param.backend + "_" + layout_name(i.param.layout) +
                                  (i.param.dtype == DType::f64 ? "_F64" : "");
                         });

}  // namespace
}  // namespace rn50
