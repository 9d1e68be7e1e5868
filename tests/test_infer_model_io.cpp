// The rn50 inference model folder (rn50/inference.h): save -> load gives the same program and
// bit-identical engine logits; damaged folders give errors naming the file and the entry; the CLI
// exports from a checkpoint and from a weights file, and bench infer reads the result.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/fileio.h"
#include "core/safetensors.h"
#include "infer_test_util.h"
#include "require.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

using namespace rn50_test;

InferenceModel tiny_model() {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 4;
  ResNet model(*be, arch_from_name("resnet18"), opt);
  model.init(5);
  InferenceModel m;
  m.program = fold_network(model.desc(), randomise_bn(model, 6));
  m.info.classes = {"a", "b", "c", "d"};
  m.info.resize_short = 73;
  m.info.crop_size = 64;
  return m;
}

Tensor images(uint64_t seed) {
  Tensor x = Tensor::empty({2, 3, 40, 40}, DType::f32);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = nd(g);
  return x;
}

TEST(InferModelIo, RoundTripGivesTheSameProgramAndLogits) {
  TempDir tmp("infer_model_io");
  const InferenceModel m = tiny_model();
  save_inference_model(m, tmp.path.string());
  const InferenceModel r = load_inference_model(tmp.path.string());
  EXPECT_EQ(r.info.classes, m.info.classes);
  EXPECT_EQ(r.info.crop_size, 64);
  EXPECT_EQ(r.info.resize_short, 73);
  EXPECT_FLOAT_EQ(r.info.mean[0], 0.485f);
  ASSERT_EQ(r.program.ops.size(), m.program.ops.size());
  for (size_t i = 0; i < m.program.ops.size(); ++i) {
    const InferOp &a = m.program.ops[i], &b = r.program.ops[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.input, b.input);
    EXPECT_EQ(a.output, b.output);
    EXPECT_EQ(a.residual, b.residual);
    EXPECT_EQ(a.relu, b.relu);
    EXPECT_EQ(a.folded_bn, b.folded_bn);
  }
  EXPECT_EQ(r.program.producer, m.program.producer);
  const Tensor x = images(7);
  const Tensor want = make_inference_engine(m.program)->run(x);
  const Tensor got = make_inference_engine(r.program)->run(x);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0);
}

TEST(InferModelIo, DamagedFoldersAreNamed) {
  TempDir tmp("infer_model_bad");
  const std::string dir = tmp.path.string();
  EXPECT_NE(error_of([&] { load_inference_model(dir); }).find("no model.json"), std::string::npos);
  save_inference_model(tiny_model(), dir);
  const std::string jpath = dir + "/model.json";
  const std::string good = read_file(jpath);
  auto with_json = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(good);
    edit(j);
    write_file_atomic(jpath, j.dump());
    return error_of([&] { load_inference_model(dir); });
  };
  std::string e = with_json([](nlohmann::json& j) { j["format_version"] = 2; });
  EXPECT_NE(e.find("format_version 2"), std::string::npos) << e;
  e = with_json([](nlohmann::json& j) { j["ops"][3]["input"] = 60; });
  EXPECT_NE(e.find("ops[3]"), std::string::npos) << e;
  e = with_json([](nlohmann::json& j) { j["ops"][0]["kind"] = "deconv"; });
  EXPECT_NE(e.find("'deconv'"), std::string::npos) << e;
  e = with_json([](nlohmann::json& j) { j["ops"][0]["conv"]["out_channels"] = 32; });
  EXPECT_NE(e.find("'conv1.weight'"), std::string::npos) << e;
  write_file_atomic(jpath, "{ not json");
  e = error_of([&] { load_inference_model(dir); });
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  write_file_atomic(jpath, good);
  // A weights file without fc.bias.
  SafeTensorsFile w = load_safetensors(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> kept;
  for (const std::string& k : w.order)
    if (k != "fc.bias") kept.emplace_back(k, w.tensors.at(k));
  const FileDigest d = save_safetensors(dir + "/model.safetensors", kept);
  e = error_of([&] { load_inference_model(dir); });
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;  // model.json recorded the old file
  with_json([&](nlohmann::json& j) { j["weights_digest"] = d.to_json(); });
  e = error_of([&] { load_inference_model(dir); });
  EXPECT_NE(e.find("'fc.bias' is missing"), std::string::npos) << e;
}

TEST(InferModelIo, TruncatedOrBitFlippedWeightsAreNamedAsDamaged) {
  TempDir tmp("infer_model_flip");
  const std::string dir = tmp.path.string();
  save_inference_model(tiny_model(), dir);
  const std::string wpath = dir + "/model.safetensors";
  const std::string good = read_file(wpath);
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x01);  // one bit
  write_file_atomic(wpath, flipped);
  std::string e = error_of([&] { load_inference_model(dir); });
  EXPECT_NE(e.find(wpath), std::string::npos) << e;
  EXPECT_NE(e.find("CRC-32C"), std::string::npos) << e;
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;
  write_file_atomic(wpath, good.substr(0, good.size() - 4));
  e = error_of([&] { load_inference_model(dir); });
  EXPECT_NE(e.find("bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;
  // The same file read as weights (--from-pretrained-params DIR) is checked against model.json.
  write_file_atomic(wpath, flipped);
  e = error_of([&] { fold_weights_file(dir); });
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;
  write_file_atomic(wpath, good);
  EXPECT_NO_THROW(load_inference_model(dir));
}

TEST(InferModelIo, CliExportsCheckpointsAndWeightsFiles) {
  TempDir tmp("infer_export_cli");
  const std::string cli = RN50_CLI, ck = (tmp.path / "ck").string();
  std::string out;
  ASSERT_EQ(
      run_command(cli +
                      " train --data synthetic --epochs 1 --batch-size 2 --crop-size 32 "
                      "--arch resnet18 --num-of-class 3 --synthetic-samples 4 "
                      "--warmup-epochs 0 --checkpoint-dir " +
                      sh_quote(ck) + " --inference-dir " + sh_quote((tmp.path / "m0").string()),
                  &out),
      0)
      << out;
  const std::string m1 = (tmp.path / "m1").string();
  ASSERT_EQ(run_command(cli + " export --from-checkpoint " + sh_quote(ck + "/resnet18") +
                            " --output " + sh_quote(m1) + " --crop-size 32 --resize-short 37",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("exported resnet18 (3 classes)"), std::string::npos) << out;
  const InferenceModel m = load_inference_model(m1);
  EXPECT_EQ(m.info.classes.size(), 3u);  // from the checkpoint's state.json
  EXPECT_EQ(m.info.crop_size, 32);
  ASSERT_EQ(run_command(cli + " bench infer --model " + sh_quote(m1) +
                            " --crop-size 32 --batch-sizes 1,2 --benchmark-steps 2",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("resnet18 3 classes"), std::string::npos) << out;

  // From a weights file: the same logits as from the checkpoint it came from.
  const std::string m2 = (tmp.path / "m2").string();
  ASSERT_EQ(
      run_command(cli + " export --from-pretrained-params " +
                      sh_quote(ck + "/resnet18/0/model.safetensors") + " --output " + sh_quote(m2),
                  &out),
      0)
      << out;
  const Tensor x = images(9);
  const Tensor a = make_inference_engine(load_inference_model(m1).program)->run(x);
  const Tensor b = make_inference_engine(load_inference_model(m2).program)->run(x);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  // --inference-dir wrote the same model at the end of training.
  const InferenceModel m0 = load_inference_model((tmp.path / "m0").string());
  EXPECT_EQ(m0.info.crop_size, 32);
  const Tensor c = make_inference_engine(m0.program)->run(x);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.nbytes()), 0);

  // rn50 predict --model: the same top-5 as from the checkpoint's weights, with the model's
  // class names and sizes (an image of ../shared when present).
  fs::path image;
  if (fs::is_directory(imagenette_root() / "val")) {
    for (auto& e : fs::recursive_directory_iterator(imagenette_root() / "val"))
      if (e.is_regular_file()) {
        image = e.path();
        break;
      }
  }
  RN50_REQUIRE_OR_SKIP("data", !image.empty(), "imagenette not found");
  std::string pm, pw;
  ASSERT_EQ(
      run_command(cli + " predict --json --model " + sh_quote(m1) + " " + sh_quote(image.string()),
                  &pm),
      0)
      << pm;
  ASSERT_EQ(run_command(cli +
                            " predict --json --device cpu --crop-size 32 --resize-short 37 "
                            "--from-pretrained-params " +
                            sh_quote(ck + "/resnet18/0/model.safetensors") + " " +
                            sh_quote(image.string()),
                        &pw),
            0)
      << pw;
  EXPECT_EQ(pm, pw);
  EXPECT_NE(pm.find("class_0000"), std::string::npos) << pm;  // names from model.json
  EXPECT_NE(run_command(cli + " predict --model " + sh_quote(m1) + " --from-pretrained-params " +
                            sh_quote(ck + "/resnet18/0/model.safetensors") + " " +
                            sh_quote(image.string()),
                        &out),
            0);
  EXPECT_NE(out.find("one of --from-pretrained-params FILE and --model DIR"), std::string::npos)
      << out;

  // Both formats by default (ONNX where the build has it), at the end of training too.
  EXPECT_EQ(fs::exists(tmp.path / "m1" / "model.onnx"), onnx_export_available());
  EXPECT_EQ(fs::exists(tmp.path / "m0" / "model.onnx"), onnx_export_available());
  EXPECT_TRUE(fs::exists(tmp.path / "m1" / "model.json"));

  // Unknown formats, and ambiguous sources, are refused.
  EXPECT_NE(run_command(cli + " export --from-checkpoint " + sh_quote(ck + "/resnet18") +
                            " --output " + sh_quote(m2) + " --format rn50,tflite",
                        &out),
            0);
  EXPECT_NE(out.find("--format 'tflite': expected rn50 or onnx"), std::string::npos) << out;
  EXPECT_NE(run_command(cli + " export --from-checkpoint " + sh_quote(ck + "/resnet18") +
                            " --from-pretrained-params x --output " + sh_quote(m2),
                        &out),
            0);
  EXPECT_NE(out.find("one of --from-checkpoint and --from-pretrained-params"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace rn50
