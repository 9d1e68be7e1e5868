// Multi-rank tests of the communicators: the rn50_parallel_worker program (tests/parallel_worker.cpp) run
// under `mpirun --oversubscribe -np N` (--allow-run-as-root when root). Each worker checks its
// own results (sums recomputed independently from every rank's seed) and aborts the job on a
// failed check, so these tests look at the exit code, the output and the time taken.
// Skipped, with the reason, when mpirun or the MPI communicator is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "parallel_test_util.h"
#include "rn50/parallel.h"
#include "require.h"

namespace {

using rn50::test::run;
using rn50::test::RunResult;

std::string mpirun(int np, const std::string& scenario) {
  return rn50::test::mpirun_prefix(np) + RN50_PARALLEL_WORKER + " " + scenario;
}

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}


class DistMpi : public ::testing::TestWithParam<int> {};

TEST_P(DistMpi, CollectivesMatchIndependentSums) {
  SKIP_WITHOUT_MPI();
  const int np = GetParam();
  RunResult r = run(mpirun(np, "collectives"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "collectives OK (mpi, openmpi launch"), np) << r.output;
  for (int k = 0; k < np; ++k)
    EXPECT_NE(r.output.find(fmt::format("rank {}/{}: collectives OK", k, np)), std::string::npos)
        << r.output;
}

TEST_P(DistMpi, GradBucketerEqualsPlainAllreduce) {
  SKIP_WITHOUT_MPI();
  const int np = GetParam();
  RunResult r = run(mpirun(np, "bucketer"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "bucketer OK (mpi"), np) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, DistMpi, ::testing::Values(2, 3));

TEST(DistMpiSingleton, OneProcessMpiWithoutMpirun) {
  SKIP_WITHOUT_MPI();
  // A 1-process MPI job started without mpirun (MPI singleton), as the NCCL path at world size 1.
  RunResult r = run(std::string(RN50_PARALLEL_WORKER) + " collectives mpi");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0/1: collectives OK (mpi, single launch"), std::string::npos)
      << r.output;
}

TEST(DistMpiFailure, AbortOnOneRankStopsTheOthers) {
  SKIP_WITHOUT_MPI();
  // Rank 1 aborts after 0.5 s while rank 0 is blocked in an allreduce it never joins.
  RunResult r = run(mpirun(2, "abort"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
  const size_t msg = r.output.find("rank 1: deliberate failure for the test");
  ASSERT_NE(msg, std::string::npos) << r.output;
  // The failing rank's message comes first: before any other rank's line and mpirun's banner.
  EXPECT_EQ(r.output.find("rank "), msg) << r.output;
  const size_t banner = r.output.find("MPI_ABORT");
  if (banner != std::string::npos) {
    EXPECT_LT(msg, banner) << r.output;
  }
  EXPECT_EQ(r.output.find("UNEXPECTED"), std::string::npos) << r.output;
}

TEST(DistMpiFailure, WatchdogStopsARankStuckInACollective) {
  SKIP_WITHOUT_MPI();
  // Both ranks progress for 1.6 s (rank 0's 1 s watchdog stays quiet thanks to heartbeats), then
  // rank 1 hangs for 60 s without a heartbeat; rank 0, blocked in an allreduce, must be stopped
  // by its watchdog about 1 s later, and the whole job with it.
  RunResult r = run(mpirun(2, "watchdog"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
  const size_t msg = r.output.find("rank 0: watchdog: no progress for");
  ASSERT_NE(msg, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank "), msg) << r.output;
  EXPECT_EQ(r.output.find("UNEXPECTED"), std::string::npos) << r.output;
}

}  // namespace

namespace {

std::string nccl_skip_reason() {
  auto kinds = rn50::compiled_communicators();
  if (std::find(kinds.begin(), kinds.end(), "nccl") == kinds.end())
    return "rn50 was built without NCCL (needs the CUDA backend and NCCL)";
  if (rn50::cuda_device_count() == 0) return "no GPU: " + rn50::cuda_unavailable_reason();
  return "";
}

TEST(DistNccl, OneGpuWorldSizeOne) {
  // The NCCL path at world size 1 (the GPU check): device tensors, the comm stream and
  // its events, the bucketer's device buffers. Never run on the machine it was written on.
  const std::string why = nccl_skip_reason();
  RN50_REQUIRE_OR_SKIP("gpu", why.empty(), why);
  for (const char* scenario : {"collectives", "bucketer"}) {
    RunResult r = run(std::string(RN50_PARALLEL_WORKER) + " " + scenario + " nccl cuda");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("rank 0/1: ") + scenario + " OK (nccl"),
              std::string::npos)
        << r.output;
  }
}

TEST(DistNccl, TwoGpus) {
  std::string why = nccl_skip_reason();
  if (why.empty() && rn50::cuda_device_count() < 2) why = "fewer than 2 GPUs";
  if (why.empty()) why = rn50::test::mpi_skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;  // two GPUs are never required
  for (const char* scenario : {"collectives", "bucketer"}) {
    RunResult r = run(mpirun(2, std::string(scenario) + " nccl cuda"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count(r.output, std::string(scenario) + " OK (nccl"), 2) << r.output;
  }
}

}  // namespace
