// ONNX export (save_onnx_model, rn50 export --format onnx): the exported model passes
// onnx.checker and runs in OpenCV DNN (Debian python3-onnx and python3-opencv, through
// tests/onnx/run_onnx.py), giving the CPU engine's logits on real imagenette images after the
// eval transform, at batch N and batch 1 (the dynamic batch axis); a build without ONNX refuses
// with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/fileio.h"
#include "infer_test_util.h"
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

/// A resnet18 (10 classes) with Kaiming weights and random BN parameters and statistics, folded.
InferenceModel random_model(int crop) {
  InferenceModel m;
  m.program = random_program("resnet18", 10, 31);
  m.info.crop_size = crop;
  m.info.resize_short = crop * 8 / 7;
  for (int i = 0; i < 10; ++i) m.info.classes.push_back("class_" + std::to_string(i));
  return m;
}

/// `n` imagenette train images from across the classes, eval-transformed and normalised as
/// rn50 export's calibration reads them: f32 NCHW (n, 3, crop, crop).
Tensor imagenette_batch(int n, int resize_short, int crop) {
  Tensor x;
  for_calibration_batches(rn50_test::imagenette_root().string(), n, resize_short, crop, n,
                          [&](const Tensor& b) { x = b; });
  return x;
}

TEST(InferOnnx, OpenCvDnnGivesTheEnginesLogitsOnRealImages) {
  if (!onnx_export_available()) GTEST_SKIP() << "built without ONNX (see the refusal test)";
  RN50_REQUIRE_OR_SKIP("data", rn50_test::fs::is_directory(rn50_test::imagenette_root() / "train"),
                       "imagenette not found");
  RN50_REQUIRE_OR_SKIP("onnx", python_has("onnx, cv2, numpy"),
                       "no python3-onnx / python3-opencv in the test python (RN50_TEST_PYTHON, "
                       "default /usr/bin/python3)");
  TempDir tmp("infer_onnx");
  const int crop = 96, n = 6;
  const InferenceModel m = random_model(crop);
  const Tensor x = imagenette_batch(n, m.info.resize_short, crop);
  const Tensor want = make_inference_engine(m.program)->run(x);

  const std::string onnx_path = (tmp.path / "model.onnx").string();
  save_onnx_model(m, onnx_path);
  const std::string in = (tmp.path / "x.bin").string(), out = (tmp.path / "y.bin").string();
  {
    std::ofstream f(in, std::ios::binary);
    f.write(static_cast<const char*>(x.data()), static_cast<std::streamsize>(x.nbytes()));
  }
  std::string log;
  ASSERT_EQ(
      run_command(std::string(rn50::test::python()) + " " +
                      sh_quote(std::string(RN50_SOURCE_DIR) + "/tests/onnx/run_onnx.py") + " " +
                      sh_quote(onnx_path) + " " + sh_quote(in) + " " + std::to_string(n) + " " +
                      std::to_string(crop) + " " + std::to_string(crop) + " " + sh_quote(out),
                  &log),
      0)
      << log;
  EXPECT_NE(log.find("checker ok"), std::string::npos) << log;
  Tensor got = Tensor::empty({n, 10}, DType::f32);
  std::ifstream f(out, std::ios::binary);
  f.read(static_cast<char*>(got.data()), static_cast<std::streamsize>(got.nbytes()));
  ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(got.nbytes())) << "short output " << out;

  // Both are f32 with different summation orders: agree to 1e-4 of the largest logit, and
  // predict the same class for every image.
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, std::fabs(double(want.data_as<float>()[i])));
  ASSERT_GT(scale, 1e-2);
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.data_as<float>()[i], want.data_as<float>()[i], 1e-4 * scale) << "logit " << i;
  for (int r = 0; r < n; ++r) {
    const float* a = got.data_as<float>() + r * 10;
    const float* b = want.data_as<float>() + r * 10;
    EXPECT_EQ(std::max_element(a, a + 10) - a, std::max_element(b, b + 10) - b) << "image " << r;
  }
}

TEST(InferOnnx, WrittenAtomicallyWithMetadataOrRefusedWithoutOnnx) {
  TempDir tmp("infer_onnx_meta");
  const std::string p = (tmp.path / "sub" / "model.onnx").string();
  const InferenceModel m = random_model(64);
  if (!onnx_export_available()) {
    const std::string e = error_of([&] { save_onnx_model(m, p); });
    EXPECT_NE(e.find("built without ONNX support"), std::string::npos) << e;
    EXPECT_NE(e.find("--format rn50"), std::string::npos) << e;
    return;
  }
  save_onnx_model(m, p);
  const std::string bytes = read_file(p);
  // Protobuf strings are stored verbatim: the metadata values and the I/O names are in the file.
  for (const char* s : {"rn50", "input", "logits", "batch", "resnet18", "class_9", "crop_size",
                        "0.485,0.456,0.406", "layer4.1.conv2.weight"})
    EXPECT_NE(bytes.find(s), std::string::npos) << s;
  // No temporary left beside it.
  int files = 0;
  for (auto& e : rn50_test::fs::directory_iterator(tmp.path / "sub")) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  // A program that does not end in the fc is not exported.
  InferenceModel bad = m;
  bad.program.ops.pop_back();
  const std::string e = error_of([&] { save_onnx_model(bad, p); });
  EXPECT_NE(e.find("does not end in the fc"), std::string::npos) << e;
}

}  // namespace
}  // namespace rn50
