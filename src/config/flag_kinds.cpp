#include "config/flag_kinds.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace rn50::flag_kinds {

std::string key_of(const std::string& name) {
  std::string k = name.rfind("--", 0) == 0 ? name.substr(2) : name;
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const std::string& one_value(const std::string& flag, const std::vector<std::string>& v) {
  RN50_CHECK(v.size() == 1, "{}: expected one value, got {}", flag, v.size());
  return v[0];
}

double parse_real(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  RN50_CHECK(!text.empty() && end == text.c_str() + text.size(), "{} '{}': expected a number",
             flag, text);
  return v;
}

bool is_bool_word(const std::string& text) {
  const std::string t = lower(text);
  return t == "true" || t == "1" || t == "yes" || t == "on" || t == "false" || t == "0" ||
         t == "no" || t == "off";
}

bool parse_bool(const std::string& flag, const std::string& text) {
  const std::string t = lower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  RN50_FAIL("{}={}: expected true or false (True/False as DLE writes them, or 1/0)", flag, text);
}

std::vector<std::string> split_list(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const std::string& s : values) {
    std::stringstream ss(s);
    for (std::string e; std::getline(ss, e, ',');)
      if (!e.empty()) items.push_back(e);
  }
  return items;
}

std::vector<double> parse_reals(const std::string& flag, const std::vector<std::string>& values) {
  std::vector<double> x;
  for (const std::string& e : split_list(values)) x.push_back(parse_real(flag, e));
  return x;
}

FlagSpec base(const char* name, const char* value_name, const char* help, unsigned commands) {
  FlagSpec f;
  f.name = name;
  f.key = key_of(name);
  f.value_name = value_name;
  f.help = help;
  f.commands = commands;
  return f;
}

FlagSpec real(const char* name, double Config::*m, const char* help, unsigned commands,
              Problem<double> problem) {
  FlagSpec f = base(name, "FLOAT", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
    c.*m = parse_real(n, one_value(n, v));
  };
  f.check = [m, n = f.name, problem](const Config& c) {
    const double v = c.*m;
    RN50_CHECK(std::isfinite(v), "{} {}: must be a finite number", n, v);
    const std::string p = problem ? problem(v) : std::string();
    RN50_CHECK(p.empty(), "{} {}: {}", n, v, p);
  };
  return f;
}

FlagSpec text(const char* name, std::string Config::*m, const char* help, unsigned commands,
              Problem<std::string> problem) {
  FlagSpec f = base(name, "TEXT", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
    c.*m = one_value(n, v);
  };
  f.check = [m, n = f.name, problem](const Config& c) {
    if (!problem) return;
    const std::string p = problem(c.*m);
    RN50_CHECK(p.empty(), "{} '{}': {}", n, c.*m, p);
  };
  return f;
}

FlagSpec switch_(const char* name, bool Config::*m, const char* help, unsigned commands) {
  FlagSpec f = base(name, "", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
    c.*m = v.empty() ? true : parse_bool(n, v.back());
  };
  f.check = [](const Config&) {};
  return f;
}

FlagSpec boolean(const char* name, bool Config::*m, const char* help, unsigned commands) {
  FlagSpec f = base(name, "true|false", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
    c.*m = parse_bool(n, one_value(n, v));
  };
  f.check = [](const Config&) {};
  return f;
}

namespace {
/// The choice `v` matches in any case, or empty.
std::string matching_choice(const std::string& v, const std::vector<std::string>& choices) {
  for (const std::string& c : choices)
    if (lower(c) == lower(v)) return c;
  return {};
}
}  // namespace

FlagSpec choice(const char* name, std::string Config::*m, std::vector<std::string> choices,
                const char* help, unsigned commands) {
  std::string names = fmt::format("{}", fmt::join(choices, "|"));
  FlagSpec f = base(name, "", help, commands);
  f.value_name = names;
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name, choices, names](Config& c, const std::vector<std::string>& v) {
    const std::string& t = one_value(n, v);
    const std::string canon = matching_choice(t, choices);
    RN50_CHECK(!canon.empty(), "{} '{}': expected one of {}", n, t, names);
    c.*m = canon;
  };
  f.check = [m, n = f.name, choices, names](const Config& c) {
    RN50_CHECK(!matching_choice(c.*m, choices).empty(), "{} '{}': expected one of {}", n, c.*m,
               names);
  };
  return f;
}

FlagSpec text_list(const char* name, std::vector<std::string> Config::*m,
                   std::vector<std::string> choices, const char* help, unsigned commands) {
  FlagSpec f = base(name, "TEXT ...", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name, choices](Config& c, const std::vector<std::string>& v) {
    std::vector<std::string> items = split_list(v);
    if (!choices.empty())
      for (std::string& e : items) {
        const std::string canon = matching_choice(e, choices);
        RN50_CHECK(!canon.empty(), "{} '{}': expected {}", n, e, fmt::join(choices, " or "));
        e = canon;
      }
    c.*m = std::move(items);
  };
  f.check = [](const Config&) {};
  return f;
}

FlagSpec int_list(const char* name, std::vector<int> Config::*m, int min, const char* help,
                  unsigned commands) {
  FlagSpec f = base(name, "INT ...", help, commands);
  f.get = [m](const Config& c) { return json(c.*m); };
  f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
    std::vector<int> x;
    for (const std::string& e : split_list(v)) x.push_back(parse_integer<int>(n, e));
    c.*m = std::move(x);
  };
  f.check = [m, n = f.name, min](const Config& c) {
    RN50_CHECK(!(c.*m).empty(), "{}: give at least one value", n);
    for (int x : c.*m) RN50_CHECK(x >= min, "{}: {} is not >= {}", n, x, min);
  };
  return f;
}

FlagSpec alias(FlagSpec spec, const char* of) {
  spec.alias_of = of;
  return spec;
}

Problem<double> in_range(double lo, double hi, bool hi_open) {
  return [=](const double& v) {
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return std::string();
    return fmt::format("must be in [{}, {}{}", lo, hi, hi_open ? ")" : "]");
  };
}

Problem<double> positive() {
  return [](const double& v) {
    return v > 0 ? std::string() : std::string("must be a number > 0");
  };
}

}  // namespace rn50::flag_kinds
