// One command line for the first start and every restart of a training job (issue 71): with
// --from-checkpoint <its own --checkpoint-dir> --last-epoch-of-checkpoint auto, a job killed
// (SIGKILL, as a preemption or `scancel` ends it) before its first checkpoint starts again from
// epoch 0 and says so; killed after epoch 0's checkpoint, the same command resumes at epoch 1; a
// half-written epoch folder is skipped; an explicit epoch and a folder that is not the run's own
// still refuse.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "child_process.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using rn50_test::CliProcess;
using rn50_test::run_command;
using rn50_test::sh_quote;

/// The job's command line: 2 epochs of 40 steps (a few seconds each), a line every 2 steps.
std::vector<std::string> job(const std::string& ck) {
  return {"train", "--data", "synthetic", "--synthetic-samples", "160", "--batch-size", "4",
          "--arch", "resnet18", "--crop-size", "32", "--resize-short", "36", "--num-of-class",
          "4", "--run-scope", "train_only", "--epochs", "2", "--warmup-epochs", "0",
          "--print-interval", "2", "--checkpoint-dir", ck, "--from-checkpoint", ck,
          "--last-epoch-of-checkpoint", "auto"};
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += " " + sh_quote(a);
  return s;
}

TEST(TrainRequeue, SameCommandStartsAKilledJobFromScratchThenResumesIt) {
  rn50_test::TempDir tmp("requeue");
  const std::string ck = (tmp.path / "ck").string();
  const fs::path epochs = fs::path(ck) / "resnet18";
  {  // First start, killed in epoch 0 before any checkpoint.
    CliProcess p(job(ck));
    bool found = false;
    const std::string out = p.read_until("epoch 0 (1/2) step 2/40", &found);
    ASSERT_TRUE(found) << out;
    EXPECT_NE(out.find("does not exist yet (no checkpoint written): starting from epoch 0"),
              std::string::npos)
        << out;
    EXPECT_EQ(p.kill9(), 128 + SIGKILL);
  }
  ASSERT_FALSE(fs::exists(epochs / "0" / "state.json"));
  // A half-written epoch folder, as a kill during the save leaves it.
  fs::create_directories(epochs / "0");
  {  // The same command: no complete checkpoint, so epoch 0 again; killed after its checkpoint.
    CliProcess p(job(ck));
    bool found = false;
    const std::string out = p.read_until("saved checkpoint", &found);
    ASSERT_TRUE(found) << out;
    EXPECT_NE(out.find("holds no complete checkpoint yet (--last-epoch-of-checkpoint auto): "
                       "starting from epoch 0"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("epoch 0 (1/2) step 40/40"), std::string::npos) << out;
    EXPECT_EQ(p.kill9(), 128 + SIGKILL);
  }
  ASSERT_TRUE(fs::exists(epochs / "0" / "state.json"));
  // The same command once more: resumes at epoch 1 and finishes.
  std::string out;
  ASSERT_EQ(run_command(std::string(RN50_CLI) + joined(job(ck)), &out), 0) << out;
  EXPECT_NE(out.find("resumed from " + (epochs / "0").string()), std::string::npos) << out;
  EXPECT_EQ(out.find("epoch 0 (1/2)"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 1 (2/2) done"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(epochs / "1" / "state.json"));

  // What still refuses: an explicit epoch with nothing there, and a missing folder that is not
  // the run's own --checkpoint-dir (a typo must not silently train from scratch).
  std::vector<std::string> explicit_epoch = job((tmp.path / "fresh").string());
  explicit_epoch.back() = "0";
  fs::create_directories(tmp.path / "fresh");
  EXPECT_NE(run_command(std::string(RN50_CLI) + joined(explicit_epoch), &out), 0);
  EXPECT_NE(out.find("no checkpoint found"), std::string::npos) << out;
  std::vector<std::string> typo = job(ck);
  typo[typo.size() - 3] = (tmp.path / "ckk").string();  // --from-checkpoint
  EXPECT_NE(run_command(std::string(RN50_CLI) + joined(typo), &out), 0);
  EXPECT_NE(out.find("no such directory"), std::string::npos) << out;
}

}  // namespace
}  // namespace rn50
