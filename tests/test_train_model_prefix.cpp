// --model-prefix: checkpoint files named after the prefix and recorded in state.json; resume and
// export find them without the flag; a checkpoint from before the names were recorded (default
// names, no "model_file" in state.json) still loads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_train_util.h"
#include "train/checkpoint.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using rn50_test::run_command;

const std::string kTiny =
    " --data synthetic --synthetic-samples 8 --batch-size 4 --warmup-epochs 0 --arch resnet18 "
    "--crop-size 32 --resize-short 36 --num-of-class 4 --run-scope train_only ";

TEST(ModelPrefix, FileNames) {
  EXPECT_EQ(checkpoint_file_names("model"),
            std::make_pair(std::string("model.safetensors"), std::string("optimizer.safetensors")));
  EXPECT_EQ(checkpoint_file_names("resnet_50_paddle"),
            std::make_pair(std::string("resnet_50_paddle.safetensors"),
                           std::string("resnet_50_paddle.optimizer.safetensors")));
}

TEST(ModelPrefix, SaveResumeExport) {
  rn50_test::TempDir tmp("model_prefix");
  const std::string cli = RN50_CLI;
  const fs::path ckpt = tmp.path / "ckpt";
  std::string out;
  ASSERT_EQ(run_command(cli + " train" + kTiny +
                            "--epochs 1 --model-prefix rn50_run "
                            "--checkpoint-dir " +
                            ckpt.string(),
                        &out),
            0)
      << out;
  const fs::path e0 = ckpt / "resnet18" / "0";
  EXPECT_TRUE(fs::exists(e0 / "rn50_run.safetensors"));
  EXPECT_TRUE(fs::exists(e0 / "rn50_run.optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(e0 / "model.safetensors"));
  const CheckpointState st = read_checkpoint_state(e0.string());
  EXPECT_EQ(st.model_file, "rn50_run.safetensors");
  // Resume (no --model-prefix: state.json names the files) and export.
  ASSERT_EQ(run_command(cli + " train" + kTiny + "--epochs 2 --from-checkpoint " +
                            (ckpt / "resnet18").string() + " --checkpoint-dir " + ckpt.string(),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(ckpt / "resnet18" / "1" / "model.safetensors"));  // default prefix now
  ASSERT_EQ(run_command(cli + " export --format rn50 --from-checkpoint " + e0.string() +
                            " --output " + (tmp.path / "exp").string(),
                        &out),
            0)
      << out;
  // A checkpoint written before the names were recorded: default names, no keys.
  const fs::path legacy = tmp.path / "legacy";
  fs::create_directories(legacy);
  fs::copy_file(e0 / "rn50_run.safetensors", legacy / "model.safetensors");
  fs::copy_file(e0 / "rn50_run.optimizer.safetensors", legacy / "optimizer.safetensors");
  nlohmann::json j;
  std::ifstream(e0 / "state.json") >> j;
  j.erase("model_file");
  j.erase("optimizer_file");
  std::ofstream(legacy / "state.json") << j.dump(2);
  ASSERT_EQ(run_command(cli + " train" + kTiny + "--epochs 2 --from-checkpoint " + legacy.string() +
                            " --checkpoint-dir " + (tmp.path / "c2").string(),
                        &out),
            0)
      << out;
  // Bad prefixes are refused before anything runs.
  EXPECT_NE(run_command(cli + " train" + kTiny + "--epochs 1 --model-prefix a/b", &out), 0);
  EXPECT_NE(out.find("--model-prefix 'a/b'"), std::string::npos) << out;
  EXPECT_NE(
      run_command(cli + " train" + kTiny + "--epochs 1 --save-interval 0 --model-prefix x", &out),
      0);
  EXPECT_NE(out.find("--model-prefix has no effect"), std::string::npos) << out;
}

}  // namespace
}  // namespace rn50
