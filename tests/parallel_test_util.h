// Helpers shared by the multi-process tests (test_parallel_*.cpp): running a command under a shell
// with its output and timing, the mpirun command line, and skipping when MPI is unavailable.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>

#include "rn50/parallel.h"
#include "require.h"

#ifndef RN50_MPIEXEC
#define RN50_MPIEXEC ""
#endif

namespace rn50::test {

struct RunResult {
  int exit_code = -1;
  std::string output;  ///< stdout and stderr together
  double seconds = 0;
};

/// Runs `cmd` through the shell (stderr merged into stdout).
inline RunResult run(const std::string& cmd) {
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

/// Why the MPI tests cannot run here ("" when they can).
inline std::string mpi_skip_reason() {
  auto kinds = rn50::compiled_communicators();
  if (std::find(kinds.begin(), kinds.end(), "mpi") == kinds.end())
    return "rn50 was built without MPI (install libopenmpi-dev openmpi-bin and re-run cmake)";
  if (std::string(RN50_MPIEXEC).empty() || access(RN50_MPIEXEC, X_OK) != 0)
    return "mpirun was not found at configure time (install openmpi-bin)";
  return "";
}

/// "mpirun ... -np N " with the options every test needs: oversubscription (2 cores), no
/// cross-memory-attach single copies (containers without CAP_SYS_PTRACE refuse them), root.
inline std::string mpirun_prefix(int np) {
  std::string cmd = std::string(RN50_MPIEXEC) +
                    " --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none";
  if (geteuid() == 0) cmd += " --allow-run-as-root";
  return cmd + " -np " + std::to_string(np) + " ";
}

}  // namespace rn50::test

#define SKIP_WITHOUT_MPI()                                    \
  do {                                                        \
    const std::string why = rn50::test::mpi_skip_reason();    \
    RN50_REQUIRE_OR_SKIP("mpi", why.empty(), why);            \
  } while (0)
