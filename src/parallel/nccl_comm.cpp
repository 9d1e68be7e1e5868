// rn50: the NCCL communicator: in-place SUM allreduce of F32 tensors on the backend's GPU.
// Compiled with the CUDA backend and NCCL (RN50_HAVE_NCCL); with MPI (RN50_HAVE_MPI) for jobs of
// several processes.
//
// NEVER RUN YET: written against nccl.h (NCCL 2.28) and the CUDA runtime API on a machine
// without a GPU; it compiles here. The first GPU run must check the world-size-1 path (the
// trainer's numbers with and without it) and a multi-GPU allreduce.
//
// Bootstrap (NCCL docs, "Creating a communicator"): an internal MPI communicator broadcasts the
// ncclUniqueId that rank 0 made; every rank then calls ncclCommInitRank on the backend's GPU.
// Built without MPI, only a 1-process job is possible: the id stays in the process, host-side
// collectives are identities and the watchdog is local (as in "single"), while device
// allreduces still go through NCCL (the world-size-1 overhead check on a GPU image without MPI).
// Ordering (NCCL docs, "CUDA stream semantics"): allreduce_sum_async records an event on the
// backend's stream, makes a dedicated high-priority comm stream wait for it, queues
// ncclAllReduce there and records a done event; PendingReduce::wait() makes the backend's stream
// wait for that event. The host never blocks, the backend's stream keeps computing while the
// reduction runs, and the pattern (fork/join through events) is legal inside CUDA graph capture.
// Host-side collectives, barrier, watchdog and abort go through the MPI communicator.
#ifdef RN50_HAVE_NCCL
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "core/check.h"
#include "parallel/comm_impl.h"
#include "parallel/watchdog.h"
#ifdef RN50_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

#define RN50_NCCL_CHECK(expr)                                                              \
  do {                                                                                     \
    ncclResult_t rn50_nr_ = (expr);                                                        \
    RN50_CHECK(rn50_nr_ == ncclSuccess, "NCCL error {} in {} at {}:{}",                    \
               ncclGetErrorString(rn50_nr_), #expr, __FILE__, __LINE__);                   \
  } while (0)

namespace rn50::parallel {
namespace {

/// Pairs of (ready, done) events, reused across steps so that a step allocates nothing (CUDA
/// graphs). Shared with the pending reductions so that they may outlive nothing they use.
struct EventPool {
  std::mutex mutex;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> free;
  ~EventPool() {
    for (auto& [a, b] : free) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
  std::pair<cudaEvent_t, cudaEvent_t> get() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!free.empty()) {
        auto e = free.back();
        free.pop_back();
        return e;
      }
    }
    cudaEvent_t a = nullptr, b = nullptr;
    RN50_CUDA_CHECK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
    RN50_CUDA_CHECK(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
    return {a, b};
  }
  void put(std::pair<cudaEvent_t, cudaEvent_t> e) {
    std::lock_guard<std::mutex> lock(mutex);
    free.push_back(e);
  }
};

class NcclPending final : public PendingReduce {
 public:
  NcclPending(std::shared_ptr<EventPool> pool, std::pair<cudaEvent_t, cudaEvent_t> events,
              cudaStream_t main)
      : pool_(std::move(pool)), events_(events), main_(main) {}
  ~NcclPending() override {
    if (!waited_) cudaStreamWaitEvent(main_, events_.second, 0);
    // cudaStreamWaitEvent uses the event's state at call time: reusing it later is safe.
    pool_->put(events_);
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    RN50_CUDA_CHECK(cudaStreamWaitEvent(main_, events_.second, 0));
  }

 private:
  std::shared_ptr<EventPool> pool_;
  std::pair<cudaEvent_t, cudaEvent_t> events_;
  cudaStream_t main_;
  bool waited_ = false;
};

class NoopPending final : public PendingReduce {
 public:
  void wait() override {}
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const ProcessInfo& info, Backend& backend) : info_(info), backend_(backend) {
#ifdef RN50_HAVE_MPI
    mpi_ = std::make_unique<MpiCommunicator>(info, nullptr);
#else
    RN50_CHECK(info.world_size == 1,
               "nccl: this {}-process job ({} launch) needs MPI to share NCCL's unique id, and "
               "this rn50 was built without MPI (install libopenmpi-dev and re-run cmake)",
               info.world_size, info.launcher);
#endif
    Device dev = backend.device();
    RN50_CHECK(dev.type == DeviceType::CUDA && backend.native_stream() != nullptr,
               "nccl: backend '{}' on {} has no CUDA stream (nccl needs the cuda backend)",
               backend.name(), dev.str());
    device_ = dev.index;
    main_ = static_cast<cudaStream_t>(backend.native_stream());
    RN50_CUDA_CHECK(cudaSetDevice(device_));
    int least = 0, greatest = 0;
    RN50_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    RN50_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));

    ncclUniqueId id{};
    std::vector<uint8_t> bytes(sizeof(id));
    if (process().rank == 0) {
      RN50_NCCL_CHECK(ncclGetUniqueId(&id));
      std::memcpy(bytes.data(), &id, sizeof(id));
    }
    broadcast_host(bytes, 0);
    RN50_CHECK(bytes.size() == sizeof(id), "nccl: the unique id broadcast has {} bytes, not {}",
               bytes.size(), sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
    RN50_NCCL_CHECK(ncclCommInitRank(&comm_, process().world_size, id, process().rank));
  }

  ~NcclCommunicator() override {
    // Errors are ignored: a destructor cannot report them, and the process is ending.
    watchdog_.stop();
    cudaSetDevice(device_);
    // Replays of a recorded step run their NCCL kernels on the backend's stream (the graph is
    // launched there), not on comm_stream_: drain both before the communicator goes away. The
    // backend outlives the communicator (make_communicator's contract), so main_ is valid.
    if (main_ != nullptr) cudaStreamSynchronize(main_);
    if (comm_stream_ != nullptr) cudaStreamSynchronize(comm_stream_);
    // A collective recorded into a CUDA graph holds a reference on the communicator until that
    // graph is destroyed, and ncclCommDestroy (NCCL >= 2.26, commDestroySync) polls until every
    // such graph is gone: destroying the communicator while a recorded step still exists would
    // hang forever. When collectives were captured the communicator is therefore left to the
    // process exit (owners should destroy their graphs first; then nothing is lost).
    if (comm_ != nullptr && !captured_) ncclCommDestroy(comm_);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  }

  std::string name() const override { return "nccl"; }
  const ProcessInfo& process() const override { return mpi_ ? mpi_->process() : info_; }

  std::unique_ptr<PendingReduce> allreduce_sum_async(Tensor& t) override {
    check_f32(t, "nccl");
    RN50_CHECK(t.device() == backend_.device(),
               "nccl allreduce: tensor {} is not on the backend's GPU {}", t.str(),
               backend_.device().str());
    if (t.numel() == 0) return std::make_unique<NoopPending>();
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    RN50_CUDA_CHECK(cudaStreamIsCapturing(main_, &cap));
    if (cap != cudaStreamCaptureStatusNone) captured_ = true;  // see the destructor
    auto events = pool_->get();
    auto pending = std::make_unique<NcclPending>(pool_, events, main_);
    RN50_CUDA_CHECK(cudaEventRecord(events.first, main_));
    RN50_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, events.first, 0));
    RN50_NCCL_CHECK(ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), ncclFloat,
                                  ncclSum, comm_, comm_stream_));
    RN50_CUDA_CHECK(cudaEventRecord(events.second, comm_stream_));
    return pending;
  }

  // Host-side collectives go through MPI; without it (1 process) they are identities.
  void allreduce_sum_host(std::vector<double>& v) override {
    if (mpi_) mpi_->allreduce_sum_host(v);
  }
  void broadcast_host(std::vector<uint8_t>& bytes, int root) override {
    if (mpi_) return mpi_->broadcast_host(bytes, root);
    RN50_CHECK(root == 0, "nccl broadcast: root {} is not a rank of a 1-process job", root);
  }
  void barrier() override {
    if (mpi_) mpi_->barrier();
  }
  void start_watchdog(double timeout_s) override {
    if (mpi_) return mpi_->start_watchdog(timeout_s);
    watchdog_.start(timeout_s, [this](const std::string& why) { abort(why); });
  }
  /// Also surfaces NCCL's asynchronous errors (a failed peer or network), as rn50::Error.
  void heartbeat() override {
    if (mpi_)
      mpi_->heartbeat();
    else
      watchdog_.heartbeat();
    ncclResult_t async = ncclSuccess;
    RN50_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    RN50_CHECK(async == ncclSuccess || async == ncclInProgress,
               "nccl: asynchronous communicator error {} ({})", ncclGetErrorString(async),
               ncclGetLastError(comm_));
  }
  [[noreturn]] void abort(const std::string& why) override {
    if (mpi_) mpi_->abort(why);
    print_abort_message(info_.rank, why);
    std::_Exit(1);
  }

 private:
  ProcessInfo info_;
#ifdef RN50_HAVE_MPI
  std::unique_ptr<MpiCommunicator> mpi_;
#else
  std::unique_ptr<Communicator> mpi_;  ///< always null: no MPI in this build
#endif
  Watchdog watchdog_;  ///< used only without MPI
  Backend& backend_;
  int device_ = 0;
  cudaStream_t main_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool captured_ = false;  ///< an allreduce was recorded into a CUDA graph
  std::shared_ptr<EventPool> pool_ = std::make_shared<EventPool>();
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const ProcessInfo& info, Backend& backend) {
  return std::make_unique<NcclCommunicator>(info, backend);
}

}  // namespace rn50::parallel

#endif  // RN50_HAVE_NCCL
