// rn50: the MPI communicator (OpenMPI): host f32 allreduce with MPI_Iallreduce, host metrics,
// broadcast, barrier, watchdog and MPI_Abort. The NCCL communicator owns one for its bootstrap
// and its host-side collectives. Compiled only with RN50_HAVE_MPI.
#pragma once

#ifdef RN50_HAVE_MPI
#include <mpi.h>

#include <string>
#include <vector>

#include "parallel/watchdog.h"
#include "rn50/parallel.h"

namespace rn50::parallel {

/// MPI is initialised (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread that created the
/// communicator calls MPI; the watchdog thread only calls MPI_Abort) by the first communicator of
/// the process and finalised at process exit (std::atexit), so communicators may be created and
/// destroyed several times in one process. Each communicator works on its own duplicate of
/// MPI_COMM_WORLD with MPI_ERRORS_RETURN: MPI errors become rn50::Error.
class MpiCommunicator final : public Communicator {
 public:
  /// Throws rn50::Error when MPI fails to start, was already finalised, or disagrees with the
  /// launcher's variables (e.g. srun without PMI support: every process is a 1-rank singleton).
  /// `backend` (may be null) is synchronised before each allreduce starts.
  MpiCommunicator(const ProcessInfo& info, Backend* backend);
  ~MpiCommunicator() override;

  std::string name() const override { return "mpi"; }
  const ProcessInfo& process() const override { return info_; }
  /// MPI_Iallreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) on a host F32 tensor (split in chunks of
  /// at most 2^30 elements); wait() = MPI_Waitall, poll() = MPI_Testall.
  std::unique_ptr<PendingReduce> allreduce_sum_async(Tensor& t) override;
  /// MPI_Allreduce of MPI_DOUBLE; first checks (one small allreduce) that every rank passed the
  /// same length.
  void allreduce_sum_host(std::vector<double>& v) override;
  /// The size (MPI_UINT64_T) then the bytes, both MPI_Bcast.
  void broadcast_host(std::vector<uint8_t>& bytes, int root) override;
  void barrier() override;
  void start_watchdog(double timeout_s) override;
  void heartbeat() override { watchdog_.heartbeat(); }
  /// "rank R: why" on stderr, then MPI_Abort(MPI_COMM_WORLD, 1) (mpirun kills every rank and
  /// exits non-zero).
  [[noreturn]] void abort(const std::string& why) override;

  /// This communicator's MPI communicator (a duplicate of MPI_COMM_WORLD).
  MPI_Comm comm() const { return comm_; }

 private:
  ProcessInfo info_;
  Backend* backend_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Watchdog watchdog_;
  static constexpr int kHostBytes = 64;  ///< a host name's bytes in the gather
  /// "0 host-a, 1 host-b, ..." (gathered at construction; abort()'s message names them).
  std::string rank_hosts_;
};

/// Throws rn50::Error with MPI's error string when rc != MPI_SUCCESS.
void check_mpi(int rc, const char* call);

}  // namespace rn50::parallel

#endif  // RN50_HAVE_MPI
