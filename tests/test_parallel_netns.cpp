// Many hosts on one machine: `rn50 train` under mpirun across two hosts of a network-namespace
// cluster (scripts/netns-cluster.sh: each host a network and UTS namespace, 198.18.0.1 and
// 198.18.0.2 on a bridge, OpenMPI's daemons started through the cluster's rsh agent, ranks
// talking over TCP as on a cluster without InfiniBand):
//  * 2 hosts x 1 rank train to the same bits as 2 local ranks (weights and momentum after an
//    epoch), under mpirun and under Slurm's srun (scripts/netns-slurm.sh: slurmctld and one
//    slurmd per host, PMIx; skipped where Slurm is not installed, a failure where RN50_REQUIRE
//    names slurm). Each rank gets OMP_NUM_THREADS=1 in both runs: rn50 gives a rank its node's
//    cores divided by the node's ranks, and another thread count changes oneDNN's reduction
//    order; the allreduce of 2 ranks is one addition either way.
//  * a rank SIGKILLed on host 2, and host 2's link cut (no RST: only a timeout sees it), while
//    training with --timeout 20: the job stops within the timeout plus a margin, non-zero, and
//    the output names the lost rank's host (198.18.0.2, the launcher's name for it) and, for
//    the killed rank, its rank; the same command line (--last-epoch-of-checkpoint auto)
//    then resumes from the newest complete epoch and finishes.
// mpirun gets the OOB keepalive settings docs/scaling.md recommends, so that it notices a
// silent node in about 8 s instead of OpenMPI's default of about 8 minutes.
// Needs root, ip netns, mpirun and the MPI communicator: skipped otherwise (a failure where
// RN50_REQUIRE names netns, as .ci/run sets it). Each test makes its own cluster, tagged by
// pid, and removes it; the test process runs in a private mount namespace, so the namespaces'
// mounts end with it.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel_test_util.h"
#include "require.h"

namespace {

namespace fs = std::filesystem;
using rn50::test::run;
using rn50::test::RunResult;

/// Puts this test process (and so every command it runs) in a mount namespace of its own, with
/// private propagation, once: `ip netns add` bind-mounts /run/netns and each namespace under
/// it, and those mounts must go when the test ends, whatever happens (they would otherwise
/// outlive a crash, and pin the directories of a chroot the tests run in). The namespaces
/// die with the mounts. Returns "" or why it failed.
std::string enter_private_mounts() {
  static const std::string why = [] {
    if (unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS) failed");
    if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return std::string("making / private in the new mount namespace failed");
    return std::string();
  }();
  return why;
}

/// Why the namespace cluster cannot run here ("" when it can).
std::string netns_skip_reason() {
  if (geteuid() != 0) return "not root (ip netns needs it)";
  if (const std::string m = enter_private_mounts(); !m.empty()) return m;
  const std::string mpi = rn50::test::mpi_skip_reason();
  if (!mpi.empty()) return mpi;
  // Make, enter (with a UTS namespace, as the cluster's hosts) and remove a probe namespace:
  // listing alone succeeds where making one fails (a chroot without /run/netns, no CAP_SYS_ADMIN).
  const std::string ns = "rn50-probe" + std::to_string(getpid() % 100000);
  const RunResult r = run("ip netns add " + ns + " && ip netns exec " + ns +
                          " unshare --uts true; rc=$?; ip netns del " + ns +
                          " 2>/dev/null; exit $rc");
  if (r.exit_code != 0) return "network namespaces do not work here: " + r.output;
  return "";
}

class NetnsCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = netns_skip_reason();
    RN50_REQUIRE_OR_SKIP("netns", why.empty(), why);
    tag_ = "t" + std::to_string(getpid() % 1000);
    dir_ = fs::path(RN50_BINARY_DIR) / "netns_tmp" / tag_;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    RunResult r = run(cluster() + " up 2 " + (dir_ / "cluster").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    up_ = true;
  }
  void TearDown() override {
    if (up_) run(cluster() + " down");
    if (!HasFailure()) fs::remove_all(dir_);  // the checkpoints (kept for a failure's post-mortem)
  }
  std::string cluster() const {
    return "RN50_NETNS_TAG=" + tag_ + " " + std::string(RN50_SOURCE_DIR) +
           "/scripts/netns-cluster.sh";
  }
  /// mpirun on host 1 across both hosts, one rank each, over TCP.
  std::string mpirun_hosts() const {
    const std::string c = (dir_ / "cluster").string();
    return c + "/on 1 " + RN50_MPIEXEC + " --allow-run-as-root --hostfile " + c +
           "/hostfile --mca plm_rsh_agent " + c +
           "/rsh --mca btl tcp,self --mca btl_tcp_if_include 198.18.0.0/15"
           " --mca oob_tcp_if_include 198.18.0.0/15 --mca oob_tcp_keepalive_time 5"
           " --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3"
           " -x OMP_NUM_THREADS=1 -np 2 --bind-to none ";
  }
  /// The pid of the rn50 process on host `h` (0 when none).
  pid_t rn50_pid_on(int h) const {
    RunResult r = run("for p in $(ip netns pids rn50-" + tag_ + "h" + std::to_string(h) +
                      "); do [ \"$(cat /proc/$p/comm 2>/dev/null)\" = rn50 ] && echo $p; done");
    return static_cast<pid_t>(std::atol(r.output.c_str()));
  }

  std::string tag_;
  fs::path dir_;
  bool up_ = false;
};

/// Training flags of the tests: synthetic data (the same batches on both layouts of the job),
/// a small net and images, no evaluation.
std::string train_flags(int samples, int epochs, const fs::path& ckpt) {
  return std::string(RN50_CLI) +
         " train --device cpu --data synthetic --synthetic-samples " + std::to_string(samples) +
         " --arch resnet18 --num-of-class 10 --batch-size 4 --crop-size 64 --epochs " +
         std::to_string(epochs) +
         " --warmup-epochs 0 --run-scope train_only --dist-backend mpi --workers 1"
         " --timeout 20 --print-interval 1 --checkpoint-dir " + ckpt.string();
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Trains the same job as 2 local ranks into `local` (one thread each) and expects its epoch-0
/// checkpoint (weights and momentum) byte for byte equal to the one in `ckpt`, made by `what`.
RunResult expect_same_checkpoint_as_local_ranks(const fs::path& ckpt, const fs::path& local,
                                                const std::string& what) {
  RunResult l =
      run(rn50::test::mpirun_prefix(2) + "-x OMP_NUM_THREADS=1 " + train_flags(32, 1, local));
  EXPECT_EQ(l.exit_code, 0) << l.output;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string x = file_bytes(ckpt / "resnet18" / "0" / f);
    const std::string y = file_bytes(local / "resnet18" / "0" / f);
    EXPECT_GT(x.size(), 1000u) << f;
    EXPECT_TRUE(x == y) << f << " differs between " << what << " and 2 local ranks";
  }
  return l;
}

TEST_F(NetnsCluster, TwoHostsTrainLikeTwoLocalRanks) {
  const fs::path a = dir_ / "hosts", b = dir_ / "local";
  RunResult h = run(mpirun_hosts() + train_flags(32, 1, a));
  ASSERT_EQ(h.exit_code, 0) << h.output;
  const RunResult l = expect_same_checkpoint_as_local_ranks(a, b, "2 hosts");
  std::printf("2 hosts: %.1f s, 2 local ranks: %.1f s, checkpoints identical\n", h.seconds,
              l.seconds);
}

TEST_F(NetnsCluster, SlurmSrunTrainsLikeTwoLocalRanks) {
  const bool have = run("command -v slurmctld && command -v slurmd && command -v munged")
                        .exit_code == 0;
  RN50_REQUIRE_OR_SKIP("slurm", have,
                       "Slurm is not installed (apt-get install slurm-wlm munge; "
                       "scripts/setup.sh does)");
  const fs::path c = dir_ / "cluster";
  const std::string slurm = std::string(RN50_SOURCE_DIR) + "/scripts/netns-slurm.sh";
  RunResult up = run("RN50_NETNS_TAG=" + tag_ + " " + slurm + " up 2 " + c.string());
  ASSERT_EQ(up.exit_code, 0) << up.output;
  const fs::path a = dir_ / "srun", b = dir_ / "local";
  RunResult h = run(c.string() + "/on 1 env SLURM_CONF=" + (c / "slurm" / "slurm.conf").string() +
                    " OMP_NUM_THREADS=1 OMPI_MCA_btl=tcp,self"
                    " OMPI_MCA_btl_tcp_if_include=198.18.0.0/15 timeout 120 srun -N 2"
                    " --ntasks-per-node 1 --mpi=pmix " + train_flags(32, 1, a));
  run("RN50_NETNS_TAG=" + tag_ + " " + slurm + " down " + c.string());
  ASSERT_EQ(h.exit_code, 0) << h.output;
  expect_same_checkpoint_as_local_ranks(a, b, "srun on 2 nodes");
  std::printf("srun on 2 nodes: %.1f s, checkpoints identical to 2 local ranks\n", h.seconds);
}

/// The fault tests' job: kEpochs epochs of kSamples / 2 ranks / batch 4 steps each.
constexpr int kSamples = 96, kEpochs = 8;

/// Runs a training of many short epochs across the hosts, applies `fault` once the checkpoint
/// of epoch 0 is complete, and checks that the job stops in time, non-zero, naming what
/// `names` lists; then undoes the fault and reruns the same command line, which must resume
/// from the newest complete epoch and finish.
void fault_then_resume(const std::string& mpirun, const fs::path& ckpt,
                       const std::function<void()>& fault, const std::function<void()>& heal,
                       const std::vector<std::string>& names) {
  // One command line for every requeue (DLE's): resume from the run's own checkpoints.
  const std::string cmd = mpirun + train_flags(kSamples, kEpochs, ckpt) + " --from-checkpoint " +
                          ckpt.string() + " --last-epoch-of-checkpoint auto";
  RunResult r;
  std::thread job([&] { r = run("timeout 120 " + cmd); });
  const fs::path done0 = ckpt / "resnet18" / "0" / "state.json";
  for (int i = 0; i < 600 && !fs::exists(done0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool started = fs::exists(done0);
  const auto t0 = std::chrono::steady_clock::now();
  if (started) fault();
  job.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  heal();
  ASSERT_TRUE(started) << "no checkpoint of epoch 0 within 60 s\n" << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job had to be killed by timeout 120\n" << r.output;
  EXPECT_LT(s, 20.0 + 15.0) << "the job must stop within --timeout 20 plus a margin";
  for (const std::string& n : names)
    EXPECT_NE(r.output.find(n), std::string::npos) << n << "\n" << r.output;
  std::printf("stopped %.1f s after the fault, exit code %d\n", s, r.exit_code);

  // The same command line: resumes from the newest complete epoch (not 0) and finishes.
  RunResult again = run("timeout 300 " + cmd);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("epoch 0 (1/" + std::to_string(kEpochs) + ")"), std::string::npos)
      << "restarted from epoch 0 instead of the checkpoint\n" << again.output;
  EXPECT_TRUE(fs::exists(ckpt / "resnet18" / std::to_string(kEpochs - 1) / "state.json"))
      << again.output;
}

TEST_F(NetnsCluster, KilledRankStopsTheJobAndAutoResumeContinues) {
  fault_then_resume(
      mpirun_hosts(), dir_ / "kill",
      [&] {
        const pid_t p = rn50_pid_on(2);
        ASSERT_GT(p, 0) << "no rn50 process on host 2";
        kill(p, SIGKILL);
      },
      [] {}, {"rank 1", "198.18.0.2"});
}

TEST_F(NetnsCluster, LostLinkStopsTheJobAndAutoResumeContinues) {
  fault_then_resume(
      mpirun_hosts(), dir_ / "link", [&] { run(cluster() + " link 2 down"); },
      [&] {
        // What the lost host kept running (its daemon, a rank) dies with it on a real cluster;
        // then the link comes back (netns-cluster.sh returns once the hosts reach each other).
        run("for i in 1 2; do ip netns pids rn50-" + tag_ +
            "h$i | xargs -r kill -9; done; sleep 0.5");
        run(cluster() + " link 2 up");
      },
      {"198.18.0.2"});
}

}  // namespace
