// Disk faults during a training run (issue 32 item 3), made to happen on small tmpfs mounts:
//  * the checkpoint disk fills up: the run stops naming the file and the reason, the newest
//    complete epoch folder stays intact, no temporary file is left, and
//    --last-epoch-of-checkpoint auto resumes from it;
//  * a read-only checkpoint folder stops the run before its first epoch, naming the flag;
//  * the checkpoint folder removed mid-run: the next checkpoint recreates it;
//  * the report file's disk fills up: the run stops naming --report-file and the reason.
// Mounting needs root (CAP_SYS_ADMIN); without it the tests skip, and RN50_REQUIRE=mount turns
// the skip into a failure.
#include <gtest/gtest.h>

#include <string>

#include "require.h"
#include "test_train_util.h"

using namespace rn50_test;

namespace {

const std::string kCli = RN50_CLI;
/// resnet18 at 32 px on synthetic data: a checkpoint is about 2 x 45 MB.
const std::string kTiny =
    " train --data synthetic --synthetic-samples 32 --num-of-class 4 --arch resnet18 "
    "--crop-size 32 --batch-size 8 --warmup-epochs 0 --lr 0.01 --device cpu --workers 1";

/// A tmpfs of `size` mounted at `dir` for the test's lifetime.
struct Tmpfs {
  fs::path dir;
  bool mounted = false;
  Tmpfs(const fs::path& d, const std::string& size) : dir(d) {
    fs::create_directories(dir);
    std::string out;
    mounted = run_command("mount -t tmpfs -o size=" + size + " rn50-test " + sh_quote(dir.string()),
                          &out) == 0;
  }
  bool read_only() {
    std::string out;
    return run_command("mount -o remount,ro " + sh_quote(dir.string()), &out) == 0;
  }
  ~Tmpfs() {
    if (mounted) {
      std::string out;
      run_command("umount -l " + sh_quote(dir.string()), &out);
    }
  }
};

std::vector<std::string> files_named(const fs::path& root, const std::string& part) {
  std::vector<std::string> v;
  if (!fs::exists(root)) return v;
  for (auto& e : fs::recursive_directory_iterator(root))
    if (e.path().filename().string().find(part) != std::string::npos) v.push_back(e.path().string());
  return v;
}

}  // namespace

TEST(DiskFaults, FullCheckpointDiskStopsTheRunAndTheLastCompleteEpochResumes) {
  TempDir tmp("disk_full");
  Tmpfs disk(tmp.path / "small", "120m");  // one checkpoint (~90 MB) fits, not two
  RN50_REQUIRE_OR_SKIP("mount", disk.mounted, "cannot mount a tmpfs (needs root)");
  const fs::path ck = disk.dir / "ck";
  std::string out;
  const int rc = run_command(kCli + kTiny + " --epochs 3 --checkpoint-dir " +
                                 sh_quote(ck.string()) + " --report-file " +
                                 sh_quote((tmp.path / "a.jsonl").string()),
                             &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_NE(out.find((ck / "resnet18" / "1").string()), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(ck / "resnet18" / "0" / "state.json"));
  EXPECT_FALSE(fs::exists(ck / "resnet18" / "1" / "state.json"));  // never taken for complete
  EXPECT_TRUE(files_named(ck, ".tmp.").empty());                   // no half-written file left
  // auto resumes from epoch 0, intact (its recorded CRC-32C is checked on load).
  const fs::path report = tmp.path / "b.jsonl";
  ASSERT_EQ(run_command(kCli + kTiny + " --epochs 2 --from-checkpoint " + sh_quote(ck.string()) +
                            " --last-epoch-of-checkpoint auto --checkpoint-dir " +
                            sh_quote((tmp.path / "ck2").string()) + " --report-file " +
                            sh_quote(report.string()),
                        &out),
            0)
      << out;
  const auto lines = read_jsonl(report);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0]["start_epoch"], 1);
  EXPECT_TRUE(fs::exists(tmp.path / "ck2" / "resnet18" / "1" / "state.json"));
}

TEST(DiskFaults, ReadOnlyCheckpointFolderStopsTheRunBeforeTraining) {
  TempDir tmp("disk_ro");
  Tmpfs disk(tmp.path / "ro", "1m");
  RN50_REQUIRE_OR_SKIP("mount", disk.mounted, "cannot mount a tmpfs (needs root)");
  ASSERT_TRUE(disk.read_only());
  const fs::path report = tmp.path / "r.jsonl";
  std::string out;
  EXPECT_NE(run_command(kCli + kTiny + " --epochs 1 --checkpoint-dir " +
                            sh_quote((disk.dir / "ck").string()) + " --report-file " +
                            sh_quote(report.string()),
                        &out),
            0);
  EXPECT_NE(out.find("--checkpoint-dir"), std::string::npos) << out;
  EXPECT_NE(out.find("Read-only file system"), std::string::npos) << out;
  EXPECT_TRUE(of_type(read_jsonl(report), "step").empty()) << "trained before failing";
}

TEST(DiskFaults, CheckpointFolderRemovedMidRunIsRecreated) {
  TempDir tmp("disk_rm");
  const fs::path ck = tmp.path / "ck";
  // Removes the whole checkpoint folder as soon as epoch 0's checkpoint is complete.
  const std::string remover = "( for i in $(seq 6000); do [ -f " +
                              sh_quote((ck / "resnet18" / "0" / "state.json").string()) +
                              " ] && { rm -rf " + sh_quote(ck.string()) +
                              "; break; }; sleep 0.01; done ) & ";
  std::string out;
  ASSERT_EQ(run_command(remover + kCli + kTiny + " --synthetic-samples 48 --epochs 2 "
                                             "--checkpoint-dir " + sh_quote(ck.string()) +
                            "; wait",
                        &out),
            0)
      << out;
  EXPECT_FALSE(fs::exists(ck / "resnet18" / "0"));  // it was removed
  EXPECT_TRUE(fs::exists(ck / "resnet18" / "1" / "state.json")) << out;
}

TEST(DiskFaults, FullReportDiskStopsTheRunNamingTheReportFile) {
  TempDir tmp("disk_report");
  Tmpfs disk(tmp.path / "tiny", "8k");
  RN50_REQUIRE_OR_SKIP("mount", disk.mounted, "cannot mount a tmpfs (needs root)");
  const fs::path report = disk.dir / "r.jsonl";
  std::string out;
  EXPECT_NE(run_command(kCli + kTiny + " --synthetic-samples 256 --print-interval 1 --epochs 1 "
                                       "--checkpoint-dir " +
                            sh_quote((tmp.path / "ck").string()) + " --report-file " +
                            sh_quote(report.string()),
                        &out),
            0);
  EXPECT_NE(out.find("--report-file"), std::string::npos) << out;
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
}
