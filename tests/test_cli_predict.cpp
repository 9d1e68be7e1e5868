// rn50 predict: JSON/text output on weights written by our own model (cross-checked against the
// float64 "ref" backend), unreadable images, and — when /usr/bin/python3 has torchvision — parity
// with torchvision on the same weights, images and eval transform (tests/parity/
// predict_golden.py): top-5 indices and probabilities within 1e-4.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "core/safetensors.h"
#include "data/decode.h"
#include "data/transforms.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "test_train_util.h"
#include "model/input_stage.h"
#include "train/metrics.h"
#include "require.h"

using namespace rn50_test;
using nlohmann::json;

namespace {

const std::string kCli = RN50_CLI;

/// The first file of each of the first `n` imagenette val classes.
std::vector<std::string> val_images(int n) {
  std::vector<std::string> out;
  const fs::path val = imagenette_root() / "val";
  if (!fs::is_directory(val)) return out;
  std::vector<fs::path> classes;
  for (auto& e : fs::directory_iterator(val)) classes.push_back(e.path());
  std::sort(classes.begin(), classes.end());
  for (int i = 0; i < n && i < static_cast<int>(classes.size()); ++i) {
    std::vector<fs::path> files;
    for (auto& e : fs::directory_iterator(classes[i])) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (!files.empty()) out.push_back(fs::absolute(files.front()).string());
  }
  return out;
}

std::vector<json> parse_lines(const std::string& s) {
  std::vector<json> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST(CliPredict, JsonMatchesRefBackendOnOwnWeights) {
  auto images = val_images(2);
  RN50_REQUIRE_OR_SKIP("data", images.size() >= 2, "imagenette not found");
  TempDir tmp("predict_own");
  const std::string w = (tmp.path / "tiny.safetensors").string();
  const int K = 10, rs = 64, crop = 56;
  auto ref = rn50::make_backend("ref");
  rn50::ModelOptions mo;
  mo.num_classes = K;
  mo.layout = rn50::Layout::NHWC;
  rn50::ResNet m(*ref, rn50::arch_from_name("resnet18"), mo);
  m.init(5);
  rn50::save_safetensors(w, m.state_dict());
  // A TSV naming the 10 classes.
  const std::string tsv = (tmp.path / "classes.tsv").string();
  {
    std::ofstream f(tsv);
    f << "index\tsynset\tname\n";
    for (int i = 0; i < K; ++i) f << i << "\tn0000000" << i << "\tclass number " << i << "\n";
  }
  // A file that is not an image, between the two good ones.
  const std::string bad = (tmp.path / "broken.jpg").string();
  std::ofstream(bad) << "this is not a JPEG";

  std::string out;
  const int rc = run_command(kCli + " predict --json --from-pretrained-params " + sh_quote(w) +
                                 " --classes " + sh_quote(tsv) + " --resize-short " +
                                 std::to_string(rs) + " --crop-size " + std::to_string(crop) +
                                 " " + sh_quote(images[0]) + " " + sh_quote(bad) + " " +
                                 sh_quote(images[1]),
                             &out);
  EXPECT_NE(rc, 0) << "an unreadable image must make the exit code non-zero\n" << out;
  EXPECT_NE(out.find("broken.jpg"), std::string::npos) << out;
  auto lines = parse_lines(out);
  ASSERT_EQ(lines.size(), 2u) << out;

  rn50::InputStage input(*ref, rn50::Layout::NHWC, rn50::DType::f32, 1000000, 1);
  for (size_t i = 0; i < 2; ++i) {
    const json& j = lines[i];
    EXPECT_EQ(j["file"], images[i]);
    ASSERT_EQ(j["top5"].size(), 5u);
    // Reference: the same pipeline on the float64-accumulating ref backend.
    rn50::Batch b;
    b.images = rn50::Tensor::empty({1, 3, crop, crop}, rn50::DType::u8, rn50::Layout::NHWC);
    b.labels = rn50::Tensor::zeros({1}, rn50::DType::i32);
    b.size = 1;
    rn50::data::eval_transform(rn50::data::decode_image_file(images[i]), rs, crop,
                               b.images.data_as<uint8_t>());
    input.load(b);
    const rn50::Tensor& logits = m.forward(input.x(), false);
    std::vector<float> probs(K);
    rn50::softmax_row(logits.data_as<float>(), K, probs.data());
    double prev = 2;
    for (int r = 0; r < 5; ++r) {
      const json& e = j["top5"][r];
      const int idx = e["index"].get<int>();
      const double p = e["prob"].get<double>();
      ASSERT_GE(idx, 0);
      ASSERT_LT(idx, K);
      EXPECT_LE(p, prev);
      prev = p;
      EXPECT_NEAR(p, probs[idx], 1e-4) << images[i] << " class " << idx;
      EXPECT_EQ(e["name"], fmt::format("class number {}", idx));
      EXPECT_EQ(e["synset"], fmt::format("n0000000{}", idx));
    }
    auto want = rn50::topk_indices(probs.data(), K, 5);
    for (int r = 0; r < 5; ++r)
      if (r + 1 < 5 && std::abs(probs[want[r]] - probs[want[r + 1]]) > 1e-4) {
        EXPECT_EQ(j["top5"][r]["index"].get<int64_t>(), want[r]) << images[i] << " rank " << r;
      }
  }

  // Text output, all images readable: exit code 0.
  ASSERT_EQ(run_command(kCli + " predict --from-pretrained-params " + sh_quote(w) +
                            " --resize-short 64 --crop-size 56 " + sh_quote(images[0]),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find(images[0]), std::string::npos) << out;
  EXPECT_NE(out.find("  1. "), std::string::npos) << out;
  EXPECT_NE(out.find("  5. "), std::string::npos) << out;
}

// The acceptance check against torchvision (random but seeded weights with perturbed BN).
TEST(CliPredict, MatchesTorchvision) {
  auto images = val_images(4);
  RN50_REQUIRE_OR_SKIP("data", images.size() >= 4, "imagenette not found");
  RN50_REQUIRE_OR_SKIP(
      "torch", python_has("torch, torchvision, PIL"),
      "no torchvision in the test python (RN50_TEST_PYTHON, default /usr/bin/python3)");
  TempDir tmp("predict_tv");
  const std::string w = (tmp.path / "tv_resnet18.safetensors").string();
  std::string cmd = std::string(rn50::test::python()) + " " +
                    sh_quote(std::string(RN50_SOURCE_DIR) + "/tests/parity/predict_golden.py") +
                    " --arch resnet18 --seed 0 --weights " + sh_quote(w) +
                    " --sizes 224:224,256:224";
  for (auto& im : images) cmd.append(" ").append(sh_quote(im));
  std::string py_out;
  ASSERT_EQ(run_command(cmd, &py_out), 0) << py_out;
  auto golden = parse_lines(py_out);
  ASSERT_EQ(golden.size(), 2 * images.size()) << py_out;

  for (int s = 0; s < 2; ++s) {
    const int rs = s == 0 ? 224 : 256;
    std::string args = " predict --json --from-pretrained-params " + sh_quote(w) +
                       " --classes " +
                       sh_quote(std::string(RN50_SOURCE_DIR) +
                                "/../shared/data/imagenet1k_classes.tsv") +
                       " --resize-short " + std::to_string(rs) + " --crop-size 224";
    for (auto& im : images) args.append(" ").append(sh_quote(im));
    std::string out;
    ASSERT_EQ(run_command(kCli + args, &out), 0) << out;
    auto lines = parse_lines(out);
    ASSERT_EQ(lines.size(), images.size()) << out;
    for (size_t i = 0; i < images.size(); ++i) {
      const json& g = golden[s * images.size() + i];
      ASSERT_EQ(g["resize_short"], rs);
      ASSERT_EQ(g["file"], images[i]);
      std::vector<float> tp = g["probs"].get<std::vector<float>>();
      ASSERT_EQ(tp.size(), 1000u);
      auto want = rn50::topk_indices(tp.data(), 1000, 5);
      const json& top = lines[i]["top5"];
      ASSERT_EQ(top.size(), 5u);
      for (int r = 0; r < 5; ++r) {
        const int64_t idx = top[r]["index"].get<int64_t>();
        // Our probability of our class equals torchvision's probability of that class.
        EXPECT_NEAR(top[r]["prob"].get<double>(), tp[idx], 1e-4)
            << images[i] << " resize " << rs << " rank " << r;
        // Same class at each rank, unless torchvision's own gap there is below the tolerance.
        const bool separated =
            (r == 0 || tp[want[r - 1]] - tp[want[r]] > 1e-4) &&
            (r == 4 || tp[want[r]] - tp[want[r + 1]] > 1e-4);
        if (separated) {
          EXPECT_EQ(idx, want[r]) << images[i] << " resize " << rs << " rank " << r;
        }
      }
      std::printf("%s resize %d: top1 %lld p=%.5f (torchvision %lld p=%.5f) %s\n",
                  fs::path(images[i]).filename().c_str(), rs,
                  static_cast<long long>(top[0]["index"].get<int64_t>()),
                  top[0]["prob"].get<double>(), static_cast<long long>(want[0]), tp[want[0]],
                  top[0]["name"].get<std::string>().c_str());
    }
  }
}
