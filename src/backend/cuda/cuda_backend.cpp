// rn50 CUDA backend: device selection, streams and library handles, memory (device and pinned
// host), copies between host and device with dtype/layout conversion, the asynchronous input
// upload of the next batch, CUDA graph capture, supports(), and the functions the registry
// calls (make_cuda_backend, cuda_device_count, cuda_unavailable_reason).
// The ops live in conv.cpp, linear.cpp and the *.cu kernel files (see cuda_backend.h).
#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/conv_graph.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/plans.h"
#include "core/check.h"

namespace rn50 {
namespace cuda {

// ---------------------------------------------------------------- dtype mapping (cuda_util.h)

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    default: break;
  }
  RN50_FAIL("cuda: dtype {} has no cuDNN data type (F32, F16, BF16 or F64 only)", dtype_name(t));
}

cudaDataType_t cuda_dtype(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f64: return CUDA_R_64F;
    default: break;
  }
  RN50_FAIL("cuda: dtype {} has no cuBLASLt data type (F32, F16, BF16 or F64 only)",
            dtype_name(t));
}

// ---------------------------------------------------------------- DeviceBuffer

namespace {
/// Buffers that a recorded graph may still use. A CudaGraph bakes in the addresses of the
/// workspace and scratch buffers it was recorded with; if a later op with a new shape (e.g. an
/// evaluation batch of another size) grows one of them, freeing the old block would leave the
/// graph replaying into freed (or reused) memory. So while any graph is alive, a grown buffer's
/// old block is retired instead of freed, and retired blocks are freed with the last graph.
std::mutex g_graph_mu;
int g_live_graphs = 0;
std::vector<void*> g_retired;

void retire_or_free(void* p) {
  std::lock_guard<std::mutex> lock(g_graph_mu);
  if (g_live_graphs > 0)
    g_retired.push_back(p);
  else
    (void)cudaFree(p);
}
}  // namespace

void* DeviceBuffer::ensure(size_t n) {
  if (n <= bytes) return ptr;
  if (ptr) {
    // Work queued earlier may still read the old buffer: let it finish before freeing. Growth
    // happens only on the first call of an op with a new shape, never in the steady state.
    RN50_CUDA_CHECK(cudaDeviceSynchronize());
    retire_or_free(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  RN50_CUDA_CHECK(cudaMalloc(&ptr, n));
  bytes = n;
  return ptr;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr) (void)cudaFree(ptr);  // never throws; errors at teardown are ignored
}

namespace {

/// Storage deleters (Storage::deleter is a plain function pointer). Errors are ignored: they
/// run in destructors, possibly after the backend is gone.
void free_device(void* p) { (void)cudaFree(p); }
/// Device of the last alloc_host(): pinned buffers may be released on a thread that never
/// selected a device (data loader workers), where cudaFreeHost would otherwise create a
/// context on device 0.
std::atomic<int> g_pinned_device{-1};
void free_pinned(void* p) {
  const int dev = g_pinned_device.load();
  if (dev >= 0) (void)cudaSetDevice(dev);
  (void)cudaFreeHost(p);
}

/// Destroys whatever of the streams and handles exists (constructor failure and destructor).
void release_handles(cudaStream_t& stream, cudaStream_t& copy_stream, cudnnHandle_t& cudnn,
                     cublasLtHandle_t& lt) noexcept {
  if (lt) (void)cublasLtDestroy(lt);
  if (cudnn) (void)cudnnDestroy(cudnn);
  if (copy_stream) (void)cudaStreamDestroy(copy_stream);
  if (stream) (void)cudaStreamDestroy(stream);
  lt = nullptr;
  cudnn = nullptr;
  copy_stream = stream = nullptr;
}

/// Bytes of a tensor of `shape` and `dtype`; throws on a negative dimension.
size_t shape_bytes(const char* op, const std::vector<int64_t>& shape, DType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) {
    RN50_CHECK(d >= 0, "cuda {}: negative dimension {} in shape of {} tensor", op, d,
               dtype_name(dtype));
    n *= d;
  }
  return static_cast<size_t>(n) * dtype_size(dtype);
}

bool is_float16ish_or_f32(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

/// The Graph returned by capture(): an instantiated cudaGraph replayed on the backend stream.
class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraph_t g, cudaGraphExec_t e, cudaStream_t s) : graph_(g), exec_(e), stream_(s) {
    std::lock_guard<std::mutex> lock(g_graph_mu);
    ++g_live_graphs;
  }
  ~CudaGraph() override {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
    std::lock_guard<std::mutex> lock(g_graph_mu);
    if (--g_live_graphs == 0 && !g_retired.empty()) {
      // A replay may still be running: wait for it before freeing what it used (device-wide:
      // the backend and its stream may already be gone).
      (void)cudaDeviceSynchronize();
      for (void* p : g_retired) (void)cudaFree(p);
      g_retired.clear();
    }
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  /// Queues one launch of the recorded work on the backend stream (asynchronous).
  void replay() override { RN50_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

bool is_pinned(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a CUDA-known pointer: pageable
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

// ---------------------------------------------------------------- construction

namespace {
/// The value of the A/B switch `var` (an environment variable): `off` when unset or empty, else
/// one of `off` and `on`; anything else is refused naming the variable, with what each means.
bool env_switch(const char* var, const char* off, const char* on, const char* on_means) {
  const char* v = std::getenv(var);
  const std::string s = v ? v : "";
  RN50_CHECK(s.empty() || s == off || s == on,
             "environment variable {} is '{}': use {} ({}) or {} (the default)", var, s, on,
             on_means, off);
  return s == on;
}
}  // namespace

CudaBackend::CudaBackend(const BackendOptions& opt)
    : device_index_(opt.device_index),
      allow_tf32_(opt.allow_tf32),
      bn_join_fused_(env_switch("RN50_CUDA_BN_JOIN", "separate", "fused",
                                "a block's last BatchNorm and its residual join as one op")),
      bn_coeffs_in_registers_(env_switch("RN50_CUDA_BN_COEFFS", "loads", "registers",
                                         "NHWC apply passes with each thread's channels fixed")),
      maxpool_indices_(env_switch("RN50_CUDA_MAXPOOL_BWD", "recompute", "indices",
                                  "max pooling's backward from the forward's argmax indices")),
      cudnn_graph_api_(env_switch("RN50_CUDNN_API", "legacy", "graph",
                                  "convolutions on cuDNN's graph API")),
      bn_cudnn_(env_switch("RN50_CUDA_BN", "own", "cudnn",
                           "training batch norm on cuDNN's NHWC fused BN where it applies")) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    RN50_FAIL("cuda backend: CUDA is unusable: cudaGetDeviceCount failed with {} ({})",
              cudaGetErrorName(e), cudaGetErrorString(e));
  }
  RN50_CHECK(count > 0, "cuda backend: no CUDA device found");
  RN50_CHECK(device_index_ >= 0 && device_index_ < count,
             "cuda backend: device cuda:{} does not exist ({} CUDA device(s) visible)",
             device_index_, count);
  try {
    RN50_CUDA_CHECK(cudaSetDevice(device_index_));
    RN50_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RN50_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    RN50_CUDNN_CHECK(cudnnCreate(&cudnn_));
    RN50_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    RN50_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
    cudaDeviceProp prop{};
    RN50_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index_));
    gpu_name_ = prop.name;
    sm_count_ = prop.multiProcessorCount;
  } catch (...) {
    release_handles(stream_, copy_stream_, cudnn_, cublaslt_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  // Never throws: every error is ignored. Pending work may still use pinned staging buffers,
  // plan scratch and workspaces, so the streams are drained first.
  (void)cudaSetDevice(device_index_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  if (copy_stream_) (void)cudaStreamSynchronize(copy_stream_);
  for (auto& [key, slot] : input_slots_) {
    if (slot.released) (void)cudaEventDestroy(slot.released);
    if (slot.uploaded) (void)cudaEventDestroy(slot.uploaded);
    if (slot.pinned) (void)cudaFreeHost(slot.pinned);
  }
  input_slots_.clear();
  conv_plans.clear();
  conv_graph_plans.clear();
  linear_plans.clear();
  bn_cudnn_states_.clear();
  release_handles(stream_, copy_stream_, cudnn_, cublaslt_);
  (void)cudaGetLastError();
  // workspace and the scratch DeviceBuffers free themselves after this body.
}

bool CudaBackend::supports(Op op, DType dtype, Layout layout) const {
  if (layout != Layout::NCHW && layout != Layout::NHWC) return false;
  if (!is_float16ish_or_f32(dtype)) return false;
  switch (op) {
    case Op::sgd: return dtype == DType::f32 || dtype == DType::f16;  // f16: pure fp16
    case Op::softmax_xent:
    case Op::topk:
    case Op::amp: return dtype == DType::f32;
    // Our fused kernels (RN50_CUDA_BN_JOIN=fused, every configuration) or cuDNN's
    // BN_ADD_ACTIVATION (RN50_CUDA_BN=cudnn, where bn_cudnn_refusal takes the dtype and layout;
    // every channel count of ResNet is a multiple of 4). Else Backend's default: separate ops.
    case Op::batchnorm_add_relu:
      return bn_join_fused_ || !bn_cudnn_refusal(BatchNormParams{}, dtype, layout, -1);
    default: return true;  // conv, bn, eltwise, pooling, linear, normalize_u8 (dst dtype)
  }
}

void CudaBackend::check_device(const char* op, const char* name, const Tensor& t) const {
  RN50_CHECK(t.defined(), "cuda {}: tensor {} is undefined", op, name);
  RN50_CHECK(t.device() == device(), "cuda {}: tensor {} {} is not on {}", op, name, t.str(),
             device().str());
}

// ---------------------------------------------------------------- memory

Tensor CudaBackend::alloc(std::vector<int64_t> shape, DType dtype, Layout layout) {
  const size_t bytes = shape_bytes("alloc", shape, dtype);
  // At least 256 bytes so that even an empty tensor has a (defined) pointer.
  const size_t n = bytes < 256 ? 256 : bytes;
  auto s = std::make_shared<Storage>();
  RN50_CUDA_CHECK(cudaMalloc(&s->ptr, n));
  s->deleter = &free_device;
  s->bytes = n;
  s->device = device();
  return Tensor::from_storage(std::move(s), 0, std::move(shape), dtype, layout);
}

// alloc_host() is called from the data loader's worker threads (the batch pool), whose current
// device is 0 unless set: select this backend's device first (otherwise every rank would create
// a context on GPU 0), and allocate PORTABLE pinned memory (plain cudaMallocHost memory counts as
// pinned only for the allocating context; cudaHostAlloc docs, cudaHostAllocPortable).
Tensor CudaBackend::alloc_host(std::vector<int64_t> shape, DType dtype, Layout layout) {
  const size_t bytes = shape_bytes("alloc_host", shape, dtype);
  const size_t n = bytes < 256 ? 256 : bytes;
  RN50_CUDA_CHECK(cudaSetDevice(device_index_));
  g_pinned_device.store(device_index_);
  auto s = std::make_shared<Storage>();
  RN50_CUDA_CHECK(cudaHostAlloc(&s->ptr, n, cudaHostAllocPortable));
  s->deleter = &free_pinned;
  s->bytes = n;
  s->device = Device{};  // CPU
  return Tensor::from_storage(std::move(s), 0, std::move(shape), dtype, layout);
}

// copy(): device <-> device, host <-> device and host <-> host, with an optional dtype
// conversion (between F32, F16 and BF16) and/or 4-D layout change, done on the device.
// Completion: copies into device memory are queued on the main stream (asynchronous; later
// ops are ordered after them). A copy into PAGEABLE host memory has completed when copy()
// returns; a copy into PINNED host memory (alloc_host) is asynchronous: call synchronize()
// before reading it. A pinned host SOURCE is read asynchronously too: do not modify it before
// synchronize() (pageable sources may be reused at once). Copies that stage host data through
// temporary device buffers (conversions with a host end) synchronise before returning.
void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  RN50_CHECK(src.defined() && dst.defined(), "cuda copy: undefined tensor (src {}, dst {})",
             src.str(), dst.str());
  RN50_CHECK(src.same_shape(dst), "cuda copy: shape mismatch, src {} dst {}", src.str(),
             dst.str());
  auto on_device = [&](const Tensor& t, const char* name) {
    if (t.is_cpu()) return false;
    RN50_CHECK(t.device() == device(), "cuda copy: {} {} is not on {} or the host", name,
               t.str(), device().str());
    return true;
  };
  const bool sd = on_device(src, "src"), dd = on_device(dst, "dst");
  const size_t bytes = src.nbytes();
  if (src.numel() == 0) return;

  if (src.dtype() == dst.dtype() && same_order(src, dst.layout())) {
    if (src.data() == dst.data()) return;
    if (!sd && !dd) {
      // Host to host: pinned buffers may still be the target of queued copies.
      RN50_CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::memmove(dst.data(), src.data(), bytes);
      return;
    }
    RN50_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDefault, stream_));
    if (!dd && !is_pinned(dst.data())) RN50_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }

  RN50_CHECK(src.dtype() == dst.dtype() ||
                 (is_float16ish_or_f32(src.dtype()) && is_float16ish_or_f32(dst.dtype())),
             "cuda copy: unsupported dtype conversion {} -> {} (only between F32, F16 and BF16)",
             src.str(), dst.str());
  if (sd && dd) {
    convert_on_device(src, dst);
    return;
  }
  // A host end: stage through temporary device tensors, convert on the device.
  Tensor s = sd ? src : alloc(src.shape(), src.dtype(), src.layout());
  if (!sd)
    RN50_CUDA_CHECK(
        cudaMemcpyAsync(s.data(), src.data(), bytes, cudaMemcpyHostToDevice, stream_));
  Tensor d = dd ? dst : alloc(dst.shape(), dst.dtype(), dst.layout());
  convert_on_device(s, d);
  if (!dd)
    RN50_CUDA_CHECK(cudaMemcpyAsync(dst.data(), d.data(), dst.nbytes(), cudaMemcpyDeviceToHost,
                                    stream_));
  // The temporaries are freed when s and d go out of scope.
  RN50_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::zero(Tensor& dst) {
  RN50_CHECK(dst.defined(), "cuda zero: undefined tensor");
  if (dst.numel() == 0) return;
  if (dst.is_cpu()) {
    RN50_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memset(dst.data(), 0, dst.nbytes());
    return;
  }
  check_device("zero", "dst", dst);
  RN50_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, dst.nbytes(), stream_));
}

void CudaBackend::synchronize() {
  RN50_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  RN50_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int64_t CudaBackend::device_memory_used_bytes() const {
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device_index_) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
    return -1;
  return static_cast<int64_t>(total_b - free_b);
}

std::vector<std::pair<std::string, std::string>> CudaBackend::environment() const {
  std::vector<std::pair<std::string, std::string>> e;
  auto version = [](int v) {  // CUDA's 1000 * major + 10 * minor
    return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
  };
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_index_) == cudaSuccess) {
    e.emplace_back("gpu", prop.name);
    e.emplace_back("gpu_memory_bytes", std::to_string(prop.totalGlobalMem));
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) e.emplace_back("driver_cuda_version", version(v));
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) e.emplace_back("cuda_runtime", version(v));
  const size_t dnn = cudnnGetVersion();  // 10000 * major + 100 * minor + patch (cuDNN 9)
  e.emplace_back("cudnn", fmt::format("{}.{}.{}", dnn / 10000, (dnn % 10000) / 100, dnn % 100));
  const size_t lt = cublasLtGetVersion();  // 10000 * major + 100 * minor + patch
  e.emplace_back("cublaslt", fmt::format("{}.{}.{}", lt / 10000, (lt % 10000) / 100, lt % 100));
  return e;
}

// ---------------------------------------------------------------- input upload

namespace {
/// Creates the events of an input slot on first use (timing disabled: cheapest to record).
void ensure_events(cudaEvent_t& released, cudaEvent_t& uploaded) {
  if (!released) RN50_CUDA_CHECK(cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
  if (!uploaded) RN50_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
}
}  // namespace

// upload_input(): the slot of dst (keyed by its device pointer) owns a pinned staging buffer
// and two events. Sequence: wait (host) until the slot's previous H2D copy has read its source
// (then drop the slot's hold on a pinned source); a pageable src is memcpy'd into the staging
// buffer, a pinned src (the data loader's batches from alloc_host) is the copy's source itself
// and held (a Tensor sharing its storage, so the batch pool cannot reuse it) until then; on
// copy_stream_, wait for the slot's `released` event (the main-stream work that last read
// dst), copy H2D, record `uploaded`; the main stream waits for `uploaded`. The first upload
// into a slot without any release_input() waits for all main-stream work queued so far.
// Tensors whose memory orders differ fall back to copy().
void CudaBackend::upload_input(const Tensor& src, Tensor& dst) {
  check_device("upload_input", "dst", dst);
  RN50_CHECK(src.defined() && src.is_cpu(), "cuda upload_input: src {} must be a host tensor",
             src.str());
  RN50_CHECK(src.same_shape(dst) && src.dtype() == dst.dtype(),
             "cuda upload_input: src {} does not match dst {} (same shape and dtype needed)",
             src.str(), dst.str());
  if (!same_order(src, dst.layout())) {
    copy(src, dst);
    return;
  }
  const size_t n = dst.nbytes();
  if (n == 0) return;
  InputSlot& s = input_slots_[dst.data()];
  ensure_events(s.released, s.uploaded);
  if (s.has_upload) RN50_CUDA_CHECK(cudaEventSynchronize(s.uploaded));
  s.held = Tensor();
  const void* from = src.data();
  if (is_pinned(src.data())) {
    s.held = src;
  } else {
    if (s.pinned_bytes < n) {
      if (s.pinned) RN50_CUDA_CHECK(cudaFreeHost(s.pinned));
      s.pinned = nullptr;
      s.pinned_bytes = 0;
      RN50_CUDA_CHECK(cudaMallocHost(&s.pinned, n));
      s.pinned_bytes = n;
    }
    std::memcpy(s.pinned, src.data(), n);
    from = s.pinned;
  }
  if (!s.has_release) {
    RN50_CUDA_CHECK(cudaEventRecord(s.released, stream_));
    s.has_release = true;
  }
  RN50_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, s.released, 0));
  RN50_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), from, n, cudaMemcpyHostToDevice, copy_stream_));
  RN50_CUDA_CHECK(cudaEventRecord(s.uploaded, copy_stream_));
  s.has_upload = true;
  RN50_CUDA_CHECK(cudaStreamWaitEvent(stream_, s.uploaded, 0));
}

// release_input(): records the slot's `released` event on the main stream. Meant to be called
// outside capture (after Graph::replay()); inside a capture the event is recorded as an
// external event node, so that each replay records it.
void CudaBackend::release_input(const Tensor& dst) {
  check_device("release_input", "dst", dst);
  InputSlot& s = input_slots_[dst.data()];
  ensure_events(s.released, s.uploaded);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  RN50_CUDA_CHECK(cudaStreamIsCapturing(stream_, &st));
  const unsigned flags =
      st == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault;
  RN50_CUDA_CHECK(cudaEventRecordWithFlags(s.released, stream_, flags));
  s.has_release = true;
}

void CudaBackend::forget_input(const Tensor& dst) {
  auto it = input_slots_.find(dst.data());
  if (it == input_slots_.end()) return;
  InputSlot& s = it->second;
  if (s.has_upload) RN50_CUDA_CHECK(cudaEventSynchronize(s.uploaded));  // staging still read?
  if (s.released) RN50_CUDA_CHECK(cudaEventDestroy(s.released));
  if (s.uploaded) RN50_CUDA_CHECK(cudaEventDestroy(s.uploaded));
  if (s.pinned) free_pinned(s.pinned);
  input_slots_.erase(it);
}

// ---------------------------------------------------------------- graphs

void CudaBackend::profiler_range(bool start) {
  RN50_CUDA_CHECK(start ? cudaProfilerStart() : cudaProfilerStop());
}

std::unique_ptr<Graph> CudaBackend::capture(const std::function<void()>& fn) {
  RN50_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    fn();
  } catch (...) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream_, &g);  // leaves capture mode whatever happened
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (e != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    RN50_FAIL(
        "cuda capture: recording the work as a CUDA graph failed with {} ({}); the recorded "
        "function must not allocate, synchronise or use other streams (run it once eagerly "
        "first)",
        cudaGetErrorName(e), cudaGetErrorString(e));
  }
  cudaGraphExec_t exec = nullptr;
  // UseNodePriority: kernels keep the priority of the stream they were recorded from (the
  // high-priority NCCL stream's allreduces keep precedence over backward kernels on replay);
  // without it every node runs at the launch stream's priority.
  const cudaError_t ie =
      cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  if (ie != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    RN50_FAIL("cuda capture: cudaGraphInstantiate failed with {} ({})", cudaGetErrorName(ie),
              cudaGetErrorString(ie));
  }
  auto g = std::make_unique<CudaGraph>(graph, exec, stream_);
  RN50_CUDA_CHECK(cudaGraphUpload(exec, stream_));
  return g;
}

}  // namespace cuda

// ---------------------------------------------------------------- registry hooks

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
  return std::make_unique<cuda::CudaBackend>(opt);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  try {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return fmt::format("cudaGetDeviceCount failed with {} ({})", cudaGetErrorName(e),
                         cudaGetErrorString(e));
    }
    return n > 0 ? std::string() : std::string("no CUDA device found");
  } catch (...) {
    return "CUDA is unusable";
  }
}

}  // namespace rn50
