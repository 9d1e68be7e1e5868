// Skips that CI may turn into failures. A test that needs something outside the repository
// (../shared's imagenette and peer script, Debian's python3-torch/torchvision/PIL/numpy, mpirun,
// a GPU) calls RN50_REQUIRE_OR_SKIP(kind, have, why): without it the test is skipped with `why`;
// but when the environment variable RN50_REQUIRE lists `kind` (comma-separated, e.g.
// RN50_REQUIRE=data,torch,mpi as .ci/run sets it), the test FAILS instead, so that a green CI
// run always means the parity, data and multi-process tests really ran.
// Kinds: data (../shared/data/imagenette, ../shared/peers), torch (python() with torch,
// torchvision, PIL and numpy), mpi (mpirun found at configure time), onnx (python() with
// onnx and cv2: Debian python3-onnx, python3-opencv), plot (python() with matplotlib:
// Debian python3-matplotlib), gpu (a usable CUDA device), serve (promtool: Debian's prometheus),
// browser (/usr/bin/chromium, chromedriver and python() with selenium: Debian's chromium,
// chromium-driver, python3-selenium), mount (root: the disk-fault tests mount small tmpfs),
// qemu (/usr/bin/qemu-x86_64: Debian's qemu-user, the portability test), netns (root, ip netns
// and mpirun: the namespace-cluster tests of scripts/netns-cluster.sh), slurm (slurmctld, slurmd
// and munged: Debian's slurm-wlm and munge, the srun test on those hosts).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace rn50::test {

/// The interpreter the parity and helper scripts run with: $RN50_TEST_PYTHON when set, else
/// /usr/bin/python3 (Debian's python3-torch, torchvision, PIL, numpy, onnx, opencv, matplotlib).
/// A GPU image whose PyTorch lives in another interpreter sets it (scripts/gpu-window.sh does).
inline const char* python() {
  static const std::string p = [] {
    const char* env = std::getenv("RN50_TEST_PYTHON");
    return std::string(env && *env ? env : "/usr/bin/python3");
  }();
  return p.c_str();
}

/// Whether RN50_REQUIRE (comma-separated kinds) names `kind`.
inline bool required(const std::string& kind) {
  const char* env = std::getenv("RN50_REQUIRE");
  if (!env) return false;
  std::stringstream ss(env);
  for (std::string k; std::getline(ss, k, ',');)
    if (k == kind || k == "all") return true;
  return false;
}

}  // namespace rn50::test

/// Skips the current test with `why` unless `have`; fails it instead when RN50_REQUIRE names
/// `kind`. `why` may be a << chain: RN50_REQUIRE_OR_SKIP("data", ok, "no " << path).
#define RN50_REQUIRE_OR_SKIP(kind, have, why)                                              \
  do {                                                                                     \
    if (!(have)) {                                                                         \
      if (::rn50::test::required(kind))                                                    \
        FAIL() << why << " (RN50_REQUIRE names '" << (kind) << "', so this is a failure)"; \
      GTEST_SKIP() << why;                                                                 \
    }                                                                                      \
  } while (0)
