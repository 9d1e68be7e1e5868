// rn50: internals shared by the communicator implementations (not part of the public API).
#pragma once

#include <memory>
#include <string>

#include "rn50/parallel.h"

namespace rn50::parallel {

/// Writes "rank R: why" (one line) to stderr and flushes stdout and stderr, so that the message
/// is out before the process is torn down.
void print_abort_message(int rank, const std::string& why);
/// Throws rn50::Error naming `t` and the communicator unless `t` is a defined F32 tensor.
void check_f32(const Tensor& t, const std::string& comm);

/// "single": one process; reductions are no-ops. `backend` must outlive it.
std::unique_ptr<Communicator> make_single_communicator(const ProcessInfo& info, Backend& backend);
#ifdef RN50_HAVE_MPI
/// "mpi" (mpi_comm.cpp). `backend` (may be null) is synchronised before each allreduce.
std::unique_ptr<Communicator> make_mpi_communicator(const ProcessInfo& info, Backend* backend);
#endif
#ifdef RN50_HAVE_NCCL
/// "nccl" (nccl_comm.cpp); backend must be "cuda".
std::unique_ptr<Communicator> make_nccl_communicator(const ProcessInfo& info, Backend& backend);
#endif

}  // namespace rn50::parallel
