// Internal to the CUDA link-seam stubs (cuda_stubs.cpp, cuda_stubs_dnn.cpp): the completed
// opaque handle types and the stubs' shared state. Not for tests: they use cuda_stubs.h.
#pragma once

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

#include "cuda_stubs.h"

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
  double t_ms = 0;  ///< the fake device clock when recorded (cudaEventElapsedTime)
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

namespace rn50::cuda_stub::detail {


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
  /// A fake device clock in milliseconds: cudaEventRecord reads it, work whose duration the
  /// stubs make up advances it (cudnnBackendExecute, cuda_stubs_graph.cpp).
  double clock_ms = 0;
};

inline State& st() {
  static State* s = new State;  // never destroyed: fat binaries unregister at exit
  return *s;
}

inline thread_local cudaError_t t_last_error = cudaSuccess;

struct LaunchConfig {
  dim3 grid, block;
  size_t shmem = 0;
  cudaStream_t stream = nullptr;
};
inline thread_local std::vector<LaunchConfig> t_launch_stack;

/// Whether a capture is active (caller holds the lock).
inline bool capturing_locked() { return !st().capturing.empty(); }

/// Records a call; returns it for the caller to fill (caller holds the lock).
inline StubCall& record_locked(const char* fn) {
  StubCall c;
  c.fn = fn;
  c.in_capture = capturing_locked();
  st().calls.push_back(std::move(c));
  return st().calls.back();
}

/// Work queued on stream s: counted as a node when s is capturing (caller holds the lock).
inline void node_locked(cudaStream_t s) {
  if (s && s->capturing) ++s->nodes;
}

/// A call a CUDA graph cannot record, made during a capture: fails and invalidates the capture
/// (caller holds the lock). Returns true when the call must fail.
inline bool prohibited_in_capture_locked(StubCall& c) {
  if (!capturing_locked()) return false;
  for (CUstream_st* s : st().capturing) s->invalidated = true;
  c.failed = true;
  c.detail = "prohibited during stream capture";
  t_last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

inline void* aligned(size_t n) {
  const size_t rounded = (std::max<size_t>(n, 1) + 255) / 256 * 256;
  return std::aligned_alloc(256, rounded);
}

/// The allocation holding p, or nullptr (caller holds the lock).
inline const std::pair<const uintptr_t, Alloc>* find_alloc_locked(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto& m = st().allocs;
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  return a < it->first + it->second.bytes ? &*it : nullptr;
}

inline bool is_device_locked(const void* p) {
  const auto* a = find_alloc_locked(p);
  return a && !a->second.pinned;
}
inline bool is_pinned_locked(const void* p) {
  const auto* a = find_alloc_locked(p);
  return a && a->second.pinned;
}

inline std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

inline const char* fmt_name(cudnnTensorFormat_t f) { return f == CUDNN_TENSOR_NHWC ? "NHWC" : "NCHW"; }

/// The signature of a convolution plan: its three descriptors and the convolution's geometry.
inline std::string plan_sig(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
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
inline cudnnStatus_t ws_size(int algo, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
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
inline cudnnStatus_t find(const char* fn, const char* dir, const cudnnTensorStruct* x,
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
inline cudnnStatus_t ws_query(const char* dir, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                       const cudnnConvolutionStruct* cv, const cudnnTensorStruct* y, Algo algo,
                       size_t* bytes) {
  const cudnnStatus_t s = ws_size(static_cast<int>(algo), x, w, bytes);
  std::lock_guard<std::mutex> lock(st().mu);
  st().ws_queries.push_back(
      {dir, plan_sig(x, w, cv, y), static_cast<int>(algo), s == CUDNN_STATUS_SUCCESS, *bytes});
  return s;
}

inline cudnnStatus_t conv_call(const char* fn, const cudnnHandle_t h, int algo, void* ws,
                        size_t ws_bytes) {
  std::lock_guard<std::mutex> lock(st().mu);
  StubCall& c = record_locked(fn);
  c.algo = algo;
  c.ptr = ws;
  c.bytes = ws_bytes;
  node_locked(h ? h->stream : nullptr);
  return CUDNN_STATUS_SUCCESS;
}


}  // namespace rn50::cuda_stub::detail
namespace rn50::cuda_stub {
using namespace detail;  // stub::st(), stub::record_locked(), ... in both stub files
}  // namespace rn50::cuda_stub
