// In-process tests of the data-parallel pieces that need no second process: the launcher
// environment (fake OpenMPI and Slurm variables), the communicator factory, the "single"
// communicator (abort and watchdog in death tests), GradBucketer over it, and CPU affinity
// (made-up machines for the per-rank share, the real process for binding).
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "core/check.h"
#include "parallel/affinity.h"
#include "rn50/parallel.h"

namespace rn50 {
namespace {

/// Clears every launcher variable for the test's duration and restores them afterwards.
class LauncherEnv {
 public:
  LauncherEnv() {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
  }
  ~LauncherEnv() {
    for (const char* name : kNames) unsetenv(name);
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }
  void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
      "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
      "SLURM_NODEID", "SLURM_STEP_NODEID", "OMPI_MCA_orte_bound_at_launch",
      "SLURM_CPU_BIND_TYPE"};
  std::map<std::string, std::string> saved_;
};

/// The message of the rn50::Error that f throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(stmt, needle)                                             \
  do {                                                                         \
    std::string msg_ = error_of([&] { stmt; });                                \
    EXPECT_NE(msg_, "") << #stmt << " did not throw";                          \
    EXPECT_NE(msg_.find(needle), std::string::npos) << msg_;                   \
  } while (0)

void set_openmpi(LauncherEnv& env, int rank, int size, int lrank, int lsize) {
  env.set("OMPI_COMM_WORLD_RANK", std::to_string(rank));
  env.set("OMPI_COMM_WORLD_SIZE", std::to_string(size));
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(lrank));
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(lsize));
}

TEST(DistProcessInfo, NoLauncherIsOneProcess) {
  LauncherEnv env;
  ProcessInfo p = ProcessInfo::from_environment();
  EXPECT_EQ(p.launcher, "single");
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.local_rank, 0);
  EXPECT_EQ(p.local_size, 1);
}

TEST(DistProcessInfo, OpenMpi) {
  LauncherEnv env;
  set_openmpi(env, 5, 8, 1, 4);
  ProcessInfo p = ProcessInfo::from_environment();
  EXPECT_EQ(p.launcher, "openmpi");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_size, 4);
  // OpenMPI's variables win over a surrounding Slurm allocation's.
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "1");
  EXPECT_EQ(ProcessInfo::from_environment().rank, 5);
}

TEST(DistProcessInfo, OpenMpiErrorsNameTheVariable) {
  LauncherEnv env;
  set_openmpi(env, 1, 2, 1, 2);
  env.set("OMPI_COMM_WORLD_RANK", "x1");
  EXPECT_ERROR(ProcessInfo::from_environment(), "OMPI_COMM_WORLD_RANK='x1'");
  env.set("OMPI_COMM_WORLD_RANK", "-1");
  EXPECT_ERROR(ProcessInfo::from_environment(), "OMPI_COMM_WORLD_RANK='-1'");
  env.set("OMPI_COMM_WORLD_RANK", "2");
  EXPECT_ERROR(ProcessInfo::from_environment(), "rank 2 is not below the world size 2");
  env.set("OMPI_COMM_WORLD_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  EXPECT_ERROR(ProcessInfo::from_environment(), "local rank 3 is not below the local size 2");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
  EXPECT_ERROR(ProcessInfo::from_environment(), "local size 3");
  env.set("OMPI_COMM_WORLD_SIZE", "0");
  EXPECT_ERROR(ProcessInfo::from_environment(), "OMPI_COMM_WORLD");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_ERROR(ProcessInfo::from_environment(), "OMPI_COMM_WORLD_LOCAL_SIZE is missing");
}

TEST(DistProcessInfo, Slurm) {
  LauncherEnv env;
  env.set("SLURM_PROCID", "5");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "1");
  env.set("SLURM_TASKS_PER_NODE", "2(x3),1,1");
  env.set("SLURM_NODEID", "2");
  ProcessInfo p = ProcessInfo::from_environment();
  EXPECT_EQ(p.launcher, "slurm");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_size, 2);
  env.set("SLURM_NODEID", "4");
  env.set("SLURM_LOCALID", "0");
  EXPECT_EQ(ProcessInfo::from_environment().local_size, 1);
  // The step's layout wins over the allocation's.
  env.set("SLURM_STEP_TASKS_PER_NODE", "4,4");
  env.set("SLURM_STEP_NODEID", "1");
  EXPECT_EQ(ProcessInfo::from_environment().local_size, 4);
  unsetenv("SLURM_STEP_TASKS_PER_NODE");
  unsetenv("SLURM_STEP_NODEID");
  // A single-entry list needs no node id; without any list, --ntasks-per-node.
  unsetenv("SLURM_NODEID");
  env.set("SLURM_TASKS_PER_NODE", "8");
  EXPECT_EQ(ProcessInfo::from_environment().local_size, 8);
  unsetenv("SLURM_TASKS_PER_NODE");
  env.set("SLURM_NTASKS_PER_NODE", "3");
  EXPECT_EQ(ProcessInfo::from_environment().local_size, 3);
}

TEST(DistProcessInfo, SlurmErrorsNameTheVariable) {
  LauncherEnv env;
  env.set("SLURM_PROCID", "1");
  env.set("SLURM_LOCALID", "1");
  env.set("SLURM_TASKS_PER_NODE", "2");
  EXPECT_ERROR(ProcessInfo::from_environment(), "SLURM_NTASKS is missing");
  env.set("SLURM_NTASKS", "2");
  env.set("SLURM_TASKS_PER_NODE", "2(x");
  env.set("SLURM_NODEID", "0");
  EXPECT_ERROR(ProcessInfo::from_environment(), "SLURM_TASKS_PER_NODE='2(x'");
  env.set("SLURM_TASKS_PER_NODE", "1,1");
  env.set("SLURM_NODEID", "2");
  EXPECT_ERROR(ProcessInfo::from_environment(), "lists 2 nodes but this is node 2");
  env.set("SLURM_TASKS_PER_NODE", "1(x2)");
  env.set("SLURM_NODEID", "1");
  EXPECT_ERROR(ProcessInfo::from_environment(), "local rank 1 is not below the local size 1");
  env.set("SLURM_TASKS_PER_NODE", "1,1");
  unsetenv("SLURM_NODEID");
  EXPECT_ERROR(ProcessInfo::from_environment(), "tasks per node are unknown");
  env.set("SLURM_NTASKS_PER_NODE", "two");
  EXPECT_ERROR(ProcessInfo::from_environment(), "SLURM_NTASKS_PER_NODE='two'");
}

TEST(DistCommunicator, FactoryChoosesAndRejects) {
  LauncherEnv env;
  auto backend = make_backend("ref");
  auto kinds = compiled_communicators();
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds[0], "single");
  EXPECT_EQ(make_communicator("auto", *backend)->name(), "single");
  EXPECT_EQ(make_communicator("single", *backend)->name(), "single");
  EXPECT_ERROR(make_communicator("gloo", *backend), "unknown communicator 'gloo'");
  EXPECT_ERROR(make_communicator("nccl", *backend), "nccl");
  if (std::find(kinds.begin(), kinds.end(), "mpi") == kinds.end())
    EXPECT_ERROR(make_communicator("mpi", *backend), "built without MPI");
  set_openmpi(env, 0, 2, 0, 2);
  EXPECT_ERROR(make_communicator("single", *backend), "2-process job");
}

TEST(DistCommunicator, SingleIsTheIdentity) {
  LauncherEnv env;
  auto backend = make_backend("ref");
  auto comm = make_communicator("single", *backend);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  Tensor t = Tensor::empty({37}, DType::f32);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int i = 0; i < 37; ++i) t.data_as<float>()[i] = u(gen);
  Tensor before = t.clone();
  comm->allreduce_sum(t);
  EXPECT_EQ(0, std::memcmp(t.data(), before.data(), t.nbytes()));
  Tensor labels = Tensor::empty({3}, DType::i32);
  EXPECT_ERROR(comm->allreduce_sum_async(labels), "not F32");
  std::vector<double> v = {1.5, -2.25};
  comm->allreduce_sum_host(v);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2.25}));
  std::vector<uint8_t> bytes = {1, 2, 3};
  comm->broadcast_host(bytes, 0);
  EXPECT_EQ(bytes.size(), 3u);
  EXPECT_ERROR(comm->broadcast_host(bytes, 1), "root 1");
  comm->barrier();
}

TEST(DistCommunicatorDeathTest, SingleAbortPrintsAndExits) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto backend = make_backend("ref");
  EXPECT_EXIT(
      {
        LauncherEnv env;
        make_communicator("single", *backend)->abort("bad data beyond the threshold");
      },
      ::testing::ExitedWithCode(1), "rank 0: bad data beyond the threshold");
}

TEST(DistCommunicatorDeathTest, WatchdogFiresWithoutHeartbeats) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto backend = make_backend("ref");
  // Heartbeats every 0.1 s keep a 0.5 s watchdog quiet for 1.5 s...
  EXPECT_EXIT(
      {
        LauncherEnv env;
        auto comm = make_communicator("single", *backend);
        comm->start_watchdog(0.5);
        for (int i = 0; i < 15; ++i) {
          comm->heartbeat();
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        comm.reset();  // stops the watchdog
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // ...and without them it stops the process about 0.5 s later.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(
      {
        LauncherEnv env;
        auto comm = make_communicator("single", *backend);
        comm->start_watchdog(0.5);
        std::this_thread::sleep_for(std::chrono::seconds(20));
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "rank 0: watchdog: no progress for .* \\(timeout 0.5 s\\)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(DistGradBucketer, SingleLeavesTheSlabAndChecksItsArguments) {
  LauncherEnv env;
  auto backend = make_backend("ref");
  auto comm = make_communicator("single", *backend);
  Tensor g = backend->alloc({100}, DType::f32);
  for (int i = 0; i < 100; ++i) g.data_as<float>()[i] = 0.5f * i - 7.f;
  Tensor before = g.clone();
  GradBucketer b(*comm, *backend, g, {{60, 40}, {20, 40}, {0, 20}}, 100);
  EXPECT_EQ(b.num_buckets(), 3);  // 160 + 160 bytes > 100: each parameter alone
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < 3; ++i) b.ready(i);
    b.finish();
    EXPECT_EQ(b.last_wait_seconds(), 0.0);
  }
  EXPECT_EQ(0, std::memcmp(g.data(), before.data(), g.nbytes()));
  EXPECT_EQ(GradBucketer(*comm, *backend, g, {{0, 50}, {50, 50}}, 400).num_buckets(), 1);
  b.ready(0);
  EXPECT_ERROR(b.ready(2), "parameter 2 became ready but 1 was expected");
  b.finish();
  EXPECT_ERROR(GradBucketer(*comm, *backend, g, {}, 64), "no parameter ranges");
  EXPECT_ERROR(GradBucketer(*comm, *backend, g, {{0, 0}}, 64), "empty or outside");
  EXPECT_ERROR(GradBucketer(*comm, *backend, g, {{95, 10}}, 64), "outside the slab");
  EXPECT_ERROR(GradBucketer(*comm, *backend, g, {{0, 10}, {5, 10}}, 64), "overlap");
  EXPECT_ERROR(GradBucketer(*comm, *backend, g, {{0, 10}}, 0), "bucket size");
  Tensor g16 = Tensor::empty({10}, DType::f16);
  EXPECT_ERROR(GradBucketer(*comm, *backend, g16, {{0, 10}}, 64), "1-D F32");
}

TEST(DistAffinity, CpuLists) {
  EXPECT_EQ(parallel::parse_cpulist("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parallel::parse_cpulist(" 5 "), (std::vector<int>{5}));
  EXPECT_EQ(parallel::parse_cpulist(""), (std::vector<int>{}));
  EXPECT_ERROR(parallel::parse_cpulist("3-1"), "reversed");
  EXPECT_ERROR(parallel::parse_cpulist("0,a"), "malformed cpu list '0,a'");
  EXPECT_EQ(parallel::format_cpulist({7, 0, 1, 2, 3, 5, 7}), "0-3,5,7");
  EXPECT_EQ(parallel::format_cpulist({}), "");
}

/// 2 packages x 4 cores x 2 threads, numbered as Linux does: CPU c and c + 8 are siblings.
parallel::CpuPlace two_sockets(int cpu) { return {(cpu % 8) / 4, cpu % 8}; }

TEST(DistAffinity, SharesAreWholeCoresSplitEvenly) {
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  EXPECT_EQ(parallel::share_of_cores(all, 0, 2, {}, two_sockets),
            (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(parallel::share_of_cores(all, 1, 2, {}, two_sockets),
            (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
  EXPECT_EQ(parallel::share_of_cores(all, 3, 4, {}, two_sockets),
            (std::vector<int>{6, 7, 14, 15}));
  // 3 ranks: 2, 3 and 3 cores, disjoint, covering everything.
  std::multiset<int> seen;
  std::vector<size_t> sizes;
  for (int r = 0; r < 3; ++r) {
    auto s = parallel::share_of_cores(all, r, 3, {}, two_sockets);
    sizes.push_back(s.size());
    seen.insert(s.begin(), s.end());
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 6, 6}));
  EXPECT_EQ(seen, std::multiset<int>(all.begin(), all.end()));
  // More ranks than physical cores: no useful binding, the whole pool.
  EXPECT_EQ(parallel::share_of_cores(all, 9, 12, {}, two_sockets), all);
  EXPECT_ERROR(parallel::share_of_cores(all, 2, 2, {}, two_sockets), "local rank 2");
}

TEST(DistAffinity, GpuNumaNodes) {
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  const std::vector<int> node0 = {0, 1, 2, 3, 8, 9, 10, 11}, node1 = {4, 5, 6, 7, 12, 13, 14, 15};
  // GPUs 0, 1 on node 0 and 2, 3 on node 1: each pair splits its node.
  std::vector<std::vector<int>> gpus = {node0, node0, node1, node1};
  EXPECT_EQ(parallel::share_of_cores(all, 0, 4, gpus, two_sockets), (std::vector<int>{0, 1, 8, 9}));
  EXPECT_EQ(parallel::share_of_cores(all, 3, 4, gpus, two_sockets),
            (std::vector<int>{6, 7, 14, 15}));
  // Three GPUs on node 1, one on node 0: the lone one gets node 0 whole.
  gpus = {node1, node0, node1, node1};
  EXPECT_EQ(parallel::share_of_cores(all, 1, 4, gpus, two_sockets), node0);
  EXPECT_EQ(parallel::share_of_cores(all, 2, 4, gpus, two_sockets), (std::vector<int>{5, 13}));
  // The node's CPUs are not ours (a cpuset) or unknown: the plain split.
  std::vector<int> half(all.begin(), all.begin() + 4);
  EXPECT_EQ(parallel::share_of_cores(half, 1, 2, {node1, node1}, two_sockets),
            (std::vector<int>{2, 3}));
  EXPECT_EQ(parallel::share_of_cores(all, 0, 2, {{}, {}}, two_sockets),
            (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
}

cpu_set_t& process_set() {
  static cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return set;
}

TEST(DistAffinity, BindsTheCallingThread) {
  LauncherEnv env;
  EXPECT_FALSE(cores_bound_by_launcher());
  std::vector<int> mine = cores_for_local_rank(0, 1);
  ASSERT_FALSE(mine.empty());
  EXPECT_ERROR(cores_for_local_rank(1, 1), "local rank 1");
  EXPECT_EQ(bind_to_cores({}), "");
  EXPECT_ERROR(bind_to_cores({-1}), "cpu ids");
  // Bind a fresh thread (the test's own threads keep their affinity).
  std::string desc;
  std::vector<int> after;
  std::thread([&] {
    desc = bind_to_cores({mine.back()});
    after = cores_for_local_rank(0, 1);
  }).join();
  EXPECT_EQ(desc, "cores " + std::to_string(mine.back()));
  EXPECT_EQ(after, (std::vector<int>{mine.back()}));
  // A launcher that bound the process is respected: the process's cores, unsplit.
  env.set("OMPI_MCA_orte_bound_at_launch", "1");
  EXPECT_TRUE(cores_bound_by_launcher());
  EXPECT_EQ(cores_for_local_rank(1, 2), cores_for_local_rank(0, 2));
  EXPECT_EQ(cores_for_local_rank(1, 2).size(), static_cast<size_t>(CPU_COUNT(&process_set())));
  env.set("OMPI_MCA_orte_bound_at_launch", "0");
  env.set("SLURM_CPU_BIND_TYPE", "none");
  EXPECT_FALSE(cores_bound_by_launcher());
  env.set("SLURM_CPU_BIND_TYPE", "mask_cpu:");
  EXPECT_TRUE(cores_bound_by_launcher());
}

}  // namespace
}  // namespace rn50
