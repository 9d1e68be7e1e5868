// rn50: strict conversions of JSON values read from files (model.json, state.json, safetensors
// headers, report records). nlohmann's get<T>() converts a float to an integer with a plain cast
// (undefined behaviour out of range: "epoch": 1e300) and throws its own exception types for a
// wrong type; these check the value first and throw rn50::Error naming `what` (the file and the
// field) instead.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace rn50 {

namespace json_detail {
[[noreturn]] inline void bad(const nlohmann::json& v, const std::string& what,
                             const char* expected) {
  std::string got = v.dump();
  if (got.size() > 80) got = got.substr(0, 77) + "...";
  RN50_FAIL("{}: expected {}, got {}", what, expected, got);
}
template <class T>
struct is_vector : std::false_type {};
template <class U>
struct is_vector<std::vector<U>> : std::true_type {};
}  // namespace json_detail

/// How deep JSON read from files and requests may nest. nlohmann parses iteratively, but copying
/// and dumping a value recurse, so a document of a million '[' would overflow the stack later.
inline constexpr int kMaxJsonDepth = 64;

/// nlohmann::json::parse(text) refusing documents nested deeper than kMaxJsonDepth with
/// rn50::Error "`what`: JSON nested deeper than 64 levels". Other errors as nlohmann's parse
/// (json::parse_error), or a discarded value when `allow_exceptions` is false.
inline nlohmann::json parse_json_limited(std::string_view text, const std::string& what,
                                         bool allow_exceptions = true) {
  return nlohmann::json::parse(
      text,
      [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        RN50_CHECK(depth <= kMaxJsonDepth, "{}: JSON nested deeper than {} levels", what,
                   kMaxJsonDepth);
        return true;
      },
      allow_exceptions);
}

/// `v` as T: an integer type (a JSON integer, or a float with an integral value, in T's range),
/// a floating type (any number), bool, std::string, or a std::vector of those (a JSON array).
/// Throws rn50::Error "`what`: expected ..., got <the value>" otherwise.
template <class T>
T json_as(const nlohmann::json& v, const std::string& what) {
  auto bad = [&](const char* expected) { json_detail::bad(v, what, expected); };
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad("true or false");
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(L::max())) bad("an integer in range");
      return static_cast<T>(u);
    }
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if ((L::is_signed && i < static_cast<int64_t>(L::min())) ||
          (!L::is_signed && i < 0) ||
          (L::is_signed && i > static_cast<int64_t>(L::max())))
        bad("an integer in range");
      return static_cast<T>(i);
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // 2^63 and 2^64 are exact doubles: compare against them, not against L::max().
      const double hi = std::ldexp(1.0, L::digits);
      if (!(std::trunc(d) == d && d >= static_cast<double>(L::min()) && d < hi))
        bad("an integer in range");
      return static_cast<T>(d);
    }
    json_detail::bad(v, what, "an integer");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) bad("a number");
    return v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) bad("a string");
    return v.get<std::string>();
  } else if constexpr (json_detail::is_vector<T>::value) {
    if (!v.is_array()) bad("a list");
    T out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(json_as<typename T::value_type>(v[i], what + "[" + std::to_string(i) + "]"));
    return out;
  } else {
    static_assert(sizeof(T) == 0, "json_as: unsupported type");
  }
}

/// Field `key` of object `j` as T (json_as), or `fallback` when `j` has no such key (or is not
/// an object). The error names "`what`: 'key'".
template <class T>
T json_get_or(const nlohmann::json& j, const char* key, const std::string& what, T fallback) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  return json_as<T>(j[key], what + ": '" + key + "'");
}

}  // namespace rn50
