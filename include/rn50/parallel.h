// rn50: data-parallel training across processes. A Communicator sums tensors across all ranks:
// "single" (one process, no-ops), "mpi" (OpenMPI; host tensors; also the bootstrap of NCCL),
// "nccl" (CUDA tensors, the unique id broadcast over MPI; without MPI, 1 process only). Rank,
// world size and local rank come from the launcher's environment (OpenMPI's mpirun or Slurm's
// srun). One GPU per local rank.
//
// Gradient averaging (DLE / torch DDP): each rank's loss gradient is scaled by 1/world_size, so a
// SUM allreduce of the gradients yields their mean over the global batch. BatchNorm statistics
// stay per rank (DLE). GradBucketer groups the gradients into buckets of --bucket-size-mb in the
// order backward produces them and starts each bucket's allreduce as soon as it is complete,
// overlapping communication with the rest of backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rn50/backend.h"
#include "rn50/tensor.h"

namespace rn50 {

/// Where this process sits, as the launcher says (defaults: a single process).
struct ProcessInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  ///< rank among the processes of this node: picks the GPU and the cores
  int local_size = 1;
  std::string launcher = "single";  ///< "single", "openmpi" or "slurm"
  /// Reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, else SLURM_{PROCID,NTASKS,LOCALID}
  /// (+ SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE), else a single process. Throws rn50::Error
  /// naming the variable when a value is malformed or inconsistent (rank >= size).
  static ProcessInfo from_environment();
};

/// An allreduce in flight; wait() completes it (see Communicator::allreduce_sum_async).
class PendingReduce {
 public:
  virtual ~PendingReduce() = default;
  /// CPU (mpi): blocks until the sum is in the tensor. NCCL: makes the backend's main stream
  /// wait for the sum (no host block); work queued afterwards sees the result.
  virtual void wait() = 0;
  /// Lets a host-driven implementation (MPI) make progress; never blocks.
  virtual void poll() {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  ///< "single", "mpi" or "nccl"
  virtual const ProcessInfo& process() const = 0;
  int rank() const { return process().rank; }
  int world_size() const { return process().world_size; }

  /// Starts an in-place SUM allreduce of `t` (f32, contiguous; host memory for "mpi", memory on
  /// the backend's GPU for "nccl") ordered after the work queued so far on the backend.
  /// `t` must not be touched until wait() returns. Throws rn50::Error naming the tensor when it
  /// is on the wrong device or not f32.
  virtual std::unique_ptr<PendingReduce> allreduce_sum_async(Tensor& t) = 0;
  /// allreduce_sum_async(t)->wait().
  void allreduce_sum(Tensor& t) { allreduce_sum_async(t)->wait(); }
  /// Blocking SUM allreduce of host doubles (metrics: exact eval counts, loss sums). All ranks
  /// must pass vectors of the same length.
  virtual void allreduce_sum_host(std::vector<double>& v) = 0;
  /// Blocking broadcast of host bytes from `root` (resizes `bytes` on the receivers).
  virtual void broadcast_host(std::vector<uint8_t>& bytes, int root) = 0;
  virtual void barrier() = 0;
  /// Starts a watchdog thread: when heartbeat() has not been called for `timeout_s` seconds
  /// (a rank stuck in a collective because another rank died or hangs), it calls abort() with a
  /// message naming the timeout. timeout_s <= 0: no watchdog.
  virtual void start_watchdog(double timeout_s) = 0;
  /// Proof of progress for the watchdog (the trainer calls it every step and around eval).
  virtual void heartbeat() = 0;
  /// Stops every rank: prints "rank R: <why>" to stderr first, then tears the job down with a
  /// non-zero exit code (MPI_Abort on MPI). Never returns.
  [[noreturn]] virtual void abort(const std::string& why) = 0;
};

/// kind: "auto" (nccl when world_size > 1 and the backend is cuda, mpi when world_size > 1,
/// else single), "single", "mpi" or "nccl". `backend` is the compute backend (nccl uses its
/// stream). Throws rn50::Error naming the kind when it is not built (MPI/NCCL missing) or the
/// launch is inconsistent (MPI's rank/size disagree with the launcher's variables, e.g. srun
/// without PMI support; "single" in a multi-process job). "mpi"/"nccl" without any launcher is
/// a valid 1-process job (MPI singleton).
std::unique_ptr<Communicator> make_communicator(const std::string& kind, Backend& backend);
/// For a process about to exit with an error: when it is one rank of an MPI job of several
/// processes (MPI initialised, not finalised, world size > 1), MPI_Abort(MPI_COMM_WORLD,
/// exit_code), which makes the launcher stop every rank (the others may be blocked in a
/// collective this rank will never join, and exiting normally would wait for them in
/// MPI_Finalize). Returns (doing nothing) otherwise: a single process, or a build without MPI.
void abort_job_if_distributed(int exit_code);
/// Communicator kinds compiled into this build: {"single"}, plus "mpi" when built with MPI and
/// "nccl" when built with CUDA and NCCL (jobs of several processes also need MPI).
std::vector<std::string> compiled_communicators();
/// Versions of the communication libraries linked, for benchmark records: {"nccl", "2.28.3"} when
/// built with NCCL (ncclGetVersion), {"mpi", the first line of MPI_Get_library_version} when
/// built with MPI. Never throws; MPI's needs no MPI_Init.
std::vector<std::pair<std::string, std::string>> communicator_libraries();

/// Buckets of gradients for overlapped allreduce (DDP-style). Parameters are given in the order
/// backward finishes their gradients; consecutive ones fill buckets of at most `bucket_bytes`
/// (a parameter larger than that gets its own bucket). Each bucket owns a contiguous f32 buffer
/// on the backend; when the last parameter of a bucket is ready, its gradients are copied into
/// the buffer and the allreduce starts. finish() waits for every bucket and copies the sums
/// back into the gradient slab. A bucket whose ranges tile one contiguous region of the slab
/// skips the buffer and is reduced in place on that slab slice. With the "single"
/// communicator nothing is allocated, copied or reduced.
class GradBucketer {
 public:
  /// grads: the f32 gradient slab (1-D) on the backend; ranges: (offset, count) in elements of
  /// each parameter's gradient in the slab, in ready order. Throws rn50::Error on an empty or
  /// out-of-range range or bucket_bytes == 0.
  GradBucketer(Communicator& comm, Backend& backend, Tensor grads,
               std::vector<std::pair<int64_t, int64_t>> ranges, size_t bucket_bytes);
  ~GradBucketer();
  /// Marks parameter i (index into `ranges`) ready; may start a bucket's allreduce. Parameters
  /// must become ready in order (throws otherwise: the schedule and the buckets disagree).
  void ready(int i);
  /// Waits for all buckets (starting any not started yet) and writes the sums into the slab.
  /// Resets for the next step.
  void finish();
  int num_buckets() const;
  /// Seconds the last finish() spent blocked on the host waiting for communication (MPI; 0 for
  /// NCCL, whose waits are on the device).
  double last_wait_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Binds the calling thread (and threads it creates afterwards) to `cores` (sched_setaffinity);
/// returns a description such as "cores 0-7" for the log. Empty `cores`: no change, returns "".
std::string bind_to_cores(const std::vector<int>& cores);
/// The cores local rank `local_rank` of `local_size` should use: an equal contiguous share of
/// the cores this process may run on (on GPU nodes, the GPU's NUMA node when it is known).
/// Shares are whole physical cores (SMT siblings together, sysfs topology) ordered by package;
/// GPU r % device_count is assumed to be local rank r's. Returns the process's cores unchanged
/// when the launcher bound the process (cores_bound_by_launcher()) or when there are fewer
/// physical cores than ranks. Throws rn50::Error when local_rank is not in [0, local_size).
std::vector<int> cores_for_local_rank(int local_rank, int local_size);
/// Whether the launcher already bound this process to cores (OpenMPI's --bind-to, its default
/// for -np <= 2 being one core per rank; Slurm's --cpu-bind). cores_for_local_rank then returns
/// the process's cores unchanged (the launcher's choice is respected).
bool cores_bound_by_launcher();

}  // namespace rn50
