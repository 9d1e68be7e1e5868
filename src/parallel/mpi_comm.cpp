// rn50: the MPI communicator (see mpi_comm.h).
#ifdef RN50_HAVE_MPI
#include "parallel/mpi_comm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"
#include "parallel/comm_impl.h"

namespace rn50::parallel {
namespace {

/// Largest element count per MPI call (MPI counts are int).
constexpr int64_t kChunk = int64_t(1) << 30;

void finalize_at_exit() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Finalize();
}

/// MPI_Init_thread(MPI_THREAD_FUNNELED) once per process, MPI_Finalize at exit.
void ensure_mpi_initialised() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int finalised = 0, initialised = 0;
  MPI_Finalized(&finalised);
  RN50_CHECK(!finalised, "mpi: MPI was already finalised in this process and cannot restart");
  MPI_Initialized(&initialised);
  int provided = 0;
  if (initialised) {
    MPI_Query_thread(&provided);
  } else {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    RN50_CHECK(rc == MPI_SUCCESS, "mpi: MPI_Init_thread failed with error {}", rc);
    std::atexit(finalize_at_exit);
  }
  RN50_CHECK(provided >= MPI_THREAD_FUNNELED,
             "mpi: the MPI library provides thread level {} but rn50 needs MPI_THREAD_FUNNELED",
             provided);
}

class MpiPending final : public PendingReduce {
 public:
  explicit MpiPending(std::vector<MPI_Request> reqs) : reqs_(std::move(reqs)) {}
  ~MpiPending() override {
    // The buffer must not be released under a running reduction: finish it (errors ignored).
    if (!reqs_.empty())
      MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }
  void wait() override {
    if (reqs_.empty()) return;
    int rc = MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
    reqs_.clear();
    check_mpi(rc, "MPI_Waitall (allreduce)");
  }
  void poll() override {
    if (reqs_.empty()) return;
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE);
    if (done || rc != MPI_SUCCESS) reqs_.clear();
    check_mpi(rc, "MPI_Testall (allreduce)");
  }

 private:
  std::vector<MPI_Request> reqs_;
};

}  // namespace

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  RN50_FAIL("mpi: {} failed: {} (error {})", call, std::string(msg, len), rc);
}

MpiCommunicator::MpiCommunicator(const ProcessInfo& info, Backend* backend)
    : info_(info), backend_(backend) {
  ensure_mpi_initialised();
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm_, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
  if (info_.launcher == "single" && size > 1) {
    // Started by an MPI launcher whose variables we do not read (e.g. MPICH's hydra): trust
    // MPI, and find the ranks of this node with a shared-memory split.
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    info_.launcher = "mpi";
    info_.rank = rank;
    info_.world_size = size;
    MPI_Comm_rank(node, &info_.local_rank);
    MPI_Comm_size(node, &info_.local_size);
    MPI_Comm_free(&node);
  }
  if (rank != info_.rank || size != info_.world_size) {
    MPI_Comm_free(&comm_);
    RN50_FAIL("mpi: MPI reports rank {} of {} but the {} launcher's variables say rank {} of {}; "
              "{}",
              rank, size, info_.launcher, info_.rank, info_.world_size,
              info_.launcher == "slurm"
                  ? "srun must start an MPI with PMI support (e.g. srun --mpi=pmix), or launch "
                    "with mpirun"
                  : "launch every rank with the same mpirun");
  }
  // Every rank's host name and pid, for the message of a rank that stops the job: a rank blocked
  // in a collective cannot tell which peer is gone (the launcher names the lost process or
  // node), so the message lists where each rank runs.
  char host[kHostBytes] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<size_t>(size) * kHostBytes);
  check_mpi(MPI_Allgather(host, kHostBytes, MPI_CHAR, hosts.data(), kHostBytes, MPI_CHAR, comm_),
            "MPI_Allgather (host names)");
  for (int r = 0; r < size; ++r) {
    const char* h = hosts.data() + static_cast<size_t>(r) * kHostBytes;
    rank_hosts_ +=
        fmt::format("{}{} {}", r ? ", " : "", r, std::string(h, strnlen(h, kHostBytes)));
  }
}

MpiCommunicator::~MpiCommunicator() {
  watchdog_.stop();
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<PendingReduce> MpiCommunicator::allreduce_sum_async(Tensor& t) {
  check_f32(t, "mpi");
  RN50_CHECK(t.is_cpu(),
             "mpi allreduce: tensor {} is not in host memory (the mpi communicator reduces host "
             "tensors; tensors of the cuda backend need nccl)",
             t.str());
  if (backend_ != nullptr) backend_->synchronize();
  std::vector<MPI_Request> reqs;
  float* data = t.data_as<float>();
  const int64_t n = t.numel();
  for (int64_t off = 0; off < n; off += kChunk) {
    int count = static_cast<int>(std::min(kChunk, n - off));
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, comm_, &r);
    if (rc != MPI_SUCCESS && !reqs.empty())
      MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    check_mpi(rc, "MPI_Iallreduce");
    reqs.push_back(r);
  }
  return std::make_unique<MpiPending>(std::move(reqs));
}

void MpiCommunicator::allreduce_sum_host(std::vector<double>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  int64_t lens[2] = {n, -n};  // max and -min of the lengths in one reduction
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, lens, 2, MPI_INT64_T, MPI_MAX, comm_),
            "MPI_Allreduce (lengths)");
  RN50_CHECK(lens[0] == n && -lens[1] == n,
             "mpi allreduce_sum_host: the ranks passed vectors of different lengths (this rank "
             "{}, others between {} and {})",
             n, -lens[1], lens[0]);
  for (int64_t off = 0; off < n; off += kChunk) {
    int count = static_cast<int>(std::min(kChunk, n - off));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data() + off, count, MPI_DOUBLE, MPI_SUM, comm_),
              "MPI_Allreduce (host doubles)");
  }
}

void MpiCommunicator::broadcast_host(std::vector<uint8_t>& bytes, int root) {
  RN50_CHECK(root >= 0 && root < info_.world_size,
             "mpi broadcast: root {} is not a rank (world size {})", root, info_.world_size);
  uint64_t n = bytes.size();
  check_mpi(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast (size)");
  if (info_.rank != root) bytes.resize(n);
  for (uint64_t off = 0; off < n; off += kChunk) {
    int count = static_cast<int>(std::min<uint64_t>(kChunk, n - off));
    check_mpi(MPI_Bcast(bytes.data() + off, count, MPI_BYTE, root, comm_), "MPI_Bcast (bytes)");
  }
}

void MpiCommunicator::barrier() { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

void MpiCommunicator::start_watchdog(double timeout_s) {
  watchdog_.start(timeout_s, [this](const std::string& why) { abort(why); });
}

void MpiCommunicator::abort(const std::string& why) {
  char host[kHostBytes] = {};
  gethostname(host, sizeof host - 1);
  print_abort_message(info_.rank,
                      fmt::format("{} [rank {} on host {}, pid {}; the job's ranks: {}]", why,
                                  info_.rank, host, getpid(), rank_hosts_));
  // mpirun forwards each rank's stderr asynchronously but prints its own MPI_ABORT banner at
  // once: a short pause lets the reason reach the terminal first (seen reversed on a loaded
  // 2-core machine), so the first line a user reads says what went wrong.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; in case it does
}

std::unique_ptr<Communicator> make_mpi_communicator(const ProcessInfo& info, Backend* backend) {
  return std::make_unique<MpiCommunicator>(info, backend);
}

}  // namespace rn50::parallel

#endif  // RN50_HAVE_MPI
