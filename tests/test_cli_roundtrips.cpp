// What one rn50 command writes, the next one reads, with nothing lost on the way (issue 29's
// defects, each of which used to fail):
//  * `rn50 eval` picks its forward by the same rule as the training-time validation: a QAT
//    checkpoint evaluated with --qat, and an --amp bf16 run with --amp --amp-dtype bf16, give
//    the last epoch's val.loss / val.top1 of that run (they used to run the fp32 engine);
//  * a model exported with --precision int8 runs in int8 under `bench infer --model` and
//    `predict --model` without --precision (it used to run in fp32); --precision overrides;
//  * fine-tuning with more fc classes than class folders exports (numbered names for the rest);
//  * --from-pretrained-params DIR takes DIR/model.safetensors, or says which file it expects;
//  * the folder given to `rn50 train --checkpoint-dir` is accepted by eval and export.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "require.h"
#include "rn50/backend.h"
#include "step_test_util.h"
#include "test_train_util.h"

using namespace rn50_test;
using nlohmann::json;

namespace {

const std::string kCli = RN50_CLI;
/// A tiny synthetic run: resnet18 at 32 px, 4 classes, 2 steps per epoch.
const std::string kTiny =
    " --data synthetic --synthetic-samples 16 --num-of-class 4 --arch resnet18 --crop-size 32 "
    "--batch-size 8";

std::string run_ok(const std::string& args) {
  std::string out;
  const int rc = run_command(kCli + " " + args, &out);
  EXPECT_EQ(rc, 0) << "rn50 " << args << "\n" << out;
  return out;
}

/// The val figures of the last "epoch" line (training) or the "eval" line (eval) of a report.
json last_val(const fs::path& report, const std::string& type) {
  const auto lines = of_type(read_jsonl(report), type);
  return lines.empty() ? json() : lines.back();
}

bool bf16_on_cpu() {
  return rn50::make_backend("onednn")->supports(rn50::Op::conv2d, rn50::DType::bf16,
                                                rn50::Layout::NHWC);
}

/// Trains one epoch with `precision_flags` and evaluates the checkpoint with the same flags:
/// the eval line must repeat the training-time validation of the last epoch.
void expect_eval_repeats_training_validation(const std::string& precision_flags,
                                             const std::string& extra_train_flags) {
  TempDir tmp("eval_rule");
  const fs::path train_report = tmp.path / "train.jsonl", eval_report = tmp.path / "eval.jsonl";
  const std::string ckpt = (tmp.path / "ckpt").string();
  run_ok("train" + kTiny + " --epochs 1 --warmup-epochs 0 --lr 0.01 --device cpu " +
         precision_flags + extra_train_flags + " --checkpoint-dir " + sh_quote(ckpt) +
         " --report-file " + sh_quote(train_report.string()));
  run_ok("eval" + kTiny + " --device cpu " + precision_flags + " --from-checkpoint " +
         sh_quote(ckpt + "/resnet18") + " --report-file " + sh_quote(eval_report.string()));
  const json t = last_val(train_report, "epoch"), e = last_val(eval_report, "eval");
  ASSERT_TRUE(t.contains("val.loss")) << t.dump();
  ASSERT_TRUE(e.contains("val.loss")) << e.dump();
  const double tl = t["val.loss"].get<double>(), el = e["val.loss"].get<double>();
  EXPECT_NEAR(el, tl, 1e-6 * std::abs(tl)) << precision_flags;
  EXPECT_EQ(e["val.top1"].get<double>(), t["val.top1"].get<double>()) << precision_flags;
  EXPECT_EQ(e["val.images"], t["val.images"]);
}

}  // namespace

TEST(CliRoundtrip, EvalQatRepeatsTheTrainingValidation) {
  TempDir tmp("qat_weights");
  const std::string w = (tmp.path / "float.safetensors").string();
  rn50::save_initial_weights(w, "resnet18", 4, 5);
  expect_eval_repeats_training_validation("--qat", " --from-pretrained-params " + sh_quote(w));
}

TEST(CliRoundtrip, EvalAmpBf16RepeatsTheTrainingValidation) {
  if (!bf16_on_cpu()) GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  expect_eval_repeats_training_validation("--amp --amp-dtype bf16", "");
}

TEST(CliRoundtrip, EvalFp32RepeatsTheTrainingValidation) {
  expect_eval_repeats_training_validation("", "");
}

TEST(CliRoundtrip, Int8ExportRunsInInt8ByDefault) {
  TempDir tmp("int8_default");
  const fs::path root = tmp.path / "data";
  RN50_REQUIRE_OR_SKIP("data", make_imagenette_subset(root, 2, 4, 2), "imagenette not found");
  const std::string w = (tmp.path / "w.safetensors").string();
  rn50::save_initial_weights(w, "resnet18", 2, 3);
  const std::string model = (tmp.path / "int8").string();
  run_ok("export --from-pretrained-params " + sh_quote(w) + " --output " + sh_quote(model) +
         " --format rn50 --precision int8 --image-root " + sh_quote(root.string()) +
         " --calib-images 8 --crop-size 64 --resize-short 73");
  const json mj = json::parse(std::ifstream(model + "/model.json"));
  EXPECT_EQ(mj["precision"], "int8") << "model.json records the precision it was exported for";

  // bench infer: the report's precision without --precision, and fp32 when asked for.
  const fs::path r1 = tmp.path / "default.jsonl", r2 = tmp.path / "fp32.jsonl";
  run_ok("bench infer --model " + sh_quote(model) + " --batch-sizes 2 --crop-size 64 "
         "--benchmark-steps 1 --benchmark-warmup-steps 0 --report-file " + sh_quote(r1.string()));
  run_ok("bench infer --model " + sh_quote(model) + " --precision fp32 --batch-sizes 2 "
         "--crop-size 64 --benchmark-steps 1 --benchmark-warmup-steps 0 --report-file " +
         sh_quote(r2.string()));
  const auto d = read_jsonl(r1), f = read_jsonl(r2);
  ASSERT_FALSE(d.empty());
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(d.back()["precision"], "int8");
  EXPECT_EQ(f.back()["precision"], "fp32");

  // predict: the default gives the int8 engine's probabilities, --precision fp32 others.
  std::string image;
  for (auto& e : fs::recursive_directory_iterator(root / "val"))
    if (e.is_symlink() || e.is_regular_file()) image = e.path().string();
  ASSERT_FALSE(image.empty());
  const std::string p_default = run_ok("predict --json --model " + sh_quote(model) + " " +
                                       sh_quote(image));
  const std::string p_int8 = run_ok("predict --json --precision int8 --model " +
                                    sh_quote(model) + " " + sh_quote(image));
  const std::string p_fp32 = run_ok("predict --json --precision fp32 --model " +
                                    sh_quote(model) + " " + sh_quote(image));
  EXPECT_EQ(p_default, p_int8);
  EXPECT_NE(p_default, p_fp32);
}

TEST(CliRoundtrip, MoreClassesThanFoldersExports) {
  TempDir tmp("more_classes");
  const fs::path root = tmp.path / "data";
  RN50_REQUIRE_OR_SKIP("data", make_imagenette_subset(root, 2, 4, 2), "imagenette not found");
  const std::string ckpt = (tmp.path / "ckpt").string();
  run_ok("train --image-root " + sh_quote(root.string()) +
         " --num-of-class 5 --arch resnet18 --crop-size 32 --resize-short 36 --batch-size 4 "
         "--epochs 1 --warmup-epochs 0 --device cpu --checkpoint-dir " + sh_quote(ckpt));
  const std::string model = (tmp.path / "model").string();
  run_ok("export --format rn50 --from-checkpoint " + sh_quote(ckpt + "/resnet18") +
         " --output " + sh_quote(model));
  const json mj = json::parse(std::ifstream(model + "/model.json"));
  ASSERT_EQ(mj["classes"].size(), 5u) << mj["classes"].dump();
  EXPECT_EQ(mj["classes"][0], "n01440764");  // the folders' names first
  EXPECT_EQ(mj["classes"][4], "class_4");     // then numbered names
}

TEST(CliRoundtrip, PretrainedParamsFolder) {
  TempDir tmp("weights_dir");
  const fs::path dir = tmp.path / "pretrained";
  fs::create_directories(dir);
  // An empty folder: the error says which file it expected there.
  std::string out;
  EXPECT_NE(run_command(kCli + " eval" + kTiny + " --device cpu --from-pretrained-params " +
                            sh_quote(dir.string()),
                        &out),
            0);
  EXPECT_NE(out.find("model.safetensors"), std::string::npos) << out;
  EXPECT_NE(out.find(dir.string()), std::string::npos) << out;
  EXPECT_EQ(out.find("only 0 bytes"), std::string::npos) << out;
  // With DIR/model.safetensors: taken.
  rn50::save_initial_weights((dir / "model.safetensors").string(), "resnet18", 4, 1);
  run_ok("eval" + kTiny + " --device cpu --from-pretrained-params " + sh_quote(dir.string()));
  run_ok("export --format rn50 --from-pretrained-params " + sh_quote(dir.string()) +
         " --output " + sh_quote((tmp.path / "m").string()));
}

TEST(CliRoundtrip, CheckpointDirOfTrainingIsAccepted) {
  TempDir tmp("ckpt_dir");
  const std::string ckpt = (tmp.path / "out").string();
  run_ok("train" + kTiny + " --epochs 1 --warmup-epochs 0 --device cpu --checkpoint-dir " +
         sh_quote(ckpt));
  // The folder given to --checkpoint-dir, its <arch> folder and an epoch folder all work.
  for (const std::string& from : {ckpt, ckpt + "/resnet18", ckpt + "/resnet18/0"}) {
    run_ok("eval" + kTiny + " --device cpu --from-checkpoint " + sh_quote(from));
    run_ok("export --format rn50 --from-checkpoint " + sh_quote(from) + " --output " +
           sh_quote((tmp.path / "m").string()));
  }
  // Resuming from it too.
  run_ok("train" + kTiny + " --epochs 2 --warmup-epochs 0 --device cpu --checkpoint-dir " +
         sh_quote(ckpt) + " --from-checkpoint " + sh_quote(ckpt));
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "resnet18" / "1" / "state.json"));
}
