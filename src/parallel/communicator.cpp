// rn50: the communicator factory, the "single" communicator and shared helpers.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#ifdef RN50_HAVE_MPI
#include <mpi.h>
#endif
#ifdef RN50_HAVE_NCCL
#include <nccl.h>
#endif

#include "core/check.h"
#include "parallel/comm_impl.h"
#include "parallel/watchdog.h"

namespace rn50 {
namespace parallel {

void print_abort_message(int rank, const std::string& why) {
  std::fflush(stdout);
  std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
  std::fflush(stderr);
}

void check_f32(const Tensor& t, const std::string& comm) {
  RN50_CHECK(t.defined(), "{} allreduce: the tensor is undefined", comm);
  RN50_CHECK(t.dtype() == DType::f32, "{} allreduce: tensor {} is not F32", comm, t.str());
}

namespace {

#ifdef RN50_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

class DonePending final : public PendingReduce {
 public:
  void wait() override {}
};

/// One process: every collective is the identity.
class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator(const ProcessInfo& info, Backend& backend)
      : info_(info), device_(backend.device()) {}
  ~SingleCommunicator() override { watchdog_.stop(); }
  std::string name() const override { return "single"; }
  const ProcessInfo& process() const override { return info_; }
  std::unique_ptr<PendingReduce> allreduce_sum_async(Tensor& t) override {
    check_f32(t, "single");
    RN50_CHECK(t.device() == device_ || t.is_cpu(),
               "single allreduce: tensor {} is neither on the backend device {} nor the host",
               t.str(), device_.str());
    return std::make_unique<DonePending>();
  }
  void allreduce_sum_host(std::vector<double>&) override {}
  void broadcast_host(std::vector<uint8_t>&, int root) override {
    RN50_CHECK(root == 0, "single broadcast: root {} is not a rank of a 1-process job", root);
  }
  void barrier() override {}
  void start_watchdog(double timeout_s) override {
    watchdog_.start(timeout_s, [this](const std::string& why) { abort(why); });
  }
  void heartbeat() override { watchdog_.heartbeat(); }
  [[noreturn]] void abort(const std::string& why) override {
    print_abort_message(info_.rank, why);
    std::_Exit(1);
  }

 private:
  ProcessInfo info_;
  Device device_;
  Watchdog watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator(const ProcessInfo& info,
                                                       Backend& backend) {
  return std::make_unique<SingleCommunicator>(info, backend);
}

}  // namespace parallel

void abort_job_if_distributed(int exit_code) {
#ifdef RN50_HAVE_MPI
  int initialised = 0, finalised = 0, size = 1;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (!initialised || finalised) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size <= 1) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
#else
  (void)exit_code;
#endif
}

std::vector<std::string> compiled_communicators() {
  std::vector<std::string> v{"single"};
#ifdef RN50_HAVE_MPI
  v.push_back("mpi");
#endif
#ifdef RN50_HAVE_NCCL
  v.push_back("nccl");
#endif
  return v;
}

std::vector<std::pair<std::string, std::string>> communicator_libraries() {
  std::vector<std::pair<std::string, std::string>> v;
#ifdef RN50_HAVE_NCCL
  int n = 0;
  if (ncclGetVersion(&n) == ncclSuccess)  // 10000 * major + 100 * minor + patch (NCCL >= 2.9)
    v.emplace_back("nccl", fmt::format("{}.{}.{}", n / 10000, (n % 10000) / 100, n % 100));
#endif
#ifdef RN50_HAVE_MPI
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    std::string s(lib, static_cast<size_t>(len));
    s = s.substr(0, s.find_first_of("\n,"));
    v.emplace_back("mpi", s);
  }
#endif
  return v;
}

std::unique_ptr<Communicator> make_communicator(const std::string& kind, Backend& backend) {
  ProcessInfo info = ProcessInfo::from_environment();
  std::string k = kind;
  if (k == "auto") {
    if (info.world_size == 1) {
      k = "single";
    } else if (backend.name() == "cuda") {
      k = "nccl";
      RN50_CHECK(
          parallel::kHaveNccl,
          "communicator 'auto': {} processes ({}) on the cuda backend need NCCL, but this rn50 "
          "was built without it (needs MPI and NCCL at configure time)",
          info.world_size, info.launcher);
    } else {
      k = "mpi";
    }
  }
  if (k == "single") {
    RN50_CHECK(info.world_size == 1,
               "communicator 'single' in a {}-process job ({} launch): use --dist auto, mpi or "
               "nccl, or launch one process",
               info.world_size, info.launcher);
    return parallel::make_single_communicator(info, backend);
  }
  if (k == "mpi") {
#ifdef RN50_HAVE_MPI
    return parallel::make_mpi_communicator(info, &backend);
#else
    RN50_FAIL("communicator 'mpi': this rn50 was built without MPI (install libopenmpi-dev and "
              "re-run cmake)");
#endif
  }
  if (k == "nccl") {
#ifdef RN50_HAVE_NCCL
    RN50_CHECK(backend.name() == "cuda",
               "communicator 'nccl' needs the cuda backend (this run uses '{}'; use mpi)",
               backend.name());
    return parallel::make_nccl_communicator(info, backend);
#else
    RN50_FAIL("communicator 'nccl': this rn50 was built without NCCL (needs the CUDA backend "
              "and NCCL at configure time, and MPI for jobs of several processes)");
#endif
  }
  std::string known;
  for (const std::string& n : compiled_communicators()) known += ", " + n;
  RN50_FAIL("unknown communicator '{}' (known: auto{})", kind, known);
}

}  // namespace rn50
