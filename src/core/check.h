// rn50: error type and checking macros. Every failure carries a message that names the offending
// file, flag or value (what a user reads) and, separately, the source file:line that raised it
// (what a developer reads: Error::location(), printed by the CLI when RN50_DEBUG is set).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace rn50 {

/// The one exception type rn50 throws for user-visible errors (bad input, bad flags, I/O).
/// what() is the message alone; location() is "file.cpp:123" of the check that failed, or empty
/// for an Error constructed directly.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, std::string location = {})
      : std::runtime_error(msg), location_(std::move(location)) {}
  const std::string& location() const noexcept { return location_; }

 private:
  std::string location_;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& msg);

/// The text a command prints for a caught exception: e.what(), followed by " [at file.cpp:123]"
/// when e is an Error with a location and the environment variable RN50_DEBUG is set (non-empty).
std::string error_text(const std::exception& e);

}  // namespace rn50

/// RN50_CHECK(cond, "fmt {}", args...): throw rn50::Error(message, "file:line") when !cond.
#define RN50_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) ::rn50::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
/// RN50_FAIL("fmt {}", args...): throw unconditionally.
#define RN50_FAIL(...) ::rn50::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
