// Link-seam stubs of every CUDA runtime, cuDNN and cuBLASLt function the CUDA backend calls
// (the undefined cuda* / cudnn* / cublasLt* / __cuda* symbols of librn50_cuda.a), for
// test_cuda_host_calls; see cuda_stubs.h for what they do. Declarations come from the real
// headers, so a signature that drifts from the toolkit's fails to compile here.
#include "cuda_stubs.h"

#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

// ---------------------------------------------------------------- the opaque handle types
// The real libraries' handles are pointers to incomplete structs; the stubs complete them.

struct CUstream_st {
  int id = 0;
  bool capturing = false;
  bool invalidated = false;  ///< a prohibited call happened during the capture
  int nodes = 0;             ///< work recorded in the current capture
};
struct CUevent_st {
  bool recorded = false;
};
struct CUgraph_st {
  int nodes = 0;
};
struct CUgraphExec_st {
  int nodes = 0;
};
struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  cudnnTensorFormat_t format{};
  cudnnDataType_t dtype{};
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  cudnnTensorFormat_t format{};
  cudnnDataType_t dtype{};
  int k = 0, c = 0, r = 0, s = 0;
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnActivationStruct {
  cudnnActivationMode_t mode{};
};
struct cublasLtContext {
  int unused = 0;
};

namespace rn50::cuda_stub {
namespace {

struct Alloc {
  size_t bytes = 0;
  bool pinned = false;  ///< cudaMallocHost / cudaHostAlloc (else device)
};

/// Everything the stubs keep, behind one mutex.
struct State {
  std::mutex mu;
  std::vector<StubCall> calls;
  std::vector<WorkspaceQuery> ws_queries;
  std::map<uintptr_t, Alloc> allocs;
  std::map<const void*, std::string> kernels;  ///< host stub -> kernel name
  std::vector<CUstream_st*> capturing;          ///< streams in capture
  int device_count = 1;
  int next_stream = 1;
};

State& st() {
  static State* s = new State;  // never destroyed: fat binaries unregister at exit
  return *s;
}

thread_local cudaError_t t_last_error = cudaSuccess;

struct LaunchConfig {
  dim3 grid, block;
  size_t shmem = 0;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<LaunchConfig> t_launch_stack;

/// Whether a capture is active (caller holds the lock).
bool capturing_locked() { return !st().capturing.empty(); }

/// Records a call; returns it for the caller to fill (caller holds the lock).
StubCall& record_locked(const char* fn) {
  StubCall c;
  c.fn = fn;
  c.in_capture = capturing_locked();
  st().calls.push_back(std::move(c));
  return st().calls.back();
}

/// Work queued on stream s: counted as a node when s is capturing (caller holds the lock).
void node_locked(cudaStream_t s) {
  if (s && s->capturing) ++s->nodes;
}

/// A call a CUDA graph cannot record, made during a capture: fails and invalidates the capture
/// (caller holds the lock). Returns true when the call must fail.
bool prohibited_in_capture_locked(StubCall& c) {
  if (!capturing_locked()) return false;
  for (CUstream_st* s : st().capturing) s->invalidated = true;
  c.failed = true;
  c.detail = "prohibited during stream capture";
  t_last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

void* aligned(size_t n) {
  const size_t rounded = (std::max<size_t>(n, 1) + 255) / 256 * 256;
  return std::aligned_alloc(256, rounded);
}

/// The allocation holding p, or nullptr (caller holds the lock).
const std::pair<const uintptr_t, Alloc>* find_alloc_locked(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto& m = st().allocs;
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  return a < it->first + it->second.bytes ? &*it : nullptr;
}

bool is_device_locked(const void* p) {
  const auto* a = find_alloc_locked(p);
  return a && !a->second.pinned;
}
bool is_pinned_locked(const void* p) {
  const auto* a = find_alloc_locked(p);
  return a && a->second.pinned;
}

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

const char* fmt_name(cudnnTensorFormat_t f) { return f == CUDNN_TENSOR_NHWC ? "NHWC" : "NCHW"; }

/// The signature of a convolution plan: its three descriptors and the convolution's geometry.
std::string plan_sig(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                     const cudnnConvolutionStruct* cv, const cudnnTensorStruct* y) {
  char b[256];
  std::snprintf(b, sizeof b, "x %d,%d,%d,%d w %d,%d,%d,%d y %d,%d,%d,%d %s dt%d p%d s%d",
                x->n, x->c, x->h, x->w, w->k, w->c, w->r, w->s, y->n, y->c, y->h, y->w,
                fmt_name(x->format), static_cast<int>(x->dtype), cv->pad_h, cv->u);
  return b;
}

/// The made-up workspace of algorithm `algo` of a plan, and whether it supports the plan:
/// algorithm 2 is unsupported, algorithm 3 asks for 4 GiB (over the backend's cap), algorithm 0
/// needs none, the others a size that grows with the algorithm and the plan.
cudnnStatus_t ws_size(int algo, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                      size_t* bytes) {
  if (algo == 2) {
    *bytes = 0;
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (algo == 3) {
    *bytes = size_t{4} << 30;
    return CUDNN_STATUS_SUCCESS;
  }
  if (algo == 0) {
    *bytes = 0;
    return CUDNN_STATUS_SUCCESS;
  }
  *bytes = static_cast<size_t>(algo) * 4096 + static_cast<size_t>(x->c + w->k) * 64;
  return CUDNN_STATUS_SUCCESS;
}

/// The Find stub of one direction: records the call, fills the results (see cuda_stubs.h).
template <class Perf, class Algo>
cudnnStatus_t find(const char* fn, const char* dir, const cudnnTensorStruct* x,
                   const cudnnFilterStruct* w, const cudnnConvolutionStruct* cv,
                   const cudnnTensorStruct* y, int requested, int* returned, Perf* res,
                   void* ws, size_t ws_bytes) {
  std::lock_guard<std::mutex> lock(st().mu);
  StubCall& c = record_locked(fn);
  c.detail = std::string(dir) + " " + plan_sig(x, w, cv, y);
  c.ptr = ws;
  c.bytes = ws_bytes;
  // The search runs and times kernels, synchronising: no graph can record it.
  if (prohibited_in_capture_locked(c)) return CUDNN_STATUS_EXECUTION_FAILED;
  const int n = std::min(requested, 6);
  // The largest workspace under the cap: the fastest deterministic algorithm.
  int best = -1;
  size_t most = 0;
  for (int a = 0; a < n; ++a) {
    size_t b = 0;
    if (ws_size(a, x, w, &b) == CUDNN_STATUS_SUCCESS && b <= (size_t{1} << 30) &&
        (best < 0 || b > most)) {
      best = a;
      most = b;
    }
  }
  for (int a = 0; a < n; ++a) {
    Perf& r = res[a];
    std::memset(&r, 0, sizeof r);
    r.algo = static_cast<Algo>(a);
    size_t need = 0;
    r.status = ws_size(a, x, w, &need);
    if (r.status == CUDNN_STATUS_SUCCESS && need > ws_bytes) r.status = CUDNN_STATUS_ALLOC_FAILED;
    r.memory = need;
    r.mathType = cv->math;
    // algorithm 1 is the fastest but non-deterministic; then the one with the most workspace.
    r.determinism = a == 1 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
    r.time = a == 1 ? 0.5f : a == best ? 1.f : 2.f + static_cast<float>(a);
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

template <class Algo>
cudnnStatus_t ws_query(const char* dir, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                       const cudnnConvolutionStruct* cv, const cudnnTensorStruct* y, Algo algo,
                       size_t* bytes) {
  const cudnnStatus_t s = ws_size(static_cast<int>(algo), x, w, bytes);
  std::lock_guard<std::mutex> lock(st().mu);
  st().ws_queries.push_back(
      {dir, plan_sig(x, w, cv, y), static_cast<int>(algo), s == CUDNN_STATUS_SUCCESS, *bytes});
  return s;
}

cudnnStatus_t conv_call(const char* fn, const cudnnHandle_t h, int algo, void* ws,
                        size_t ws_bytes) {
  std::lock_guard<std::mutex> lock(st().mu);
  StubCall& c = record_locked(fn);
  c.algo = algo;
  c.ptr = ws;
  c.bytes = ws_bytes;
  node_locked(h ? h->stream : nullptr);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

// ---------------------------------------------------------------- the test-facing API

std::vector<StubCall> calls(size_t begin) {
  std::lock_guard<std::mutex> lock(st().mu);
  const auto& v = st().calls;
  if (begin >= v.size()) return {};
  return std::vector<StubCall>(v.begin() + static_cast<std::ptrdiff_t>(begin), v.end());
}
size_t num_calls() {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().calls.size();
}
std::vector<WorkspaceQuery> workspace_queries() {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().ws_queries;
}
size_t device_bytes_from(const void* p) {
  std::lock_guard<std::mutex> lock(st().mu);
  const auto* a = find_alloc_locked(p);
  if (!a || a->second.pinned) return 0;
  return a->first + a->second.bytes - reinterpret_cast<uintptr_t>(p);
}
size_t live_device_allocations() {
  std::lock_guard<std::mutex> lock(st().mu);
  return static_cast<size_t>(std::count_if(st().allocs.begin(), st().allocs.end(),
                                           [](const auto& kv) { return !kv.second.pinned; }));
}
size_t live_device_bytes() {
  std::lock_guard<std::mutex> lock(st().mu);
  size_t n = 0;
  for (const auto& kv : st().allocs)
    if (!kv.second.pinned) n += kv.second.bytes;
  return n;
}
size_t registered_kernels() {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().kernels.size();
}
void set_device_count(int n) {
  std::lock_guard<std::mutex> lock(st().mu);
  st().device_count = n;
}
int count(const std::vector<StubCall>& cs, const std::string& fn) {
  return static_cast<int>(
      std::count_if(cs.begin(), cs.end(), [&](const StubCall& c) { return c.fn == fn; }));
}
int count_in_capture(const std::vector<StubCall>& cs, const std::string& fn) {
  return static_cast<int>(std::count_if(
      cs.begin(), cs.end(), [&](const StubCall& c) { return c.fn == fn && c.in_capture; }));
}

}  // namespace rn50::cuda_stub

using rn50::cuda_stub::StubCall;
namespace stub = rn50::cuda_stub;

// ---------------------------------------------------------------- kernel registration, launch
// What nvcc's host code calls (crt/host_runtime.h, crt/device_functions.h): the fat binaries
// register their kernels at static initialisation; a launch pushes its configuration, and the
// kernel's host stub pops it and calls __cudaLaunchKernel.

extern "C" {

void** __cudaRegisterFatBinary(void* fatCubin) {
  static void* handles[64];
  static int used = 0;
  return &handles[used++ % 64];
}
void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) {}
void __cudaUnregisterFatBinary(void** fatCubinHandle) {}
void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun,
                            const char* deviceName, int thread_limit, uint3* tid, uint3* bid,
                            dim3* bDim, dim3* gDim, int* wSize) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::st().kernels[hostFun] = stub::demangle(deviceName);
}
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) {
  stub::t_launch_stack.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  if (stub::t_launch_stack.empty()) return cudaErrorInvalidConfiguration;
  const stub::LaunchConfig c = stub::t_launch_stack.back();
  stub::t_launch_stack.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shmem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* fun) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked("kernel");
  auto it = stub::st().kernels.find(reinterpret_cast<const void*>(kernel));
  c.detail = it != stub::st().kernels.end() ? it->second : std::string("?");
  c.ptr = stream;
  stub::node_locked(stream);
  return cudaSuccess;
}

}  // extern "C"

// ---------------------------------------------------------------- CUDA runtime

namespace {
const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    default: return "cudaError(stub)";
  }
}

/// The calls a graph cannot record (see cuda_stubs.h): fail during a capture.
cudaError_t prohibited(const char* fn) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked(fn);
  return stub::prohibited_in_capture_locked(c) ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t allocate(const char* fn, void** p, size_t n, bool pinned) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked(fn);
  c.bytes = n;
  if (stub::prohibited_in_capture_locked(c)) return cudaErrorStreamCaptureUnsupported;
  *p = stub::aligned(n);
  if (!*p) return cudaErrorMemoryAllocation;
  c.ptr = *p;
  stub::st().allocs[reinterpret_cast<uintptr_t>(*p)] = {std::max<size_t>(n, 1), pinned};
  return cudaSuccess;
}

cudaError_t release(const char* fn, void* p, bool pinned) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked(fn);
  c.ptr = p;
  if (stub::prohibited_in_capture_locked(c)) return cudaErrorStreamCaptureUnsupported;
  if (!p) return cudaSuccess;
  auto it = stub::st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == stub::st().allocs.end() || it->second.pinned != pinned) {
    c.failed = true;
    return cudaErrorInvalidValue;
  }
  c.bytes = it->second.bytes;
  stub::st().allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}
}  // namespace

extern "C" {

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = stub::t_last_error;
  stub::t_last_error = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }
const char* cudaGetErrorString(cudaError_t error) { return error_name(error); }

cudaError_t cudaGetDeviceCount(int* count) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaGetDeviceCount");
  *count = stub::st().device_count;
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int device) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaSetDevice");
  return device >= 0 && device < stub::st().device_count ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "rn50 stub GPU");
  prop->totalGlobalMem = size_t{80} << 30;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  *total_b = size_t{80} << 30;
  *free_b = *total_b - std::min(*total_b, stub::live_device_bytes());
  return cudaSuccess;
}
cudaError_t cudaProfilerStart(void) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaProfilerStart");
  return cudaSuccess;
}
cudaError_t cudaProfilerStop(void) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaProfilerStop");
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return allocate("cudaMalloc", devPtr, size, false);
}
cudaError_t cudaFree(void* devPtr) { return release("cudaFree", devPtr, false); }
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return allocate("cudaMallocHost", ptr, size, true);
}
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return allocate("cudaHostAlloc", pHost, size, true);
}
cudaError_t cudaFreeHost(void* ptr) { return release("cudaFreeHost", ptr, true); }

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* ptr) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  std::memset(a, 0, sizeof *a);
  a->type = stub::is_device_locked(ptr)   ? cudaMemoryTypeDevice
            : stub::is_pinned_locked(ptr) ? cudaMemoryTypeHost
                                          : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked("cudaMemcpyAsync");
  c.ptr = dst;
  c.bytes = count;
  const bool sd = stub::is_device_locked(src), dd = stub::is_device_locked(dst);
  c.detail = sd ? (dd ? "D2D" : "D2H") : (dd ? "H2D" : "H2H");
  if (stream && stream->capturing) {
    // A graph records a copy from or to pinned memory (replayed with its contents then); one
    // from or to pageable memory cannot be recorded.
    const bool pageable = (!sd && !stub::is_pinned_locked(src)) ||
                          (!dd && !stub::is_pinned_locked(dst));
    if (pageable && stub::prohibited_in_capture_locked(c)) return cudaErrorStreamCaptureUnsupported;
    stub::node_locked(stream);
    return cudaSuccess;  // recorded, not run
  }
  std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked("cudaMemsetAsync");
  c.ptr = devPtr;
  c.bytes = count;
  if (stream && stream->capturing) {
    stub::node_locked(stream);
    return cudaSuccess;
  }
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaStreamCreateWithFlags");
  *pStream = new CUstream_st;
  (*pStream)->id = stub::st().next_stream++;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaStreamDestroy");
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return prohibited("cudaStreamSynchronize");
}
cudaError_t cudaDeviceSynchronize(void) { return prohibited("cudaDeviceSynchronize"); }
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return prohibited("cudaEventSynchronize"); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaEventCreateWithFlags");
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaEventDestroy");
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaEventRecord");
  event->recorded = true;
  stub::node_locked(stream);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaEventRecordWithFlags");
  event->recorded = true;
  stub::node_locked(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaStreamWaitEvent");
  stub::node_locked(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked("cudaStreamBeginCapture");
  if (!stream || stream->capturing) {
    c.failed = true;
    return cudaErrorIllegalState;
  }
  stream->capturing = true;
  stream->invalidated = false;
  stream->nodes = 0;
  stub::st().capturing.push_back(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  auto& cap = stub::st().capturing;
  *pGraph = nullptr;
  if (!stream || !stream->capturing) {
    StubCall& c = stub::record_locked("cudaStreamEndCapture");
    c.failed = true;
    return cudaErrorIllegalState;
  }
  stream->capturing = false;
  cap.erase(std::remove(cap.begin(), cap.end(), stream), cap.end());
  StubCall& c = stub::record_locked("cudaStreamEndCapture");
  c.bytes = static_cast<size_t>(stream->nodes);
  if (stream->invalidated) {
    c.failed = true;
    return cudaErrorStreamCaptureInvalidated;
  }
  *pGraph = new CUgraph_st;
  (*pGraph)->nodes = stream->nodes;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  *status = stream && stream->capturing
                ? (stream->invalidated ? cudaStreamCaptureStatusInvalidated
                                       : cudaStreamCaptureStatusActive)
                : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaGraphInstantiate");
  *pGraphExec = new CUgraphExec_st;
  (*pGraphExec)->nodes = graph->nodes;
  return cudaSuccess;
}
cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaGraphUpload");
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked("cudaGraphLaunch");
  c.bytes = static_cast<size_t>(graphExec->nodes);
  stub::node_locked(stream);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaGraphExecDestroy");
  delete graphExec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cudaGraphDestroy");
  delete graph;
  return cudaSuccess;
}

// ---------------------------------------------------------------- cuDNN

size_t cudnnGetVersion(void) { return 91400; }
const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_(stub)";
  }
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  *d = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w) {
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = {format, dataType, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  *d = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = {format, dataType, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  d->pad_h = pad_h;
  d->pad_w = pad_w;
  d->u = u;
  d->v = v;
  d->dil_h = dilation_h;
  d->dil_w = dilation_w;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                          cudnnMathType_t mathType) {
  d->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int* n,
                                                    int* c, int* h, int* wo) {
  *n = x->n;
  *c = w->k;
  *h = (x->h + 2 * cv->pad_h - (cv->dil_h * (w->r - 1) + 1)) / cv->u + 1;
  *wo = (x->w + 2 * cv->pad_w - (cv->dil_w * (w->s - 1) + 1)) / cv->v + 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) {
  *d = new cudnnActivationStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d,
                                           cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t reluNanOpt, double coef) {
  d->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle,
                                                                 int* count) {
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle,
                                                      const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* sizeInBytes) {
  return stub::ws_query("fwd", xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return stub::ws_query("bwd_data", dxDesc, wDesc, convDesc, dyDesc, algo, sizeInBytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  return stub::ws_query("bwd_filter", xDesc, gradDesc, convDesc, dyDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void* y, const int requestedAlgoCount,
    int* returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSizeInBytes) {
  return stub::find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      "cudnnFindConvolutionForwardAlgorithmEx", "fwd", xDesc, wDesc, convDesc, yDesc,
      requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t* perfResults, void* workSpace, size_t workSpaceSizeInBytes) {
  return stub::find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      "cudnnFindConvolutionBackwardDataAlgorithmEx", "bwd_data", dxDesc, wDesc, convDesc, dyDesc,
      requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* y,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void* dw,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSizeInBytes) {
  return stub::find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      "cudnnFindConvolutionBackwardFilterAlgorithmEx", "bwd_filter", xDesc, dwDesc, convDesc,
      dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace,
      workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                      size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return stub::conv_call("cudnnConvolutionForward", handle, algo, workSpace,
                         workSpaceSizeInBytes);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return stub::conv_call("cudnnConvolutionBackwardData", handle, algo, workSpace,
                         workSpaceSizeInBytes);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                             void* workSpace, size_t workSpaceSizeInBytes,
                                             const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return stub::conv_call("cudnnConvolutionBackwardFilter", handle, algo, workSpace,
                         workSpaceSizeInBytes);
}
cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t handle, const void* alpha1, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes,
    const void* alpha2, const cudnnTensorDescriptor_t zDesc, const void* z,
    const cudnnTensorDescriptor_t biasDesc, const void* bias,
    const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t yDesc,
    void* y) {
  return stub::conv_call("cudnnConvolutionBiasActivationForward", handle, algo, workSpace,
                         workSpaceSizeInBytes);
}

// ---------------------------------------------------------------- cuBLASLt

size_t cublasLtGetVersion(void) { return 130100; }
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_(stub)";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  *lightHandle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  *matmulDesc = new cublasLtMatmulDescOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *matLayout = new cublasLtMatrixLayoutOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  stub::record_locked("cublasLtMatmulAlgoGetHeuristic");
  std::memset(&heuristicResultsArray[0], 0, sizeof heuristicResultsArray[0]);
  heuristicResultsArray[0].workspaceSize = 8192;
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stub::st().mu);
  StubCall& c = stub::record_locked("cublasLtMatmul");
  c.ptr = workspace;
  c.bytes = workspaceSizeInBytes;
  stub::node_locked(stream);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
