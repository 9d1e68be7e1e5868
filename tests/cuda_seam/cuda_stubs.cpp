// Link-seam stubs of every CUDA runtime, cuDNN and cuBLASLt function the CUDA backend calls
// (the undefined cuda* / cudnn* / cublasLt* / __cuda* symbols of librn50_cuda.a), for
// test_cuda_host_calls; see cuda_stubs.h for what they do. Declarations come from the real
// headers, so a signature that drifts from the toolkit's fails to compile here.
#include "cuda_stub_state.h"

namespace rn50::cuda_stub {

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
  c.grid = gridDim.x;
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
  c.src = src;
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
  event->t_ms = stub::st().clock_ms;
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

}  // extern "C"
