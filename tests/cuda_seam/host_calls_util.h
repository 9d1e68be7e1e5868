// Helpers of the CUDA seam tests (test_cuda_host_calls.cpp, test_cuda_bn_cudnn.cpp): reading
// the stubs' call records and scoping the backend's environment switches.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_stubs.h"

namespace rn50::seam_test {

using cuda_stub::count;
using cuda_stub::StubCall;

/// The calls a captured region must not make (a CUDA graph records none of them).
inline const char* const kAllocFns[] = {"cudaMalloc", "cudaFree", "cudaMallocHost",
                                        "cudaHostAlloc", "cudaFreeHost"};
inline const char* const kSyncFns[] = {"cudaStreamSynchronize", "cudaDeviceSynchronize",
                                       "cudaEventSynchronize"};

/// The calls, one a line (kernel launches too when `kernels`), for failure messages.
inline std::string dump(const std::vector<StubCall>& cs, bool kernels = false) {
  std::string s;
  for (const StubCall& c : cs) {
    if (c.fn == "kernel" && !kernels) continue;
    s += "\n  " + c.fn + (c.in_capture ? " [capture]" : "") + (c.failed ? " FAILED" : "") +
         (c.detail.empty() ? "" : " " + c.detail) +
         (c.bytes ? " " + std::to_string(c.bytes) + " B" : "");
  }
  return s;
}

/// The calls of a capture: from cudaStreamBeginCapture to cudaStreamEndCapture, inclusive.
inline std::vector<StubCall> capture_region(const std::vector<StubCall>& cs) {
  auto b = std::find_if(cs.begin(), cs.end(),
                        [](const StubCall& c) { return c.fn == "cudaStreamBeginCapture"; });
  auto e = std::find_if(b, cs.end(),
                        [](const StubCall& c) { return c.fn == "cudaStreamEndCapture"; });
  if (b == cs.end() || e == cs.end()) return {};
  return std::vector<StubCall>(b, e + 1);
}

inline void expect_no_alloc_or_sync(const std::vector<StubCall>& cs, const std::string& where) {
  for (const char* fn : kAllocFns) EXPECT_EQ(count(cs, fn), 0) << fn << " " << where << dump(cs);
  for (const char* fn : kSyncFns) EXPECT_EQ(count(cs, fn), 0) << fn << " " << where << dump(cs);
}

/// Environment variable `name` set to `v` (unset when null) for the scope, unset after it.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* v) : name_(name) {
    if (v)
      setenv(name, v, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  const char* name_;
};

/// The kernel names (demangled, as registered) launched in `cs`.
inline std::vector<std::string> kernel_names(const std::vector<StubCall>& cs) {
  std::vector<std::string> names;
  for (const StubCall& c : cs)
    if (c.fn == "kernel") names.push_back(c.detail);
  return names;
}

/// How many of `names` contain `part`.
inline int count_named(const std::vector<std::string>& names, const std::string& part) {
  return static_cast<int>(std::count_if(names.begin(), names.end(), [&](const std::string& n) {
    return n.find(part) != std::string::npos;
  }));
}

}  // namespace rn50::seam_test
