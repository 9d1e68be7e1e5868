// Quantization-aware training (--qat; src/core/fake_quant.h, src/model/qat.h):
//  * the fake-quantization ops against their definition: torch.fake_quantize_per_tensor_affine
//    and fake_quantize_per_channel_affine bit for bit on random values and exact ties (needs
//    /usr/bin/python3 with torch), and every CPU backend bit-equal to the reference (f32; bf16
//    against the f32 result rounded once);
//  * the moving-average range: after batch maxima 2, 4, 1 it is 1.526316, 2.439114, 2.020646
//    (the vectors; Paddle's FindMovingAverageAbsMaxFunctor), an eval forward leaves it,
//    a non-finite batch leaves it;
//  * the quantizers of resnet18/resnet50 (names, counts, the residual ones);
//  * `rn50 train --qat` from float weights: the checkpoint holds the ranges; resuming with --qat
//    restores them; loading them without --qat is refused naming --qat; eval with --qat works.
// The model-level forward/backward (fake quantization placement, the straight-through
// gradient) is checked against torch in tests/test_model_parity.cpp (the *_qat cases).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/fake_quant.h"
#include "core/safetensors.h"
#include "model/qat.h"
#include "require.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/train.h"
#include "step_test_util.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

using rn50_test::TempDir;
namespace fs = std::filesystem;

/// Random values of magnitude up to ~3 amax with a share of exact ties (k + 0.5) * step.
std::vector<float> values_with_ties(int64_t n, float amax, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.f, amax);
  std::uniform_int_distribution<int> code(-140, 140);
  std::vector<float> v(static_cast<size_t>(n));
  const float s = fake_quant::step_of(amax);
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = i % 4 == 0 ? (static_cast<float>(code(g)) + 0.5f) * s : nd(g);
  return v;
}

Tensor host(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

Tensor state_of(Backend& be, float amax, float st, float acc) {
  Tensor h = Tensor::zeros({fake_quant::state_size}, DType::f32);
  h.data_as<float>()[fake_quant::amax] = amax;
  h.data_as<float>()[fake_quant::state] = st;
  h.data_as<float>()[fake_quant::accum] = acc;
  Tensor d = be.alloc({fake_quant::state_size}, DType::f32);
  be.copy(h, d);
  return d;
}

std::vector<float> to_host(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::f32, t.ndim() == 4 ? t.layout() : Layout::NCHW);
  be.copy(t, h);
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
}

TEST(FakeQuant, MovingAverageVectors) {
  for (const std::string& name : available_backends()) {
    SCOPED_TRACE(name);
    auto be = make_backend(name);
    Tensor st = state_of(*be, 1, 1, 1);
    const float want[] = {1.526316f, 2.439114f, 2.020646f};
    int i = 0;
    for (float m : {2.f, 4.f, 1.f}) {
      Tensor x = be->alloc({2, 3, 4, 4}, DType::f32, Layout::NHWC);
      std::vector<float> v = values_with_ties(x.numel(), 0.2f, 7 + i);
      for (float& e : v) e = std::max(-m * 0.9f, std::min(m * 0.9f, e));
      v[5] = i % 2 ? m : -m;  // the batch's max |x|
      be->copy(host(v, x.shape()).to_layout(Layout::NHWC), x);
      Tensor y = be->alloc(x.shape(), DType::f32, Layout::NHWC);
      be->fake_quant_act(x, st, true, y);
      EXPECT_NEAR(to_host(*be, st)[fake_quant::amax], want[i], 1e-6) << "after max " << m;
      ++i;
    }
    // An eval forward and a non-finite batch leave the range.
    const std::vector<float> before = to_host(*be, st);
    Tensor x = be->alloc({8}, DType::f32);
    std::vector<float> v = values_with_ties(8, 1.f, 3);
    be->copy(host(v, {8}), x);
    Tensor y = be->alloc({8}, DType::f32);
    be->fake_quant_act(x, st, false, y);
    v[3] = NAN;
    be->copy(host(v, {8}), x);
    be->fake_quant_act(x, st, true, y);
    v[3] = INFINITY;
    be->copy(host(v, {8}), x);
    be->fake_quant_act(x, st, true, y);
    const std::vector<float> after = to_host(*be, st);
    for (int k : {0, 1, 2}) EXPECT_EQ(after[k], before[k]) << "state element " << k;
  }
}

/// The reference backend's results (the definition in f32) for x with range amax, and w.
struct Expected {
  std::vector<float> act, weight;
};

Expected reference(const Tensor& x, float amax, const Tensor& w) {
  auto ref = make_backend("ref");
  Tensor st = state_of(*ref, amax, 1, amax);
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.layout());
  ref->fake_quant_act(x, st, false, y);
  Tensor wy = Tensor::empty(w.shape(), DType::f32, w.layout());
  ref->fake_quant_weight(w, wy);
  return {to_host(*ref, y), to_host(*ref, wy)};
}

TEST(FakeQuant, BackendsBitEqualToReference) {
  const float amax = 2.3f;
  Tensor x = host(values_with_ties(2 * 16 * 5 * 5, amax, 1), {2, 16, 5, 5});
  std::vector<float> wv = values_with_ties(8 * 16 * 3 * 3, 0.1f, 2);
  for (int i = 0; i < 16 * 9; ++i) wv[3 * 16 * 9 + i] = 0.f;  // an all-zero output channel
  Tensor w = host(wv, {8, 16, 3, 3});
  const Expected want = reference(x, amax, w);
  for (int i = 0; i < 16 * 9; ++i) ASSERT_EQ(want.weight[3 * 16 * 9 + i], 0.f);
  for (const std::string& name : available_backends()) {
    SCOPED_TRACE(name);
    auto be = make_backend(name);
    Tensor st = state_of(*be, amax, 1, amax);
    Tensor xd = be->alloc(x.shape(), DType::f32), yd = be->alloc(x.shape(), DType::f32);
    be->copy(x, xd);
    be->fake_quant_act(xd, st, false, yd);
    EXPECT_EQ(to_host(*be, yd), want.act);
    be->fake_quant_act(xd, st, false, xd);  // in place
    EXPECT_EQ(to_host(*be, xd), want.act);
    Tensor wd = be->alloc(w.shape(), DType::f32), wq = be->alloc(w.shape(), DType::f32);
    be->copy(w, wd);
    be->fake_quant_weight(wd, wq);
    EXPECT_EQ(to_host(*be, wq), want.weight);
    if (!be->supports(Op::fake_quant, DType::bf16, Layout::NCHW)) continue;
    // bf16: the f32 result rounded once.
    Tensor wb = be->alloc(w.shape(), DType::bf16);
    be->fake_quant_weight(wd, wb);
    Tensor wr = Tensor::empty(w.shape(), DType::bf16), wr_src = host(want.weight, w.shape());
    make_backend("ref")->copy(wr_src, wr);
    EXPECT_EQ(to_host(*be, wb), to_host(*make_backend("ref"), wr));
  }
}

bool torch_available() {
  return std::system(
             (std::string(rn50::test::python()) + " -c 'import torch' >/dev/null 2>&1").c_str()) ==
         0;
}

TEST(FakeQuant, BitEqualToTorch) {
  RN50_REQUIRE_OR_SKIP("torch", torch_available(),
                       rn50::test::python() << " cannot import torch (Debian python3-torch)");
  TempDir tmp("fq");
  const float amax = 3.7f;
  const int64_t n = 4096, k = 16, per = 64;
  const std::vector<float> xv = values_with_ties(n, amax, 11);
  const std::vector<float> wv = values_with_ties(k * per, 0.05f, 12);
  const fs::path xf = tmp.path / "x.f32", wf = tmp.path / "w.f32", of = tmp.path / "out.f32";
  std::ofstream(xf, std::ios::binary).write(reinterpret_cast<const char*>(xv.data()), n * 4);
  std::ofstream(wf, std::ios::binary).write(reinterpret_cast<const char*>(wv.data()), k * per * 4);
  const std::string py = fmt::format(
      "import numpy as np, torch\n"
      "x = torch.from_numpy(np.fromfile('{}', dtype=np.float32))\n"
      "w = torch.from_numpy(np.fromfile('{}', dtype=np.float32)).reshape({}, {})\n"
      "s = float(np.float32({}) / np.float32(127))\n"
      "a = torch.fake_quantize_per_tensor_affine(x, s, 0, -127, 127)\n"
      "sc = (w.abs().amax(dim=1) / torch.tensor(127, dtype=torch.float32)).float()\n"
      "b = torch.fake_quantize_per_channel_affine(w, sc, torch.zeros({}, dtype=torch.int32), 0,"
      " -127, 127)\n"
      "np.concatenate([a.numpy(), b.numpy().ravel()]).astype(np.float32).tofile('{}')\n",
      xf.string(), wf.string(), k, per, amax, k, of.string());
  const fs::path script = tmp.path / "fq.py";
  std::ofstream(script) << py;
  ASSERT_EQ(std::system((std::string(rn50::test::python()) + " " + script.string()).c_str()), 0);
  std::vector<float> torch_out(static_cast<size_t>(n + k * per));
  std::ifstream(of, std::ios::binary)
      .read(reinterpret_cast<char*>(torch_out.data()),
            static_cast<std::streamsize>(torch_out.size() * 4));
  const Expected want = reference(host(xv, {n}), amax, host(wv, {k, per}));
  int64_t ties = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(want.act[i], torch_out[i]) << "x[" << i << "] = " << xv[i];
    ties += i % 4 == 0;
  }
  for (int64_t i = 0; i < k * per; ++i)
    ASSERT_EQ(want.weight[i], torch_out[n + i]) << "w[" << i << "] = " << wv[i];
  EXPECT_GT(ties, 1000);
}

TEST(Qat, Quantizers) {
  const auto q18 = qat::activation_quantizers(describe(arch_from_name("resnet18"), 10));
  // input, maxpool, 8 x (conv2's input, block output), 3 downsample shortcuts, fc input.
  EXPECT_EQ(q18.size(), 22u);
  EXPECT_EQ(q18.front().name, "conv1._input_quantizer");
  int residual = 0;
  for (const auto& q : q18) residual += q.residual;
  EXPECT_EQ(residual, 3);
  const auto q50 = qat::activation_quantizers(describe(arch_from_name("resnet50"), 1000));
  // input, maxpool, 16 x (conv2's, conv3's input, block output), 4 downsample shortcuts, fc.
  EXPECT_EQ(q50.size(), 1u + 1 + 16 * 3 + 4 + 1);
  bool avg = false, res = false;
  for (const auto& q : q50) {
    avg = avg || q.name == "avgpool._input_quantizer";
    res = res || (q.name == "layer1.0.residual_quantizer" && q.residual);
    EXPECT_TRUE(qat::is_qat_key(qat::amax_key(q)));
  }
  EXPECT_TRUE(avg);
  EXPECT_TRUE(res);
  EXPECT_FALSE(qat::is_qat_key("layer1.0.conv1.weight"));
}

Config qat_config(const fs::path& dir) {
  Config c;
  c.data = DataKind::synthetic;
  c.synthetic_samples = 16;
  c.num_classes = 4;
  c.arch = "resnet18";
  c.crop_size = 32;
  c.batch_size = 8;
  c.epochs = 1;
  c.warmup_epochs = 0;
  c.lr = 0.01;
  c.checkpoint_dir = (dir / "ckpt").string();
  c.qat = true;
  return c;
}

std::map<std::string, float> ranges(const fs::path& model_file) {
  std::map<std::string, float> r;
  for (const auto& [k, t] : load_safetensors(model_file.string()).tensors)
    if (qat::is_qat_key(k)) r[k] = *t.data_as<const float>();
  return r;
}

TEST(Qat, TrainCheckpointResumeEval) {
  TempDir tmp("qat");
  const fs::path weights = tmp.path / "float.safetensors";
  save_initial_weights(weights.string(), "resnet18", 4, 5);

  Config c = qat_config(tmp.path);
  c.from_pretrained_params = weights.string();
  ASSERT_EQ(run_train(c), 0);
  const fs::path e0 = tmp.path / "ckpt" / "resnet18" / "0" / "model.safetensors";
  const auto r0 = ranges(e0);
  EXPECT_EQ(r0.size(), 22u * 3);
  int moved = 0;
  for (const auto& [k, v] : r0) {
    EXPECT_TRUE(std::isfinite(v)) << k;
    moved += k.size() > 6 && k.compare(k.size() - 6, 6, "._amax") == 0 && v != 1.f;
  }
  EXPECT_EQ(moved, 22) << "every range learnt from the batches";

  // Resume with --qat: the ranges continue from the checkpoint's (state grows from there).
  Config r = qat_config(tmp.path);
  r.epochs = 2;
  r.from_checkpoint = (tmp.path / "ckpt" / "resnet18").string();
  ASSERT_EQ(run_train(r), 0);
  const auto r1 = ranges(tmp.path / "ckpt" / "resnet18" / "1" / "model.safetensors");
  const std::string k = "conv1._input_quantizer._state";
  // Two training steps per epoch: state = 0.9 state + 1 twice more.
  EXPECT_NEAR(r1.at(k), 0.81f * r0.at(k) + 1.9f, 1e-5);

  // Eval-only with --qat; without --qat the ranges are refused naming the flag.
  Config e = r;
  EXPECT_EQ(run_eval(e), 0);
  e.qat = false;
  ::testing::internal::CaptureStderr();
  EXPECT_NE(run_eval(e), 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("--qat"), std::string::npos) << err;
}

}  // namespace
}  // namespace rn50
