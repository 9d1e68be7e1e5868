// rn50: error type and checking macros. Every failure carries file:line and a message that names
// the offending file, flag or value.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace rn50 {

/// The one exception type rn50 throws for user-visible errors (bad input, bad flags, I/O).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& msg);

}  // namespace rn50

/// RN50_CHECK(cond, "fmt {}", args...): throw rn50::Error("file:line: message") when !cond.
#define RN50_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) ::rn50::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
/// RN50_FAIL("fmt {}", args...): throw unconditionally.
#define RN50_FAIL(...) ::rn50::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
