// rn50: the error type every public function documents ("throws rn50::Error ...").
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace rn50 {

/// The one exception type rn50 throws for user-visible errors (bad input, bad flags, I/O,
/// library failures). what() is the message a user reads: it names the offending file, flag or
/// value and says what to do. location() is the source position of the check that failed
/// ("trainer.cpp:178"), for developers, or empty for an Error constructed directly.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, std::string location = {})
      : std::runtime_error(msg), location_(std::move(location)) {}
  const std::string& location() const noexcept { return location_; }

 private:
  std::string location_;
};

/// The text a command prints for a caught exception: e.what(), followed by " [at file.cpp:123]"
/// when e is an Error with a location and the environment variable RN50_DEBUG is set (non-empty).
std::string error_text(const std::exception& e);

}  // namespace rn50
