// rn50 fuzz harnesses: shared helpers. Readers of outside bytes that take a path get the fuzz
// input through a scratch file in a per-process folder under /dev/shm (memory, not disk).
// A reader that throws rn50::Error on bad input behaves correctly: each harness is a function
// rn50::fuzz::fuzz_<name>(data, size) (fuzz/targets.h) that lets the reader's rn50::Error out, and
// RN50_FUZZ_MAIN wraps it in libFuzzer's entry point catching that type only, so any other
// exception escaping is reported by libFuzzer as a crash (a finding). Compiled with
// RN50_FUZZ_NO_MAIN, the same functions run the regression inputs in tests/fuzz_regressions/
// (tests/test_fuzz_regressions.cpp).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <fstream>
#include <string>
#include <string_view>

#include "targets.h"
#include "rn50/error.h"

namespace rn50::fuzz {

/// A harness's own consistency check failed (the reader returned something impossible): thrown
/// as std::logic_error, which libFuzzer reports as a crash and the regression test as a failure.
[[noreturn]] inline void fail(const std::string& what) { throw std::logic_error(what); }

/// This process's scratch folder: $RN50_FUZZ_TMP (default /dev/shm, else /tmp) /
/// rn50-fuzz-<pid>, created on first use and removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = std::getenv("RN50_FUZZ_TMP") ? std::getenv("RN50_FUZZ_TMP") : "/dev/shm";
    if (!std::filesystem::is_directory(base)) base = "/tmp";
    std::string d = base + "/rn50-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    static struct Remover {
      std::string path;
      ~Remover() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    } remover{d};
    return d;
  }();
  return dir;
}

/// Writes `size` bytes to scratch_dir()/`name` (replacing it) and returns the file's path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

/// Splits the input at the first occurrence of `sep` (for harnesses that need two files):
/// returns {before, after}; without `sep`, {whole input, empty}.
inline std::pair<std::string_view, std::string_view> split_input(const uint8_t* data, size_t size,
                                                                 std::string_view sep) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t at = all.find(sep);
  if (at == std::string_view::npos) return {all, {}};
  return {all.substr(0, at), all.substr(at + sep.size())};
}

}  // namespace rn50::fuzz

#ifdef RN50_FUZZ_NO_MAIN
#define RN50_FUZZ_MAIN(fn)
#else
/// libFuzzer's entry point around harness `fn`: rn50::Error is a correct rejection.
#define RN50_FUZZ_MAIN(fn)                                                          \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {         \
    try {                                                                           \
      rn50::fuzz::fn(data, size);                                                   \
    } catch (const rn50::Error&) {                                                  \
    }                                                                               \
    return 0;                                                                       \
  }
#endif
