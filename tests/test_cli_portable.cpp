// The binary runs on older CPUs than the one it was built on (issue 69): under qemu-user's
// emulation of an Intel Haswell (AVX2, no AVX-512) and of a Nehalem (SSE4.2, no AVX: the
// x86-64-v2 floor the default build targets), `rn50 --version`, one synthetic training step and
// a prediction with a model exported on this machine succeed, and the emulated CPU is what the
// run reports (its kernels chosen at run time, core/cpu_info.h). A build with -DRN50_NATIVE=ON
// on an AVX-512 machine dies here with SIGILL; the test then fails and says so.
// Needs Debian's qemu-user (scripts/setup.sh installs it; RN50_REQUIRE=qemu fails the skip).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "data_test_util.h"
#include "require.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using rn50_test::run_command;
using rn50_test::sh_quote;

const char* const kQemu = "/usr/bin/qemu-x86_64";

/// `cmd` (the CLI's arguments) run under qemu-user emulating `cpu`; its status and output (the
/// emulator's warnings about host features it leaves out dropped).
int run_emulated(const std::string& cpu, const std::string& args, std::string* out) {
  std::string raw;
  const int rc = run_command(std::string(kQemu) + " -cpu " + cpu + " " + sh_quote(RN50_CLI) + " " +
                                 args,
                             &raw);
  out->clear();
  size_t at = 0;
  while (at < raw.size()) {
    const size_t nl = raw.find('\n', at);
    const std::string line = raw.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (line.find("qemu-x86_64: warning:") == std::string::npos) *out += line + "\n";
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return rc;
}

TEST(CliPortable, RunsTrainsAndPredictsOnHaswellAndNehalem) {
  RN50_REQUIRE_OR_SKIP("qemu", fs::exists(kQemu),
                       "no " << kQemu << " (Debian's qemu-user; scripts/setup.sh installs it)");
  rn50_test::TempDir tmp("portable");
  const std::string dir = tmp.str();
  // A model exported natively: resnet18, 32 px, one synthetic step at lr 0.
  std::string out;
  ASSERT_EQ(run_command(sh_quote(RN50_CLI) +
                            " train --data synthetic --synthetic-samples 4 --batch-size 4 "
                            "--epochs 1 --warmup-epochs 0 --lr 0 --arch resnet18 --crop-size 32 "
                            "--resize-short 36 --device cpu --checkpoint-dir " +
                            sh_quote(dir + "/ck") + " --inference-dir " + sh_quote(dir + "/m"),
                        &out),
            0)
      << out;
  testutil::write_jpeg(dir + "/image.jpg", 48, 40, 7);
  for (const char* cpu : {"Haswell", "Nehalem"}) {
    SCOPED_TRACE(cpu);
    int rc = run_emulated(cpu, "--version", &out);
    ASSERT_EQ(rc, 0) << "rn50 --version under qemu -cpu " << cpu
                     << " (status 132 or a signal: an instruction this CPU lacks; a build with "
                        "-DRN50_NATIVE=ON?):\n"
                     << out;
    // The kernels run at the emulated CPU's level.
    const std::string want =
        std::string(cpu) == "Haswell" ? "CPU kernels: AVX2" : "CPU kernels: SSE41";
    EXPECT_NE(out.find(want), std::string::npos) << out;
    rc = run_emulated(cpu,
                      "train --benchmark --data synthetic --device cpu --arch resnet18 "
                      "--batch-size 2 --crop-size 32 --benchmark-steps 1 "
                      "--benchmark-warmup-steps 0",
                      &out);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("train.ips"), std::string::npos) << out;
    rc = run_emulated(cpu,
                      "predict --device cpu --top-k 3 --json --model " + sh_quote(dir + "/m") +
                          " " + sh_quote(dir + "/image.jpg"),
                      &out);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("image.jpg"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace rn50
