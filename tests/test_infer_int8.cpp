// INT8 inference on the CPU (rn50/inference.h, infer/quantize.h): the quantization of weights
// and activations equals a numpy reference bit for bit (ties included); calibration is
// deterministic and its percentile is the exact percentile within one histogram bin; the INT8
// engine's logits stay close to fp32's and differ from them, its float ops in f32 and in bf16;
// the calibration survives the model.json round trip; concurrent calls agree; an uncalibrated
// model is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/fileio.h"
#include "core/safetensors.h"
#include "infer/quantize.h"
#include "infer_test_util.h"
#include "require.h"
#include "rn50/backend.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

using rn50_test::python_has;
using rn50_test::run_command;
using rn50_test::sh_quote;
using rn50_test::TempDir;

InferenceProgram calibrated(InferenceProgram p, const std::string& method,
                            const std::vector<Tensor>& batches) {
  CalibrationConfig cc;
  cc.method = method;
  Calibrator cal(p, cc);
  for (const Tensor& b : batches) cal.add(b);
  p.value_absmax = cal.value_absmax();
  return p;
}

// Without VNNI oneDNN adds u8 x s8 products pairwise in saturating 16-bit sums: the calibrated
// engine then quantizes weights to 7 bits (2 x 255 x 63 < 32768), QAT's grid keeps 8 (its codes
// stop at 127). The probe agrees with the instruction set oneDNN reports.
TEST(Int8Rules, SevenBitWeightsExactlyWhereTheSumsSaturate) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl::cpu_isa i) {
    return (isa & static_cast<unsigned>(i)) == static_cast<unsigned>(i);
  };
  const bool vnni = has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
  EXPECT_EQ(quant::int8_sums_saturate(), !vnni);
  EXPECT_EQ(quant::weight_code_max(true), 127.f);
  EXPECT_EQ(quant::weight_code_max(false), vnni ? 127.f : 63.f);
  Tensor w = Tensor::empty({2, 3}, DType::f32);
  const float v[] = {-6.3f, 1.f, 2.f, 0.f, 0.f, 0.f};
  std::memcpy(w.data(), v, sizeof(v));
  const std::vector<float> s = quant::weight_scales(w, 63.f);
  EXPECT_FLOAT_EQ(s[0], 0.1f);
  EXPECT_EQ(s[1], 1.f);  // an all-zero channel
}

TEST(InferInt8, QuantizationMatchesNumpyBitForBit) {
  RN50_REQUIRE_OR_SKIP("torch", python_has("numpy"),
                       "no numpy in the test python (RN50_TEST_PYTHON, default /usr/bin/python3)");
  TempDir tmp("int8_quant");
  // A weight (8 channels x 27) with random values, exact ties (k + 0.5 codes) and values past
  // the range; an activation with both signs.
  const int64_t rows = 8, cols = 27;
  Tensor w = Tensor::empty({rows, cols}, DType::f32);
  std::mt19937_64 gen(5);
  std::normal_distribution<float> nd(0.f, 0.3f);
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = nd(gen);
  // Each row's max is 127 * 2^-e, so its scale is 2^-e exactly and (k + 0.5) * scale is an
  // exact tie of the code computation x * (1 / scale).
  for (int64_t r = 0; r < rows; ++r)
    w.data_as<float>()[r * cols] = 127.f * std::ldexp(1.f, -3 - int(r % 2));
  const std::vector<float> ws = quant::weight_scales(w);
  for (int64_t r = 0; r < rows; ++r)  // ties: (k + 0.5) * scale, for k = 0..3, both signs
    for (int k = 0; k < 4; ++k)
      w.data_as<float>()[r * cols + 20 + k] =
          (k % 2 ? -1.f : 1.f) * (k + 0.5f) * ws[static_cast<size_t>(r)];
  const float s = quant::activation_scale(2.5f, false);
  Tensor a = Tensor::empty({1, 1000}, DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = 1.3f * nd(gen) * 10;
  const std::vector<int32_t> qw = quant::quantize(w, rows, ws, false);
  const std::vector<int32_t> qa = quant::quantize(a, 1, {s}, false);
  const std::vector<int32_t> qu =
      quant::quantize(a, 1, {quant::activation_scale(2.5f, true)}, true);

  auto dump = [&](const std::string& name, const void* p, size_t bytes) {
    std::ofstream f((tmp.path / name).string(), std::ios::binary);
    f.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes));
  };
  dump("w.bin", w.data(), w.nbytes());
  dump("ws.bin", ws.data(), ws.size() * 4);
  dump("a.bin", a.data(), a.nbytes());
  dump("qw.bin", qw.data(), qw.size() * 4);
  dump("qa.bin", qa.data(), qa.size() * 4);
  dump("qu.bin", qu.data(), qu.size() * 4);
  const std::string py = R"(
import sys, numpy as np
d = sys.argv[1]
r = lambda n, t: np.fromfile(d + '/' + n, dtype=t)
w = r('w.bin', np.float32).reshape(8, 27); a = r('a.bin', np.float32)
# scales: max|W_k| / 127, activations absmax / 127 (s8) or / 255 (u8); q = rint(x * (1 / s))
ws = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
assert np.array_equal(ws, r('ws.bin', np.float32)), 'weight scales'
q = lambda x, s, lo, hi: np.clip(np.rint(x * (np.float32(1) / s)), lo, hi).astype(np.int32)
assert np.array_equal(q(w, ws[:, None], -128, 127).ravel(), r('qw.bin', np.int32)), 'weights'
s8 = np.float32(2.5) / np.float32(127); u8 = np.float32(2.5) / np.float32(255)
assert np.array_equal(q(a, s8, -128, 127), r('qa.bin', np.int32)), 's8 activations'
assert np.array_equal(q(a, u8, 0, 255), r('qu.bin', np.int32)), 'u8 activations'
# dequantize: q * s; ties went to the even code
assert np.abs(q(a, s8, -128, 127) * s8 - np.clip(a, -128 * s8, 127 * s8)).max() <= s8 / 2 + 1e-6
print('ok', int((q(w, ws[:, None], -128, 127)[:, 20:24] % 2).sum()))
)";
  {
    std::ofstream f((tmp.path / "ref.py").string());
    f << py;
  }
  std::string out;
  ASSERT_EQ(run_command(std::string(rn50::test::python()) + " " +
                            sh_quote((tmp.path / "ref.py").string()) + " " + sh_quote(tmp.str()),
                        &out),
            0)
      << out;
  // Ties round to even: 0.5 -> 0, -1.5 -> -2, 2.5 -> 2, -3.5 -> -4 (no odd code among them).
  EXPECT_NE(out.find("ok 0"), std::string::npos) << out;
  EXPECT_EQ(qw[20], 0);
  EXPECT_EQ(qw[21], -2);
  EXPECT_EQ(qw[22], 2);
  EXPECT_EQ(qw[23], -4);
}

TEST(InferInt8, CalibrationIsDeterministicAndPercentileIsExactToOneBin) {
  const InferenceProgram p = random_program("resnet18", 10, 41);
  const std::vector<Tensor> batches{random_images(2, 64, 1), random_images(3, 64, 2)};
  const InferenceProgram a = calibrated(p, "max", batches);
  const InferenceProgram b = calibrated(p, "max", batches);
  EXPECT_EQ(a.value_absmax, b.value_absmax);
  const InferenceProgram pa = calibrated(p, "percentile", batches);
  const InferenceProgram pb = calibrated(p, "percentile", batches);
  EXPECT_EQ(pa.value_absmax, pb.value_absmax);
  ASSERT_EQ(a.value_absmax.size(), p.producer.size());
  // Every value an op writes has a range; percentile <= max and below it somewhere.
  int below = 0;
  for (const InferOp& op : p.ops) {
    const auto v = static_cast<size_t>(op.output);
    EXPECT_GT(a.value_absmax[v], 0.f) << op.name;
    EXPECT_LE(pa.value_absmax[v], a.value_absmax[v]) << op.name;
    below += pa.value_absmax[v] < a.value_absmax[v];
  }
  EXPECT_GT(below, 0);
  // The input (value 0): max and the 99.99th percentile of |x| computed exactly here.
  std::vector<float> absx;
  for (const Tensor& t : batches)
    for (int64_t i = 0; i < t.numel(); ++i) absx.push_back(std::fabs(t.data_as<float>()[i]));
  std::sort(absx.begin(), absx.end());
  EXPECT_EQ(a.value_absmax[0], absx.back());
  const double rank = std::ceil(0.9999 * double(absx.size()));  // smallest with >= 99.99% below
  const double exact = absx[static_cast<size_t>(rank) - 1];
  const double bin = 2 * absx.back() * (1 + 1e-6) / 2048;  // the range doubles at most once
  EXPECT_GE(pa.value_absmax[0], exact - 1e-6);
  EXPECT_LE(pa.value_absmax[0], exact + bin + 1e-6);
  // Other batches give other ranges; bad options are named.
  EXPECT_NE(calibrated(p, "max", {random_images(2, 64, 3)}).value_absmax, a.value_absmax);
  CalibrationConfig bad;
  bad.method = "entropy";
  EXPECT_NE(error_of([&] { Calibrator c(p, bad); }).find("--calib-method entropy"),
            std::string::npos);
  bad.method = "percentile";
  bad.percentile = 101;
  EXPECT_NE(error_of([&] { Calibrator c(p, bad); }).find("--calib-percentile 101"),
            std::string::npos);
  InferenceProgram huge = p;  // weights that overflow fp32 in the first conv
  for (int64_t i = 0; i < huge.ops[0].weight.numel(); ++i)
    huge.ops[0].weight.data_as<float>()[i] = 3e38f;
  Calibrator over(huge, {});
  const std::string inf = error_of([&] { over.add(batches[0]); });
  EXPECT_NE(inf.find("'conv1' produced a non-finite value"), std::string::npos) << inf;
  Calibrator empty(p, {});
  EXPECT_NE(error_of([&] { empty.value_absmax(); }).find("no images"), std::string::npos);
}

TEST(InferInt8, LogitsCloseToFp32AndNotEqual) {
  // The float ops (stem, max pool, fc) in f32, and in bf16 where the CPU has it natively (the
  // engine's default there): bf16 adds little to the 8-bit codes' error.
  const bool native_bf16 = onednn::infer_int8_float_ops_bf16();
  for (const char* arch : {"resnet18", "resnet50"}) {
    const InferenceProgram p = random_program(arch, 10, 41);
    const Tensor x = random_images(4, 64, 7);
    const InferenceProgram q = calibrated(p, "max", {x, random_images(4, 64, 8)});
    const Tensor want = make_inference_engine(p)->run(x);
    double rel_f32 = 0;
    Tensor got_f32;
    for (bool bf16 : {false, true}) {
      if (bf16 && !native_bf16) continue;
      const Int8FloatOps float_ops(bf16);
      EngineOptions o;
      o.precision = "int8";
      auto e8 = make_inference_engine(q, o);
      EXPECT_EQ(e8->precision(), "int8");
      const Tensor got = e8->run(x);
      ASSERT_EQ(got.shape(), want.shape());
      const double rel = rel_l2(got, want);
      const char* fl = bf16 ? "bf16" : "f32";
      // 8-bit codes (relative step 1/127 to 1/255 of each tensor's range) over 20 / 53 layers.
      EXPECT_LT(rel, 0.15) << arch << " (float ops " << fl << "): relative L2 error";
      EXPECT_GT(rel, 1e-4) << arch << ": int8 logits equal fp32's: int8 is not in use";
      std::printf("%s int8 (float ops %s) vs fp32 logits: relative L2 error %.4f\n", arch, fl,
                  rel);
      if (bf16) {
        // bf16's 8-bit significand on the stem (whose output is then quantized to 8 bits) and
        // the fc: a small share of the error, and the path in use (other logits).
        EXPECT_LT(rel, 1.5 * rel_f32 + 0.005) << arch << ": bf16 float ops cost accuracy";
        EXPECT_NE(std::memcmp(got.data(), got_f32.data(), got.nbytes()), 0) << arch;
      } else {
        rel_f32 = rel;
        got_f32 = got;
      }
      // NHWC input gives the same codes as NCHW.
      Tensor xh = Tensor::empty(x.shape(), DType::f32, Layout::NHWC);
      const int64_t hw = 64 * 64;
      for (int64_t n = 0; n < 4; ++n)
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t i = 0; i < hw; ++i)
            xh.data_as<float>()[(n * hw + i) * 3 + c] = x.data_as<float>()[(n * 3 + c) * hw + i];
      const Tensor gh = e8->run(xh);
      EXPECT_EQ(std::memcmp(gh.data(), got.data(), got.nbytes()), 0) << arch << " " << fl;
    }
  }
}

TEST(InferInt8, CalibrationRoundTripsAndConcurrentCallsAgree) {
  TempDir tmp("int8_io");
  InferenceModel m;
  m.program =
      calibrated(random_program("resnet18", 5, 41), "percentile", {random_images(2, 48, 9)});
  m.info.calibration = {"percentile", 99.99, 2, "somewhere"};
  save_inference_model(m, tmp.str());
  const InferenceModel r = load_inference_model(tmp.str());
  EXPECT_EQ(r.program.value_absmax, m.program.value_absmax);
  EXPECT_EQ(r.info.calibration.method, "percentile");
  EXPECT_EQ(r.info.calibration.images, 2);
  EXPECT_DOUBLE_EQ(r.info.calibration.percentile, 99.99);

  EngineOptions o;
  o.precision = "int8";
  auto eng = make_inference_engine(r.program, o);
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(random_images(1 + t % 2, 48, 300 + t));
    expected.push_back(eng->run(inputs.back()));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 3; ++k) {
        const Tensor y = eng->run(inputs[static_cast<size_t>(t)]);
        const Tensor& e = expected[static_cast<size_t>(t)];
        if (std::memcmp(y.data(), e.data(), e.nbytes()) != 0) ++mismatches[static_cast<size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;

  // Uncalibrated: refused with what to do; a damaged range list is named.
  InferenceModel plain = m;
  plain.program.value_absmax.clear();
  const std::string e = error_of([&] { make_inference_engine(plain.program, o); });
  EXPECT_NE(e.find("--precision int8 needs a calibrated model"), std::string::npos) << e;
  EXPECT_NE(e.find("--calib-images"), std::string::npos) << e;
  const std::string jpath = (tmp.path / "model.json").string();
  nlohmann::json j = nlohmann::json::parse(read_file(jpath));
  j["int8_calibration"]["value_absmax"].erase(0);
  write_file_atomic(jpath, j.dump());
  const std::string d = error_of([&] { load_inference_model(tmp.str()); });
  EXPECT_NE(d.find("value_absmax has"), std::string::npos) << d;
}

TEST(InferInt8, CliExportCalibratesAndBenchInferMeasuresAccuracy) {
  TempDir tmp("int8_cli");
  RN50_REQUIRE_OR_SKIP("data", rn50_test::make_imagenette_subset(tmp.path / "data", 3, 4, 5),
                       "imagenette not found");
  // Weights of a 3-class resnet18 with random BN, as a torchvision-keyed safetensors file.
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 3;
  ResNet model(*be, arch_from_name("resnet18"), opt);
  model.init(51);
  std::vector<std::pair<std::string, Tensor>> sd;
  for (auto& [k, t] : randomise_bn(model, 52)) sd.emplace_back(k, t);
  const std::string weights = (tmp.path / "w.safetensors").string();
  save_safetensors(weights, sd);
  const std::string cli = RN50_CLI, data = (tmp.path / "data").string(),
                    m8 = (tmp.path / "m8").string();
  std::string out;
  ASSERT_EQ(run_command(cli + " export --from-pretrained-params " + sh_quote(weights) +
                            " --output " + sh_quote(m8) +
                            " --precision int8 --calib-method max --calib-images 6 --image-root " +
                            sh_quote(data) + " --crop-size 64 --resize-short 73",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("int8 calibration: max over 6 images"), std::string::npos) << out;
  const InferenceModel m = load_inference_model(m8);
  EXPECT_EQ(m.info.calibration.images, 6);
  // int8 writes a QDQ ONNX beside it (test_infer_qat checks those) when the build has ONNX.
  EXPECT_EQ(rn50_test::fs::exists(tmp.path / "m8" / "model.onnx"), onnx_export_available());
  const std::string rep = (tmp.path / "r.jsonl").string(), pred = (tmp.path / "p.tsv").string();
  ASSERT_EQ(run_command(cli + " bench infer --model " + sh_quote(m8) +
                            " --precision int8 --crop-size 64 --batch-sizes 1,4 "
                            "--benchmark-steps 2 --image-root " +
                            sh_quote(data) + " --predictions-file " + sh_quote(pred) +
                            " --report-file " + sh_quote(rep),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("accuracy: resnet18 int8"), std::string::npos) << out;
  EXPECT_NE(out.find("(15 images, resize 73 crop 64)"), std::string::npos) << out;
  // The accuracy line, the model-alone timings per batch size, then the same with data loading
  // (test_cli_bench_infer checks those).
  const auto lines = rn50_test::read_jsonl(rep);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["type"], "infer_accuracy");
  EXPECT_EQ(lines[0]["images"], 15);
  EXPECT_EQ(lines[1]["precision"], "int8");
  EXPECT_NE(lines[1].value("input", ""), "loader");
  EXPECT_EQ(lines[3].value("input", ""), "loader");
  EXPECT_EQ(lines[4]["precision"], "int8");
  // One line per val image, its label the folder's class index.
  std::ifstream pf(pred);
  int n = 0;
  for (std::string line; std::getline(pf, line); ++n) {
    EXPECT_NE(line.find("/val/"), std::string::npos) << line;
    EXPECT_EQ(line[line.size() - 3], '0' + n / 5) << line;  // "...\t<label>\t<top1>"
  }
  EXPECT_EQ(n, 15);

  // int8 without calibration images (and weights without QAT ranges) is refused by flag.
  EXPECT_NE(run_command(cli + " export --from-pretrained-params " + sh_quote(weights) +
                            " --output " + sh_quote(m8) + " --precision int8",
                        &out),
            0);
  EXPECT_NE(out.find("pass --image-root DIR"), std::string::npos) << out;
}

}  // namespace
}  // namespace rn50
