// Link-seam stubs of the CUDA runtime, cuDNN and cuBLASLt (cuda_stubs.cpp): what the tests of
// test_cuda_host_calls.cpp read back. The stubs replace the real libraries at link time, so
// that the CUDA backend's own compiled code (librn50_cuda.a) runs its host logic on the CPU:
//  * device memory is host memory (cudaMalloc: 256-byte aligned malloc; cudaMemcpyAsync and
//    cudaMemsetAsync run at once with memcpy / memset, outside a capture);
//  * kernels are registered and their launches recorded by name, never run; cuDNN and cuBLASLt
//    compute calls are recorded (algorithm, workspace), never run;
//  * streams, events, graphs and library handles are small host objects; stream capture is
//    emulated: calls on a capturing stream are recorded as "in capture" (and not run), and the
//    calls a CUDA graph cannot record (cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc,
//    cudaFreeHost, cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a copy
//    from or to pageable host memory) fail with cudaErrorStreamCaptureUnsupported while a
//    capture is active, and invalidate it (cudaStreamEndCapture then fails), as CUDA's
//    cudaStreamCaptureModeThreadLocal does for the capturing thread; so does a
//    cudnnFind*AlgorithmEx (it times kernels and synchronises: CUDNN_STATUS_EXECUTION_FAILED);
//  * cudnnGet*WorkspaceSize report a made-up size per algorithm (one algorithm unsupported, one
//    over the backend's 1 GiB cap), recorded; cudnnFind*AlgorithmEx records the workspace it
//    was given and returns every algorithm, those needing more workspace than given as failed,
//    the fastest one non-deterministic, the fastest deterministic one the one with the largest
//    workspace under the cap.
// Single process, any thread; every function here is thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rn50::cuda_stub {

/// One call of a stubbed function.
struct StubCall {
  std::string fn;           ///< "cudaMalloc", "cudnnFindConvolutionForwardAlgorithmEx", "kernel"
  std::string detail;       ///< kernel name; conv plan signature; memcpy kind; status
  bool in_capture = false;  ///< a stream capture was active when it was called
  const void* ptr = nullptr;  ///< malloc result, workspace pointer, memcpy destination
  const void* src = nullptr;  ///< memcpy source
  size_t bytes = 0;           ///< malloc size, workspace size, memcpy count
  int algo = -1;              ///< cuDNN algorithm of a convolution call
  bool failed = false;        ///< the stub returned an error
  unsigned grid = 0;          ///< a kernel launch's gridDim.x
};

/// Calls recorded so far (all of them, or from index `begin`).
std::vector<StubCall> calls(size_t begin = 0);
size_t num_calls();

/// One answer of a cudnnGet*WorkspaceSize stub.
struct WorkspaceQuery {
  std::string dir;   ///< "fwd", "bwd_data", "bwd_filter"
  std::string plan;  ///< the plan signature (descriptors of x, w, y, pad, stride, dtype, format)
  int algo = 0;
  bool ok = false;   ///< status success
  size_t bytes = 0;
};
std::vector<WorkspaceQuery> workspace_queries();

/// Bytes of live fake device memory from p to the end of the allocation holding it (0 when p
/// is in none).
size_t device_bytes_from(const void* p);
/// Live fake device allocations and their bytes.
size_t live_device_allocations();
size_t live_device_bytes();

/// Kernel names registered by the fat binaries' static initialisers.
size_t registered_kernels();

/// The number of devices cudaGetDeviceCount reports (1 by default).
void set_device_count(int n);

/// Number of calls of `fn` in `cs` (optionally only those inside a capture).
int count(const std::vector<StubCall>& cs, const std::string& fn);
int count_in_capture(const std::vector<StubCall>& cs, const std::string& fn);

}  // namespace rn50::cuda_stub
