// rn50: the kinds of value a flag takes (config/flags.h) — integer, real, text, switch,
// boolean word, choice, enumeration, list — each with its parsing, JSON form and check, so that
// an entry of the flag table is one call. Words are read as DLE writes them: booleans as
// True/False (or true/false/1/0/yes/no/on/off), choices in any case (Cosine, NHWC, FP32).
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "config/flags.h"
#include "core/check.h"

namespace rn50::flag_kinds {

using json = nlohmann::ordered_json;
/// A value problem ("must be >= 1"), or empty when the value is fine.
template <class T>
using Problem = std::function<std::string(const T&)>;

/// "--epochs" -> "epochs", dashes to underscores.
std::string key_of(const std::string& name);
/// `s` in lower case (ASCII).
std::string lower(std::string s);
/// The single value of a one-value flag; throws naming the flag when there are several.
const std::string& one_value(const std::string& flag, const std::vector<std::string>& v);
/// A number (strtod, the whole text); throws naming the flag and the text.
double parse_real(const std::string& flag, const std::string& text);
/// true/false, 1/0, yes/no, on/off in any case (DLE's True/False); throws naming the flag.
bool parse_bool(const std::string& flag, const std::string& text);
/// Whether `text` is one of parse_bool's words.
bool is_bool_word(const std::string& text);
/// The items of a list flag given as "A,B,C", "A B C" or a mix (empty items dropped).
std::vector<std::string> split_list(const std::vector<std::string>& values);
/// The numbers of a list flag (split_list).
std::vector<double> parse_reals(const std::string& flag, const std::vector<std::string>& values);

template <class T>
T parse_integer(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  RN50_CHECK(r.ec == std::errc() && r.ptr == end && !text.empty(), "{} '{}': expected {}", flag,
             text,
             r.ec == std::errc::result_out_of_range ? "a smaller integer"
             : std::is_signed_v<T>                  ? "an integer"
                                                    : "an integer >= 0");
  return v;
}

/// An entry with its name, key, value name, help and commands; get/set/check to be filled.
FlagSpec base(const char* name, const char* value_name, const char* help, unsigned commands);

/// An integer field (int, int64_t, uint64_t), optionally range-checked.
template <class T>
FlagSpec integer(const char* name, T Config::*m, const char* help, unsigned commands,
                 Problem<T> problem = {}) {
  FlagSpec f = base(name, "INT", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
    c.*m = parse_integer<T>(n, one_value(n, v));
  };
  f.check = [m, n = f.name, problem](const Config& c) {
    if (!problem) return;
    const std::string p = problem(c.*m);
    RN50_CHECK(p.empty(), "{} {}: {}", n, c.*m, p);
  };
  return f;
}

/// A finite real field, optionally range-checked.
FlagSpec real(const char* name, double Config::*m, const char* help, unsigned commands,
              Problem<double> problem = {});
/// A text field, optionally checked.
FlagSpec text(const char* name, std::string Config::*m, const char* help, unsigned commands,
              Problem<std::string> problem = {});
/// A bool field given alone (= true) or with a boolean word (`--amp=false`, `--amp False`).
FlagSpec switch_(const char* name, bool Config::*m, const char* help, unsigned commands);
/// A bool field that takes its value as a word (DLE's `--enable-cpu-affinity true|false`).
FlagSpec boolean(const char* name, bool Config::*m, const char* help, unsigned commands);
/// A text field limited to `choices`, matched in any case and stored in the choice's spelling.
FlagSpec choice(const char* name, std::string Config::*m, std::vector<std::string> choices,
                const char* help, unsigned commands);
/// A list of texts, each one of `choices` when given (any case, stored in the choice's
/// spelling); "A,B" or "A B".
FlagSpec text_list(const char* name, std::vector<std::string> Config::*m,
                   std::vector<std::string> choices, const char* help, unsigned commands);
/// A list of integers >= `min`; "A,B" or "A B".
FlagSpec int_list(const char* name, std::vector<int> Config::*m, int min, const char* help,
                  unsigned commands);

/// An enum field: `names` ("A|B") as shown, `parse` the parser that throws naming the flag.
template <class E>
FlagSpec enumeration(const char* name, E Config::*m, const char* names,
                     std::function<E(const std::string&)> parse,
                     std::function<std::string(E)> to_name, const char* help,
                     unsigned commands) {
  FlagSpec f = base(name, names, help, commands);
  f.get = [m, to_name](const Config& c) { return json(to_name(c.*m)); };
  f.set = [m, n = f.name, parse](Config& c, const std::vector<std::string>& v) {
    c.*m = parse(one_value(n, v));
  };
  f.check = [](const Config&) {};
  return f;
}

/// `spec` (built under its own name, DLE's spelling) marked as an alias of the flag `of`
/// (FlagSpec::alias_of).
FlagSpec alias(FlagSpec spec, const char* of);

template <class T>
Problem<T> at_least(T lo) {
  return [lo](const T& v) { return v >= lo ? std::string() : fmt::format("must be >= {}", lo); };
}
/// [lo, hi] or [lo, hi).
Problem<double> in_range(double lo, double hi, bool hi_open);
/// > 0.
Problem<double> positive();

}  // namespace rn50::flag_kinds
