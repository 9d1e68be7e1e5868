// Fine-tuning pretrained weights on another class count (issue 71): `rn50 train
// --from-pretrained-params W` with 1000-class weights on a 10-class folder loads the backbone,
// re-initialises fc and says so; --strict-pretrained and evaluation refuse instead, naming the
// --num-of-class that fits; the weights are found from an epoch folder written with
// --model-prefix and from a DLE-style path prefix; a Paddle .pdparams behind such a prefix is
// refused with the `rn50 convert-weights` command that converts it. (The library-level check that
// every backbone tensor is loaded and fc kept is test_train_checkpoint's
// PretrainedParamsShapeErrorsAndConversion.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "require.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using rn50_test::run_command;
using rn50_test::sh_quote;

TEST(TrainFinetune, ThousandClassWeightsOnATenClassFolderReinitialiseFc) {
  rn50_test::TempDir tmp("finetune");
  const fs::path data = tmp.path / "data";
  RN50_REQUIRE_OR_SKIP("data", rn50_test::make_imagenette_subset(data, 10, 2, 1),
                       "imagenette not found");
  const std::string cli = RN50_CLI;
  // 1000-class weights, written as a DLE Paddle run names them (--model-prefix).
  const fs::path src = tmp.path / "pre";
  std::string out;
  ASSERT_EQ(run_command(cli + " train --data synthetic --synthetic-samples 4 --batch-size 4 "
                              "--epochs 1 --warmup-epochs 0 --lr 0 --arch resnet18 --crop-size 32 "
                              "--resize-short 36 --num-of-class 1000 --run-scope train_only "
                              "--model-prefix resnet_50_paddle --checkpoint-dir " +
                              sh_quote(src.string()),
                        &out),
            0)
      << out;
  const fs::path epoch = src / "resnet18" / "0";
  ASSERT_TRUE(fs::exists(epoch / "resnet_50_paddle.safetensors")) << out;
  const std::string tune = " train --image-root " + sh_quote(data.string()) +
                           " --epochs 1 --warmup-epochs 0 --batch-size 4 --arch resnet18 "
                           "--crop-size 32 --resize-short 36 --run-scope train_only "
                           "--checkpoint-dir " +
                           sh_quote((tmp.path / "out").string()) + " --from-pretrained-params ";
  // The epoch folder (state.json names the --model-prefix file) and the DLE path prefix.
  for (const fs::path& w : {epoch, epoch / "resnet_50_paddle"}) {
    SCOPED_TRACE(w.string());
    ASSERT_EQ(run_command(cli + tune + sh_quote(w.string()), &out), 0) << out;
    EXPECT_NE(out.find("loaded pretrained parameters from " +
                       (epoch / "resnet_50_paddle.safetensors").string() +
                       "; fc: 1000 -> 10 classes, re-initialised"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("epoch 0 (1/1) done"), std::string::npos) << out;
  }
  // --strict-pretrained refuses, naming the class count that fits.
  EXPECT_NE(run_command(cli + tune + sh_quote(epoch.string()) + " --strict-pretrained", &out), 0);
  EXPECT_NE(out.find("--num-of-class 1000"), std::string::npos) << out;
  // Evaluation never re-initialises: a fresh classifier would measure nothing.
  EXPECT_NE(run_command(cli + " eval --image-root " + sh_quote(data.string()) +
                            " --arch resnet18 --crop-size 32 --resize-short 36 "
                            "--from-pretrained-params " +
                            sh_quote(epoch.string()),
                        &out),
            0);
  EXPECT_NE(out.find("--num-of-class 1000"), std::string::npos) << out;
  // --strict-pretrained alone has nothing to check.
  EXPECT_NE(run_command(cli + " train --image-root " + sh_quote(data.string()) +
                            " --strict-pretrained",
                        &out),
            0);
  EXPECT_NE(out.find("--strict-pretrained"), std::string::npos) << out;
  // A Paddle file behind a DLE path prefix: the converting command is named.
  const fs::path paddle = tmp.path / "paddle" / "resnet_50_paddle";
  fs::create_directories(paddle.parent_path());
  std::ofstream(paddle.string() + ".pdparams", std::ios::binary) << "\x80\x04\x95rest";
  EXPECT_NE(run_command(cli + tune + sh_quote(paddle.string()), &out), 0);
  EXPECT_NE(out.find("rn50 convert-weights " + paddle.string() + ".pdparams"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace rn50
