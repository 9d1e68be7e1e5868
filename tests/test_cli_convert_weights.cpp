// `rn50 convert-weights` (issue 31): a torchvision .pth, a DLE PyTorch checkpoint (module.
// prefixes, DLE's layers.N stage names, an EMA copy) and a DLE Paddle .pdparams (Paddle's
// generated names in DLE Paddle's creation order, fc stored [in, out]) written from one torch
// model by tests/parity/weights_sources.py convert to the same torchvision-keyed tensors, bit
// for bit; `rn50 predict` on the converted weights gives torch's probabilities (1e-4); a .pth
// passed to --from-pretrained-params says which command converts it; a file that does not fit
// the architecture names the key.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "core/safetensors.h"
#include "require.h"
#include "rn50/predict.h"
#include "test_train_util.h"

using namespace rn50_test;
using nlohmann::json;

namespace {

const std::string kCli = RN50_CLI;

std::vector<std::string> val_images(size_t n) {
  std::vector<std::string> out;
  const fs::path root = imagenette_root() / "val";
  if (!fs::exists(root)) return out;
  std::vector<fs::path> classes;
  for (auto& e : fs::directory_iterator(root)) classes.push_back(e.path());
  std::sort(classes.begin(), classes.end());
  for (const auto& c : classes) {
    std::vector<std::string> files;
    for (auto& e : fs::directory_iterator(c)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (!files.empty()) out.push_back(files.front());
    if (out.size() == n) break;
  }
  return out;
}

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> v;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty() && line[0] == '{') v.push_back(json::parse(line));
  return v;
}

/// Whether two safetensors files hold the same keys with bit-equal F32 data.
void expect_same_tensors(const std::string& got_path, const std::string& want_path) {
  const rn50::SafeTensorsFile got = rn50::load_safetensors(got_path);
  const rn50::SafeTensorsFile want = rn50::load_safetensors(want_path);
  size_t compared = 0;
  for (const auto& [name, w] : want.tensors) {
    if (name.find("num_batches_tracked") != std::string::npos) continue;
    auto it = got.tensors.find(name);
    ASSERT_NE(it, got.tensors.end()) << got_path << " lacks " << name;
    ASSERT_EQ(it->second.shape(), w.shape()) << name;
    ASSERT_EQ(it->second.dtype(), rn50::DType::f32) << name;
    EXPECT_EQ(std::memcmp(it->second.data(), w.data(), w.nbytes()), 0) << name;
    ++compared;
  }
  EXPECT_EQ(got.tensors.size(), compared) << got_path << " has keys beyond the reference";
  EXPECT_EQ(compared, 267u);  // resnet50: 53 convs, 53 BatchNorms x 4, fc weight and bias
}

}  // namespace

TEST(CliConvertWeights, TorchvisionDleAndPaddleFilesGiveTorchsWeightsAndProbabilities) {
  const auto images = val_images(3);
  RN50_REQUIRE_OR_SKIP("data", images.size() == 3, "imagenette not found");
  RN50_REQUIRE_OR_SKIP("torch", python_has("torch, torchvision, PIL, numpy"),
                       "no torchvision in the test python");
  TempDir tmp("convert_weights");
  const fs::path src = tmp.path / "src";
  std::string cmd = std::string(rn50::test::python()) + " " +
                    sh_quote(std::string(RN50_SOURCE_DIR) + "/tests/parity/weights_sources.py") +
                    " --arch resnet50 --num-classes 10 --seed 3 --fc-scale 0.01 --out-dir " +
                    sh_quote(src.string());
  for (const auto& im : images) cmd += " " + sh_quote(im);
  std::string py_out;
  ASSERT_EQ(run_command(cmd, &py_out), 0) << py_out;
  const std::vector<json> golden = json_lines(py_out);
  ASSERT_EQ(golden.size(), images.size()) << py_out;

  for (const std::string file : {"torchvision.pth", "dle.pth.tar", "paddle.pdparams"}) {
    SCOPED_TRACE(file);
    const std::string out = (tmp.path / (file + ".safetensors")).string();
    std::string log;
    ASSERT_EQ(run_command(kCli + " convert-weights " + sh_quote((src / file).string()) +
                              " --output " + sh_quote(out),
                          &log),
              0)
        << log;
    EXPECT_NE(log.find("rn50 reads it: resnet50"), std::string::npos) << log;
    expect_same_tensors(out, (src / "reference.safetensors").string());

    std::string args = " predict --json --top-k 10 --from-pretrained-params " + sh_quote(out);
    for (const auto& im : images) args += " " + sh_quote(im);
    std::string pred;
    ASSERT_EQ(run_command(kCli + args, &pred), 0) << pred;
    const std::vector<json> lines = json_lines(pred);
    ASSERT_EQ(lines.size(), images.size()) << pred;
    for (size_t i = 0; i < images.size(); ++i) {
      const std::vector<double> tp = golden[i]["probs"].get<std::vector<double>>();
      ASSERT_EQ(tp.size(), 10u);
      const json& top = lines[i]["top10"];
      ASSERT_EQ(top.size(), 10u) << lines[i].dump();
      for (const json& t : top)
        EXPECT_NEAR(t["prob"].get<double>(), tp[t["index"].get<size_t>()], 1e-4) << images[i];
    }
  }
  // The DLE checkpoint's EMA copy on request.
  const std::string ema = (tmp.path / "ema.safetensors").string();
  std::string log;
  ASSERT_EQ(run_command(kCli + " convert-weights " + sh_quote((src / "dle.pth.tar").string()) +
                            " --ema --output " + sh_quote(ema),
                        &log),
            0)
      << log;
  expect_same_tensors(ema, (src / "reference_ema.safetensors").string());
  // A 3-channel file asked for a 4-channel stem (--image-shape 4,H,W) gets a zero fourth
  // channel, and the summary says so.
  const std::string padded = (tmp.path / "padded.safetensors").string();
  ASSERT_EQ(run_command(kCli + " convert-weights " + sh_quote((src / "paddle.pdparams").string()) +
                            " --image-shape 4,224,224 --output " + sh_quote(padded),
                        &log),
            0)
      << log;
  EXPECT_NE(log.find("3 input channels -> 4"), std::string::npos) << log;
  {
    const rn50::SafeTensorsFile got = rn50::load_safetensors(padded);
    const rn50::SafeTensorsFile want =
        rn50::load_safetensors((src / "reference.safetensors").string());
    const rn50::Tensor& w4 = got.tensors.at("conv1.weight");
    const rn50::Tensor& w3 = want.tensors.at("conv1.weight");
    ASSERT_EQ(w4.shape(), (std::vector<int64_t>{64, 4, 7, 7}));
    const float* g = w4.data_as<float>();
    const float* r = w3.data_as<float>();
    for (int64_t o = 0; o < 64; ++o)
      for (int64_t i = 0; i < 49 * 4; ++i)
        ASSERT_EQ(g[o * 196 + i], i < 147 ? r[o * 147 + i] : 0.f) << "conv1.weight " << o << "," << i;
  }

  // A torch file where safetensors is expected: the message names the converting command.
  std::string err;
  EXPECT_NE(run_command(kCli + " predict --from-pretrained-params " +
                            sh_quote((src / "torchvision.pth").string()) + " " + sh_quote(images[0]),
                        &err),
            0);
  EXPECT_NE(err.find("rn50 convert-weights"), std::string::npos) << err;
  // The wrong architecture: keys named, nothing written.
  const std::string wrong = (tmp.path / "wrong.safetensors").string();
  EXPECT_NE(run_command(kCli + " convert-weights " + sh_quote((src / "paddle.pdparams").string()) +
                            " --arch resnet101 --output " + sh_quote(wrong),
                        &err),
            0);
  EXPECT_FALSE(fs::exists(wrong));
  EXPECT_NE(err.find("resnet101"), std::string::npos) << err;
  // Not a weights file at all.
  std::ofstream(tmp.path / "notes.txt") << "hello";
  EXPECT_NE(run_command(kCli + " convert-weights " + sh_quote((tmp.path / "notes.txt").string()) +
                            " --output " + sh_quote(wrong),
                        &err),
            0);
  EXPECT_NE(err.find("notes.txt"), std::string::npos) << err;
}

// DLE Paddle's default --image-shape 4,224,224 gives a 4-channel stem (conv2d_0.w_0 [64, 4, 7,
// 7]; issue 71): converted by default to the 3-channel model, the fourth channel's weights
// dropped and the summary saying so, bit for bit torch's RGB model, predicting torch's
// probabilities; with --image-shape 4,H,W the stem stays 4-channel, bit for bit, and still
// predicts them (the fourth input channel is zero). The same for a torch file of a 4-channel run.
TEST(CliConvertWeights, DlePaddleFourChannelStemConvertsToRgbOrKeepsItOnRequest) {
  const auto images = val_images(2);
  RN50_REQUIRE_OR_SKIP("data", images.size() == 2, "imagenette not found");
  RN50_REQUIRE_OR_SKIP("torch", python_has("torch, torchvision, PIL, numpy"),
                       "no torchvision in the test python");
  TempDir tmp("convert_weights4");
  const fs::path src = tmp.path / "src";
  std::string cmd = std::string(rn50::test::python()) + " " +
                    sh_quote(std::string(RN50_SOURCE_DIR) + "/tests/parity/weights_sources.py") +
                    " --arch resnet50 --num-classes 10 --seed 5 --fc-scale 0.01 --stem-channels 4 "
                    "--out-dir " +
                    sh_quote(src.string());
  for (const auto& im : images) cmd += " " + sh_quote(im);
  std::string py_out;
  ASSERT_EQ(run_command(cmd, &py_out), 0) << py_out;
  const std::vector<json> golden = json_lines(py_out);
  ASSERT_EQ(golden.size(), images.size()) << py_out;
  {
    const rn50::SafeTensorsFile stem4 =
        rn50::load_safetensors((src / "reference_stem4.safetensors").string());
    ASSERT_EQ(stem4.tensors.at("conv1.weight").shape(), (std::vector<int64_t>{64, 4, 7, 7}));
  }
  auto expect_torch_probs = [&](const std::string& weights) {
    std::string args = " predict --json --top-k 10 --from-pretrained-params " + sh_quote(weights);
    for (const auto& im : images) args += " " + sh_quote(im);
    std::string pred;
    ASSERT_EQ(run_command(kCli + args, &pred), 0) << pred;
    const std::vector<json> lines = json_lines(pred);
    ASSERT_EQ(lines.size(), images.size()) << pred;
    for (size_t i = 0; i < images.size(); ++i) {
      const std::vector<double> tp = golden[i]["probs"].get<std::vector<double>>();
      for (const json& t : lines[i]["top10"])
        EXPECT_NEAR(t["prob"].get<double>(), tp[t["index"].get<size_t>()], 1e-4) << images[i];
    }
  };
  for (const std::string file : {"paddle.pdparams", "torchvision.pth"}) {
    SCOPED_TRACE(file);
    // Default: the RGB model, and the summary line says what was dropped.
    const std::string rgb = (tmp.path / (file + ".rgb.safetensors")).string();
    std::string log;
    ASSERT_EQ(run_command(kCli + " convert-weights " + sh_quote((src / file).string()) +
                              " --output " + sh_quote(rgb),
                          &log),
              0)
        << log;
    EXPECT_NE(log.find("4 input channels -> 3"), std::string::npos) << log;
    expect_same_tensors(rgb, (src / "reference.safetensors").string());
    expect_torch_probs(rgb);
    // --image-shape 4,224,224: the stem as it is.
    const std::string four = (tmp.path / (file + ".stem4.safetensors")).string();
    ASSERT_EQ(run_command(kCli + " convert-weights " + sh_quote((src / file).string()) +
                              " --image-shape 4,224,224 --output " + sh_quote(four),
                          &log),
              0)
        << log;
    EXPECT_EQ(log.find("input channels ->"), std::string::npos) << log;
    expect_same_tensors(four, (src / "reference_stem4.safetensors").string());
    expect_torch_probs(four);
  }
}
