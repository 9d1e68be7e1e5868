// rn50: checking macros. A failed check throws rn50::Error (include/rn50/error.h) with a message
// that names the offending file, flag or value and, kept apart, the file:line of the check.
#pragma once

#include <fmt/format.h>

#include <string>

#include "rn50/error.h"

namespace rn50 {

/// Throws Error(msg, "<basename of file>:<line>").
[[noreturn]] void fail_at(const char* file, int line, const std::string& msg);

}  // namespace rn50

/// RN50_CHECK(cond, "fmt {}", args...): throw rn50::Error(message, "file:line") when !cond.
#define RN50_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) ::rn50::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
/// RN50_FAIL("fmt {}", args...): throw unconditionally.
#define RN50_FAIL(...) ::rn50::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
