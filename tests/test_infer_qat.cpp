// INT8 from quantization-aware training (issue 16, the export side; rn50/inference.h,
// src/model/qat.h): weights holding QAT ranges (built here from a float model: its state dict
// plus "<quantizer>._amax/_state/_accum" for every qat::activation_quantizers entry, the ranges
// taken from the fp32 program's activations) export to INT8 with those ranges and no
// calibration (model.json method "qat"), calibration flags with them are refused by name, and
// an fp32 export ignores them; the INT8 engine then quantizes on the training grid (step
// amax / 127 for u8 values too, codes clamped to 127), matching a fake-quant reference of the
// folded program where the calibration grid does not; the QDQ ONNX passes onnx.checker and,
// evaluated from the ONNX operator definitions with numpy (tests/onnx/run_qdq.py), gives the
// INT8 engine's logits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "core/fake_quant.h"
#include "core/fileio.h"
#include "core/safetensors.h"
#include "data/decode.h"
#include "data/transforms.h"
#include "infer/engine_impl.h"
#include "infer/quantize.h"
#include "infer_test_util.h"
#include "model/qat.h"
#include "require.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

using rn50_test::python_has;
using rn50_test::run_command;
using rn50_test::sh_quote;
using rn50_test::TempDir;

/// A float model's weights with QAT ranges added, as a --qat checkpoint holds them.
struct QatWeights {
  NetworkDesc desc;
  std::map<std::string, Tensor> sd;  ///< torchvision keys + the QAT range keys
  InferenceProgram program;          ///< folded, fp32 (no ranges)
  std::vector<float> absmax;         ///< per value: the amax of its quantizer, 0 elsewhere
};

/// `arch` with `classes` outputs, Kaiming weights and random BN (seed); each quantizer's amax is
/// `factor` x the max |x| of its value in the fp32 program over `images`; the moving-average
/// state as after many batches.
QatWeights qat_weights(const std::string& arch, int classes, uint64_t seed, const Tensor& images,
                       float factor) {
  QatWeights w;
  std::tie(w.desc, w.sd) = random_weights(arch, classes, seed);
  w.program = fold_network(w.desc, w.sd);
  CalibrationConfig cc;
  cc.method = "max";
  Calibrator cal(w.program, cc);
  cal.add(images);
  const std::vector<float> max = cal.value_absmax();
  w.absmax.assign(max.size(), 0.f);
  auto scalar = [](float v) {
    Tensor t = Tensor::empty({1}, DType::f32);
    *t.data_as<float>() = v;
    return t;
  };
  for (const qat::ActQuantizer& q : qat::activation_quantizers(w.desc)) {
    // The input's range covers it (see shallow_program).
    const float a = (q.layer == 0 ? 1.f : factor) * max.at(static_cast<size_t>(q.layer));
    w.absmax.at(static_cast<size_t>(q.layer)) = a;
    w.sd[qat::amax_key(q)] = scalar(a);
    w.sd[qat::state_key(q)] = scalar(10.f);
    w.sd[qat::accum_key(q)] = scalar(10.f * a);
  }
  // apply_qat_ranges: the stem's output takes the max pool's range.
  for (const InferOp& op : w.program.ops)
    if (op.kind == InferOp::Kind::maxpool && w.absmax.at(static_cast<size_t>(op.input)) == 0.f)
      w.absmax.at(static_cast<size_t>(op.input)) = w.absmax.at(static_cast<size_t>(op.output));
  return w;
}

void save_weights(const std::map<std::string, Tensor>& sd, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> v(sd.begin(), sd.end());
  save_safetensors(path, v);
}

/// The values the INT8 engine stores in 8 bits: read, added or written by a conv but the stem;
/// with QAT ranges also the stem's input and output and the fc's input.
std::vector<bool> int8_values(const InferenceProgram& p) {
  std::vector<bool> q(p.producer.size(), false);
  for (const InferOp& op : p.ops) {
    if (op.kind == InferOp::Kind::fc && p.qat_ranges) q[static_cast<size_t>(op.input)] = true;
    if (op.kind == InferOp::Kind::conv && (op.input != 0 || p.qat_ranges))
      for (int v : {op.input, op.residual, op.output})
        if (v >= 0) q[static_cast<size_t>(v)] = true;
  }
  return q;
}

/// The INT8 engine's arithmetic from its definitions, on the fp32 engine: every value the
/// INT8 engine stores in 8 bits is fake-quantized in place as it is written and each INT8
/// conv's folded weight per output channel (step max |W_k| / 127). p.qat_ranges: QAT's forward
/// (src/core/fake_quant.h: step amax / 127, codes clamped to [-127, 127]); else the calibration
/// grid (non-negative values step absmax / 255, codes 0..255; others absmax / 127, -128..127).
/// The stem conv, its input and the fc stay f32, as in the engine, except with QAT ranges: then
/// the input, the stem conv's weight, the fc's input and the fc's weight are fake-quantized too.
Tensor fake_quant_reference(InferenceProgram p, Tensor x) {
  const std::vector<bool> q = int8_values(p);
  std::vector<bool> nonneg(p.producer.size(), false);
  if (p.qat_ranges) {  // the network input, on its own grid
    Tensor xq = Tensor::empty(x.shape(), DType::f32, x.layout());
    const float s = fake_quant::step_of(p.value_absmax.at(0)), inv = 1.f / s;
    for (int64_t i = 0; i < x.numel(); ++i)
      xq.data_as<float>()[i] = fake_quant::quantize_dequantize(x.data_as<const float>()[i], s, inv);
    x = xq;
  }
  for (InferOp& op : p.ops) {
    nonneg[static_cast<size_t>(op.output)] =
        op.kind == InferOp::Kind::conv ? op.relu : nonneg[static_cast<size_t>(op.input)];
    const bool quantized_weight = (op.kind == InferOp::Kind::conv && op.input != 0) ||
                                  (p.qat_ranges && op.kind != InferOp::Kind::maxpool &&
                                   op.kind != InferOp::Kind::global_avgpool);
    if (!quantized_weight) continue;
    op.weight = op.weight.clone();
    const std::vector<float> ws =
        quant::weight_scales(op.weight, quant::weight_code_max(p.qat_ranges));
    const int64_t per = op.weight.numel() / op.weight.dim(0);
    float* w = op.weight.data_as<float>();
    for (int64_t i = 0; i < op.weight.numel(); ++i) {
      const float s = ws[static_cast<size_t>(i / per)];
      w[i] = fake_quant::quantize_dequantize(w[i], s, 1.f / s);
    }
  }
  const std::vector<float> absmax = p.value_absmax;
  const bool qat_grid = p.qat_ranges;
  p.value_absmax.clear();
  auto eng = make_cpu_engine(std::move(p), EnginePrecision::fp32, [&](const ObservedValue& o) {
    const auto i = static_cast<size_t>(o.value);
    const int64_t n = o.count;
    if (!q[i]) return;
    // The observer sees the engine's own activation buffer right after the op wrote it and
    // before any reader runs: quantizing it there is the quantized network's forward.
    float* d = const_cast<float*>(o.f32());
    if (qat_grid) {
      const float s = fake_quant::step_of(absmax[i]), inv = 1.f / s;
      for (int64_t k = 0; k < n; ++k) d[k] = fake_quant::quantize_dequantize(d[k], s, inv);
      return;
    }
    const float s = quant::activation_scale(absmax[i], nonneg[i]), inv = 1.f / s;
    const float lo = nonneg[i] ? 0.f : -128.f, hi = nonneg[i] ? 255.f : 127.f;
    for (int64_t k = 0; k < n; ++k) d[k] = std::clamp(std::nearbyint(d[k] * inv), lo, hi) * s;
  });
  return eng->run(x);
}

/// A program too shallow for rounding differences to cascade (in a deep random network one
/// code rounded the other way flips a growing number of codes downstream): the stem conv
/// (3 -> 16, 7x7 stride 2, ReLU) and maxpool take a 4x4 input to 1x1; then a = ReLU(conv3x3) [u8],
/// b = conv1x1 without ReLU [s8, as a downsample], c = ReLU(conv3x3(a) + b) [u8]; the average
/// pool of a 1x1 map and an identity fc make the logits c's dequantized values. Ranges:
/// `factor` x the fp32 maxima over `x` (below 1: the top codes saturate), qat_ranges set.
InferenceProgram shallow_program(const Tensor& x, float factor) {
  const int64_t k = 32;
  std::mt19937_64 gen(91);
  std::normal_distribution<float> nd;
  auto tensor = [&](std::vector<int64_t> shape, float sd) {
    Tensor t = Tensor::empty(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = sd * nd(gen);
    return t;
  };
  auto conv = [&](const char* name, int in, int out, int64_t ci, int64_t co, int kernel, int stride,
                  bool relu, int residual) {
    InferOp op;
    op.name = name;
    op.input = in;
    op.output = out;
    op.relu = relu;
    op.residual = residual;
    op.conv.in_channels = ci;
    op.conv.out_channels = co;
    op.conv.kernel = kernel;
    op.conv.stride = stride;
    op.conv.pad = kernel / 2;
    op.weight = tensor({co, ci, kernel, kernel}, std::sqrt(2.f / float(ci * kernel * kernel)));
    op.bias = tensor({co}, 0.1f);
    return op;
  };
  InferenceProgram p;
  p.arch = "shallow";
  p.num_classes = static_cast<int>(k);
  p.feature_channels = k;
  p.ops.push_back(conv("conv1", 0, 1, 3, 16, 7, 2, true, -1));
  InferOp mp;
  mp.kind = InferOp::Kind::maxpool;
  mp.name = "maxpool";
  mp.input = 1;
  mp.output = 2;
  mp.pool = {3, 2, 1};
  p.ops.push_back(mp);
  p.ops.push_back(conv("a", 2, 3, 16, k, 3, 1, true, -1));
  p.ops.push_back(conv("b", 2, 4, 16, k, 1, 1, false, -1));
  p.ops.push_back(conv("c", 3, 5, k, k, 3, 1, true, 4));
  InferOp gap;
  gap.kind = InferOp::Kind::global_avgpool;
  gap.name = "avgpool";
  gap.input = 5;
  gap.output = 6;
  p.ops.push_back(gap);
  InferOp fc;
  fc.kind = InferOp::Kind::fc;
  fc.name = "fc";
  fc.input = 6;
  fc.output = 7;
  fc.weight = Tensor::zeros({k, k}, DType::f32);
  for (int64_t i = 0; i < k; ++i) fc.weight.data_as<float>()[i * k + i] = 1.f;
  fc.bias = Tensor::zeros({k}, DType::f32);
  p.ops.push_back(fc);
  p.producer.assign(8, -1);
  for (size_t i = 0; i < p.ops.size(); ++i)
    p.producer[static_cast<size_t>(p.ops[i].output)] = int(i);
  CalibrationConfig cc;
  cc.method = "max";
  Calibrator cal(p, cc);
  cal.add(x);
  p.value_absmax = cal.value_absmax();
  float xmax = 0;  // the input's range (the calibrator records op outputs)
  for (int64_t i = 0; i < x.numel(); ++i) xmax = std::max(xmax, std::fabs(x.data_as<const float>()[i]));
  for (float& a : p.value_absmax) a *= factor;
  // The input's range covers the input (as a range learnt on normalised images does): the
  // engine quantizes it with a oneDNN reorder, whose codes would saturate at -128, not -127.
  p.value_absmax.at(0) = xmax;
  p.qat_ranges = true;
  return p;
}

/// How many elements of `got` equal `want` (to f32 rounding), and the largest difference.
std::pair<int64_t, double> agreement(const Tensor& got, const Tensor& want) {
  int64_t same = 0;
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.data_as<float>()[i], b = want.data_as<float>()[i];
    same += std::fabs(a - b) <= 1e-5 * std::fabs(b) + 1e-7;
    worst = std::max(worst, std::fabs(a - b));
  }
  return {same, worst};
}

TEST(InferQat, ExportTakesTheLearntRangesAndRefusesCalibrationFlags) {
  TempDir tmp("qat_export");
  const QatWeights w = qat_weights("resnet18", 3, 61, random_images(2, 64, 62), 0.8f);
  const std::string weights = (tmp.path / "w.safetensors").string();
  save_weights(w.sd, weights);
  const std::string cli = std::string(RN50_CLI) + " export --from-pretrained-params " +
                          sh_quote(weights) + " --crop-size 64 --resize-short 73 --output ";
  const std::string m8 = (tmp.path / "m8").string();
  std::string out;
  ASSERT_EQ(run_command(cli + sh_quote(m8) + " --precision int8 --format rn50", &out), 0) << out;
  EXPECT_NE(out.find("int8: using the activation ranges quantization-aware training learnt, "
                     "from '" +
                     weights + "'"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("int8 with the QAT ranges (no calibration)"), std::string::npos) << out;
  const nlohmann::json j =
      nlohmann::json::parse(read_file((tmp.path / "m8" / "model.json").string()));
  EXPECT_EQ(j["int8_calibration"]["method"], "qat");
  EXPECT_EQ(j["int8_calibration"]["images"], 0);
  const InferenceModel m = load_inference_model(m8);
  EXPECT_TRUE(m.program.qat_ranges);
  EXPECT_EQ(m.info.calibration.method, "qat");
  EXPECT_EQ(m.program.value_absmax, w.absmax);  // amax at each quantizer's value, 0 elsewhere
  // Every value the INT8 engine stores in 8 bits has its learnt range.
  const std::vector<bool> q = int8_values(m.program);
  for (size_t v = 0; v < q.size(); ++v)
    if (q[v]) {
      EXPECT_GT(m.program.value_absmax[v], 0.f) << "value " << v;
    }
  EngineOptions o;
  o.precision = "int8";
  const Tensor logits = make_inference_engine(m.program, o)->run(random_images(1, 64, 63));
  EXPECT_EQ(logits.dim(1), 3);

  // Calibration flags with QAT weights: refused, naming the flag.
  for (const char* flag : {"--image-root /nowhere", "--calib-method max", "--calib-images 8"}) {
    EXPECT_NE(
        run_command(cli + sh_quote((tmp.path / "x").string()) + " --precision int8 " + flag, &out),
        0)
        << flag;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_NE(out.find(name + " with --precision int8"), std::string::npos) << out;
    EXPECT_NE(out.find("QAT ranges need no calibration"), std::string::npos) << out;
  }
  EXPECT_FALSE(rn50_test::fs::exists(tmp.path / "x"));

  // fp32: the float network, the ranges ignored.
  const std::string m32 = (tmp.path / "m32").string();
  ASSERT_EQ(run_command(cli + sh_quote(m32) + " --precision fp32 --format rn50", &out), 0) << out;
  const InferenceModel f = load_inference_model(m32);
  EXPECT_TRUE(f.program.value_absmax.empty());
  EXPECT_FALSE(f.program.qat_ranges);
  ASSERT_EQ(f.program.ops.size(), w.program.ops.size());
  for (size_t i = 0; i < f.program.ops.size(); ++i) {
    if (!w.program.ops[i].weight.defined()) continue;
    EXPECT_EQ(std::memcmp(f.program.ops[i].weight.data(), w.program.ops[i].weight.data(),
                          w.program.ops[i].weight.nbytes()),
              0)
        << w.program.ops[i].name;
  }
  EXPECT_EQ(fold_weights_file(weights).ops.size(), w.program.ops.size());

  // A quantizer without its range, or a range that is not positive, is named.
  std::map<std::string, Tensor> partial = w.sd;
  partial.erase("layer2.0.residual_quantizer._amax");
  save_weights(partial, weights);
  EXPECT_NE(run_command(cli + sh_quote(m8) + " --precision int8 --format rn50", &out), 0);
  EXPECT_NE(out.find("'layer2.0.residual_quantizer._amax' is missing"), std::string::npos) << out;
  partial = w.sd;
  *partial.at("fc._input_quantizer._amax").data_as<float>() = 0.f;
  save_weights(partial, weights);
  EXPECT_NE(run_command(cli + sh_quote(m8) + " --precision int8 --format rn50", &out), 0);
  EXPECT_NE(out.find("QAT range 'fc._input_quantizer._amax' is 0"), std::string::npos) << out;
}

TEST(InferQat, EngineQuantizesOnTheTrainingGrid) {
  EngineOptions o;
  o.precision = "int8";
  {
    // Code for code: 256 images through the shallow program, ranges at half the maxima.
    const Tensor x = random_images(256, 4, 70);
    const InferenceProgram qat = shallow_program(x, 0.5f);
    InferenceProgram ptq = qat;  // the same ranges on the calibration grid
    ptq.qat_ranges = false;
    const Tensor ref = fake_quant_reference(qat, x);
    const Tensor got = make_inference_engine(qat, o)->run(x);
    const auto [same, worst] = agreement(got, ref);
    const float amax = qat.value_absmax[5], step = fake_quant::step_of(amax);
    std::printf("shallow: %lld of %lld logits equal to the QAT reference, worst %.3g steps\n",
                static_cast<long long>(same), static_cast<long long>(ref.numel()), worst / step);
    // Equal but for the odd code that f32 vs s32 accumulation rounds the other way.
    EXPECT_GE(same, ref.numel() * 97 / 100);
    EXPECT_LE(worst, 2.01 * step);
    // The clamp at code 127: the largest values sit at amax exactly, none above.
    int64_t top = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      EXPECT_LE(got.data_as<float>()[i], 127 * step * (1 + 1e-6)) << i;
      top += got.data_as<float>()[i] >= 127 * step * (1 - 1e-6);
    }
    EXPECT_GT(top, 0);
    // The calibration grid (u8 step absmax / 255) gives other values wherever the ReLU or the
    // clamp does not decide them, and matches its own reference: the reference is not just the
    // engine. (The reference computes the float ops in f32, which the engine does with
    // calibrated ranges only where the CPU has no native bf16: f32 asked for here.)
    const Tensor cal = [&] {
      const Int8FloatOps f32(false);
      return make_inference_engine(ptq, o)->run(x);
    }();
    EXPECT_LT(agreement(cal, ref).first, ref.numel() * 3 / 4);
    EXPECT_GE(agreement(cal, fake_quant_reference(ptq, x)).first, ref.numel() * 97 / 100);
  }
  // A whole resnet18 whose ranges are 3 x the maxima (a coarse grid, where the two grids differ
  // most): closer to the QAT reference than the calibration grid is.
  const Tensor x = random_images(4, 64, 72);
  const QatWeights w = qat_weights("resnet18", 10, 71, x, 3.f);
  InferenceProgram qat = w.program;
  apply_qat_ranges(qat, w.desc, w.sd, "test");
  EXPECT_TRUE(qat.qat_ranges);
  EXPECT_EQ(qat.value_absmax, w.absmax);
  InferenceProgram ptq = qat;
  ptq.qat_ranges = false;
  const Tensor ref = fake_quant_reference(qat, x);
  const Tensor got = make_inference_engine(qat, o)->run(x);
  const double e_qat = rel_l2(got, ref), e_ptq = rel_l2(make_inference_engine(ptq, o)->run(x), ref);
  std::printf("resnet18 int8 vs the QAT reference: QAT grid %.5f, calibration grid %.5f\n", e_qat,
              e_ptq);
  // With the stem conv in INT8 too (QAT ranges), the odd stem output rounded the other way in
  // the engine's integer sums than in the reference's f32 ones cascades through the 17 convs
  // after it (measured 0.036 against the calibration grid's 0.073; with the stem in f32 it was
  // 0.0000): the code-for-code check is the shallow program's above. The cascade also follows
  // the build and the CPU: on an AVX2-only EPYC (QAT's stem in f32 there, quantize.h) 0.032
  // against 0.071 in the normal build, 0.063 against 0.072 in the sanitized one (-O1).
  EXPECT_LT(e_qat, 0.1);
  EXPECT_LT(e_qat, e_ptq);

  // The QAT grid survives the model.json round trip.
  TempDir tmp("qat_io");
  InferenceModel m;
  m.program = qat;
  save_inference_model(m, tmp.str());
  const InferenceModel r = load_inference_model(tmp.str());
  EXPECT_TRUE(r.program.qat_ranges);
  EXPECT_EQ(r.info.calibration.method, "qat");
  const Tensor again = make_inference_engine(r.program, o)->run(x);
  EXPECT_EQ(std::memcmp(again.data(), got.data(), got.nbytes()), 0);

  // A value the engine stores in 8 bits without a QAT range is refused by name.
  InferenceProgram hole = qat;
  for (const InferOp& op : hole.ops)
    if (op.name == "layer2.0.conv1") hole.value_absmax.at(static_cast<size_t>(op.output)) = 0.f;
  const std::string e = error_of([&] { make_inference_engine(hole, o)->run(x); });
  EXPECT_NE(e.find("the QAT ranges have none for the output of 'layer2.0.conv1'"),
            std::string::npos)
      << e;
}

TEST(InferQat, QdqOnnxPassesCheckerAndGivesTheInt8EnginesLogits) {
  if (!onnx_export_available()) GTEST_SKIP() << "built without ONNX";
  RN50_REQUIRE_OR_SKIP("onnx", python_has("onnx, numpy"),
                       "no python3-onnx / python3-numpy in the test python (RN50_TEST_PYTHON, "
                       "default /usr/bin/python3)");
  TempDir tmp("qat_onnx");
  const int hw = 48, n = 2;
  const Tensor x = random_images(n, hw, 82);
  const QatWeights w = qat_weights("resnet18", 10, 81, x, 0.9f);
  InferenceModel m;
  m.program = w.program;
  apply_qat_ranges(m.program, w.desc, w.sd, "test");
  m.info.crop_size = hw;
  m.info.resize_short = hw * 8 / 7;
  EngineOptions o;
  o.precision = "int8";
  const Tensor want = make_inference_engine(m.program, o)->run(x);

  const std::string onnx_path = (tmp.path / "model.onnx").string();
  save_onnx_model(m, onnx_path, true);
  const std::string in = (tmp.path / "x.bin").string(), out = (tmp.path / "y.bin").string();
  {
    std::ofstream f(in, std::ios::binary);
    f.write(static_cast<const char*>(x.data()), static_cast<std::streamsize>(x.nbytes()));
  }
  const std::string script = std::string(RN50_SOURCE_DIR) + "/tests/onnx/run_qdq.py";
  auto run_qdq = [&](const std::string& model, std::string* log) {
    return run_command(std::string(rn50::test::python()) + " " + sh_quote(script) + " " +
                           sh_quote(model) + " " + sh_quote(in) + " " + std::to_string(n) + " " +
                           std::to_string(hw) + " " + std::to_string(hw) + " " + sh_quote(out),
                       log);
  };
  std::string log;
  ASSERT_EQ(run_qdq(onnx_path, &log), 0) << log;
  // One Q/DQ pair per 8-bit value, one DQ per conv's weight and the fc's (QAT ranges: the stem
  // conv and the fc on their trained grid too).
  int values = 0, convs = 0;
  for (bool b : int8_values(m.program)) values += b;
  for (const InferOp& op : m.program.ops) convs += op.kind == InferOp::Kind::conv;
  EXPECT_NE(log.find(fmt::format("qdq ok: Q={} DQ={} int8_convs={} float_convs=0 "
                                 "calibration=qat",
                                 values, values + convs + 1, convs)),
            std::string::npos)
      << log;
  Tensor got = Tensor::empty({n, 10}, DType::f32);
  {
    std::ifstream f(out, std::ios::binary);
    f.read(static_cast<char*>(got.data()), static_cast<std::streamsize>(got.nbytes()));
    ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(got.nbytes())) << "short output " << out;
  }
  // A deep random network turns the odd code rounded the other way (f64 vs s32 sums, x / s vs
  // x * (1 / s)) into many: the whole resnet18 agrees loosely, the shallow program code for code.
  const double rel = rel_l2(got, want);
  std::printf("resnet18 QDQ ONNX (numpy) vs the INT8 engine: relative L2 %.5f\n", rel);
  EXPECT_LT(rel, 0.1);
  {
    const Tensor xs = random_images(64, 4, 84);
    InferenceModel sm;
    sm.program = shallow_program(xs, 0.5f);
    sm.info.crop_size = 4;
    sm.info.resize_short = 4;
    const std::string sp = (tmp.path / "shallow.onnx").string();
    const std::string xin = (tmp.path / "xs.bin").string(), yout = (tmp.path / "ys.bin").string();
    save_onnx_model(sm, sp, true);
    {
      std::ofstream f(xin, std::ios::binary);
      f.write(static_cast<const char*>(xs.data()), static_cast<std::streamsize>(xs.nbytes()));
    }
    ASSERT_EQ(run_command(std::string(rn50::test::python()) + " " + sh_quote(script) + " " +
                              sh_quote(sp) + " " + sh_quote(xin) + " 64 4 4 " + sh_quote(yout),
                          &log),
              0)
        << log;
    EXPECT_NE(log.find("qdq ok: Q=7 DQ=12 int8_convs=4 float_convs=0"), std::string::npos) << log;
    Tensor ys = Tensor::empty({64, 32}, DType::f32);
    std::ifstream f(yout, std::ios::binary);
    f.read(static_cast<char*>(ys.data()), static_cast<std::streamsize>(ys.nbytes()));
    ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(ys.nbytes()));
    const Tensor engine = make_inference_engine(sm.program, o)->run(xs);
    const auto [same, worst] = agreement(ys, engine);
    const float step = fake_quant::step_of(sm.program.value_absmax[5]);
    std::printf(
        "shallow QDQ ONNX: %lld of %lld logits equal to the INT8 engine's, worst %.3g "
        "steps\n",
        static_cast<long long>(same), static_cast<long long>(ys.numel()), worst / step);
    EXPECT_GE(same, ys.numel() * 97 / 100);
    EXPECT_LE(worst, 2.01 * step);
  }

  // Calibrated ranges give a QDQ model too (int8 scale absmax / 127 everywhere).
  InferenceModel ptq = m;
  ptq.program.qat_ranges = false;
  ptq.info.calibration = {"max", 0, 2, "somewhere"};
  const std::string ptq_path = (tmp.path / "ptq.onnx").string();
  save_onnx_model(ptq, ptq_path, true);
  ASSERT_EQ(run_qdq(ptq_path, &log), 0) << log;
  EXPECT_NE(log.find("calibration=max"), std::string::npos) << log;
  // Without ranges: refused.
  InferenceModel none = m;
  none.program.value_absmax.clear();
  const std::string e = error_of([&] { save_onnx_model(none, ptq_path, true); });
  EXPECT_NE(e.find("needs the model's activation ranges"), std::string::npos) << e;

  // The CLI writes it: rn50 export --precision int8 --format onnx from QAT weights.
  const std::string weights = (tmp.path / "w.safetensors").string();
  save_weights(w.sd, weights);
  const std::string dir = (tmp.path / "cli").string();
  ASSERT_EQ(run_command(std::string(RN50_CLI) + " export --from-pretrained-params " +
                            sh_quote(weights) + " --output " + sh_quote(dir) +
                            " --precision int8 --format rn50,onnx --crop-size 48 "
                            "--resize-short 54",
                        &log),
            0)
      << log;
  EXPECT_NE(log.find("model.onnx (opset 13, QDQ int8)"), std::string::npos) << log;
  ASSERT_EQ(run_qdq((tmp.path / "cli" / "model.onnx").string(), &log), 0) << log;
  std::ifstream f(out, std::ios::binary);
  Tensor cli = Tensor::empty({n, 10}, DType::f32);
  f.read(static_cast<char*>(cli.data()), static_cast<std::streamsize>(cli.nbytes()));
  EXPECT_EQ(std::memcmp(cli.data(), got.data(), got.nbytes()), 0);
}

}  // namespace
}  // namespace rn50

namespace rn50 {
namespace {

/// Index of the largest of row n of host f32 logits (N, K) (the first of equal ones).
int64_t argmax_row(const Tensor& logits, int64_t n) {
  const int64_t k = logits.dim(1);
  const float* p = logits.data_as<const float>() + n * k;
  return std::max_element(p, p + k) - p;
}

// The agreement gate on a model rn50 trained with --qat (bench/qat_accuracy.sh runs it
// with RN50_QAT_WEIGHTS = the checkpoint's model.safetensors and RN50_QAT_IMAGES = the
// ImageFolder root; optional RN50_QAT_ARCH, RN50_QAT_CROP, RN50_QAT_RESIZE): over every val
// image, the INT8 engine with the learnt ranges against the fake-quantized training graph in
// eval mode (ResNet with ModelOptions::qat on the oneDNN backend) and against the folded
// program with the same fake quantization in f32 (fake_quant_reference, BN folded first as in
// the export): at least 99.5% equal argmax against the latter.
// For scale it also prints how often the same graph in NCHW agrees with itself in NHWC: only
// the convolutions' summation order differs, and a value rounded to the neighbouring code
// cascades through the later quantizers (99.64% on the 14-epoch imagenette resnet18).
// Without the variables (CI has no trained QAT model) it is skipped.
TEST(InferQat, Int8EngineAgreesWithTheFakeQuantGraphOnATrainedModel) {
  const char* wenv = std::getenv("RN50_QAT_WEIGHTS");
  const char* ienv = std::getenv("RN50_QAT_IMAGES");
  if (!wenv || !ienv) GTEST_SKIP() << "set RN50_QAT_WEIGHTS and RN50_QAT_IMAGES (bench/qat_accuracy.sh)";
  const std::string arch = std::getenv("RN50_QAT_ARCH") ? std::getenv("RN50_QAT_ARCH") : "resnet18";
  const int crop = std::getenv("RN50_QAT_CROP") ? std::atoi(std::getenv("RN50_QAT_CROP")) : 128;
  const int resize =
      std::getenv("RN50_QAT_RESIZE") ? std::atoi(std::getenv("RN50_QAT_RESIZE")) : 146;
  const SafeTensorsFile f = load_safetensors(wenv);
  std::map<std::string, Tensor> sd(f.tensors.begin(), f.tensors.end());
  ASSERT_TRUE(has_qat_ranges(sd)) << wenv << " holds no QAT ranges";
  const int classes = static_cast<int>(sd.at("fc.weight").dim(0));

  auto be = make_backend("onednn");
  ModelOptions mo;
  mo.num_classes = classes;
  mo.qat = true;
  ResNet model(*be, arch_from_name(arch), mo);
  model.load_state_dict(sd, /*strict=*/true);
  ModelOptions mo2 = mo;
  mo2.layout = Layout::NCHW;
  ResNet model2(*be, arch_from_name(arch), mo2);
  model2.load_state_dict(sd, true);
  int64_t same2 = 0, same_folded = 0;
  InferenceProgram prog = fold_network(model.desc(), sd);
  apply_qat_ranges(prog, model.desc(), sd, wenv);
  auto engine = make_cpu_engine(prog, EnginePrecision::int8);

  const ImageFolderIndex index =
      ImageFolderIndex::scan((std::filesystem::path(ienv) / "val").string());
  const int64_t total = static_cast<int64_t>(index.samples.size()), batch = 64;
  ASSERT_GT(total, 0);
  const Normalization norm;
  int64_t same = 0, n_all = 0, hits_graph = 0, hits_int8 = 0;
  for (int64_t b0 = 0; b0 < total; b0 += batch) {
    const int64_t n = std::min(batch, total - b0);
    Tensor u8 = Tensor::empty({n, 3, crop, crop}, DType::u8, Layout::NHWC);
    for (int64_t i = 0; i < n; ++i)
      data::eval_transform(data::decode_image_file(index.samples[b0 + i].first), resize, crop,
                           u8.data_as<uint8_t>() + i * crop * crop * 3);
    Tensor x = be->alloc({n, 3, crop, crop}, DType::f32, Layout::NHWC);
    be->normalize_u8(u8, norm.mean, norm.std, x);
    Tensor graph = Tensor::empty({n, classes}, DType::f32);
    be->copy(model.forward(x, /*train=*/false), graph);
    const Tensor int8 = engine->run(x);
    Tensor x2 = be->alloc({n, 3, crop, crop}, DType::f32, Layout::NCHW);
    be->copy(x, x2);
    Tensor g2 = Tensor::empty({n, classes}, DType::f32);
    be->copy(model2.forward(x2, false), g2);
    for (int64_t i = 0; i < n; ++i) same2 += argmax_row(graph, i) == argmax_row(g2, i);
    // The folded program with the same fake quantization in f32 (fake_quant_reference): the
    // engine's arithmetic but for integer sums.
    Tensor xn = Tensor::empty({n, 3, crop, crop}, DType::f32, Layout::NCHW);
    be->copy(x, xn);
    const Tensor folded = fake_quant_reference(prog, xn);
    for (int64_t i = 0; i < n; ++i) same_folded += argmax_row(int8, i) == argmax_row(folded, i);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = argmax_row(graph, i), q = argmax_row(int8, i);
      same += a == q;
      hits_graph += a == index.samples[b0 + i].second;
      hits_int8 += q == index.samples[b0 + i].second;
    }
    n_all += n;
  }
  const double agree = 100.0 * same / n_all;
  std::printf("[qat] graph NHWC vs NCHW same argmax %.2f%%; INT8 engine vs the folded fake-quant "
              "program (f32) %.2f%%\n",
              100.0 * same2 / n_all, 100.0 * same_folded / n_all);
  std::printf("[qat] %lld val images: fake-quant graph top-1 %.2f%%, INT8 engine top-1 %.2f%%, "
              "same argmax %.2f%%\n",
              static_cast<long long>(n_all), 100.0 * hits_graph / n_all,
              100.0 * hits_int8 / n_all, agree);
  // The gate is on the folded program: what the exported model computes, the engine's job.
  // Against the unfolded training graph the BN fold itself (codes of W x gamma / sigma rounded
  // apart from gamma / sigma x codes of W) adds its own flips: printed above, not gated.
  EXPECT_GE(100.0 * same_folded / n_all, 99.5);
}

}  // namespace
}  // namespace rn50
