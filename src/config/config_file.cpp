// rn50 train --config FILE: flags from a file (config/flags.h, apply_config_file).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>

#include "core/check.h"
#include "core/fileio.h"
#include "core/json_value.h"
#include "core/report.h"
#include "config/flags.h"

namespace rn50 {
namespace {

using json = nlohmann::json;

/// The flag whose config key or name (without "--") is `key` ('-' and '_' alike): one that
/// `command` takes, else any (0: any).
const FlagSpec* flag_for_key(std::string key, unsigned command = 0) {
  std::replace(key.begin(), key.end(), '-', '_');
  const FlagSpec* any = nullptr;
  for (const FlagSpec& f : flag_table()) {
    if (f.key != key || f.positional) continue;
    if (command == 0 || (f.commands & command)) return &f;
    if (!any) any = &f;
  }
  return any;
}

/// JSON value -> the flag's text values (lists element by element). `where` names the file and
/// key in the error for a value no flag takes (an object, a list inside a list).
std::vector<std::string> json_inputs(const json& v, const std::string& where) {
  std::vector<std::string> out;
  auto one = [&](const json& x) {
    RN50_CHECK(x.is_primitive() && !x.is_null(),
               "{}: expected a string, number, true/false or a list of them, got {}", where,
               x.dump().substr(0, 80));
    if (x.is_string()) return x.get<std::string>();
    if (x.is_boolean()) return std::string(x.get<bool>() ? "true" : "false");
    if (x.is_number_integer()) return std::to_string(x.get<int64_t>());
    if (x.is_number_unsigned()) return std::to_string(x.get<uint64_t>());
    return fmt::format("{}", x.get<double>());  // shortest round-trip form
  };
  if (v.is_array()) {
    for (const json& x : v) out.push_back(one(x));
  } else if (!v.is_null()) {
    out.push_back(one(v));
  }
  return out;
}

/// A key a report's config line or state.json carries besides the flags: the config record's
/// own fields (docs/report-schema.md) that are not also flags (num_of_class is both).
bool is_run_fact(const std::string& key) {
  return key == "type" || key == "schema_version" ||
         (report_record_type("config").find(key) != nullptr && flag_for_key(key) == nullptr);
}

}  // namespace

std::vector<std::string> apply_config_file(Config& cfg, const std::string& path,
                                           unsigned command) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    RN50_FAIL("--config: {}", e.what());
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  // (flag, its text values) in file order.
  std::vector<std::pair<const FlagSpec*, std::vector<std::string>>> items;
  auto add = [&](const std::string& key, std::vector<std::string> inputs,
                 const std::string& where) {
    const FlagSpec* flag = flag_for_key(key, command);
    RN50_CHECK(flag != nullptr,
               "--config '{}': {}'{}' is not a flag (see rn50 train --help; keys are flag names "
               "without the dashes)",
               path, where, key);
    items.emplace_back(flag, std::move(inputs));
  };
  if (first != std::string::npos && text[first] == '{') {
    // JSON: a checkpoint's state.json (its "config"), a JSON object of flags, or a report
    // (JSON lines: its config line).
    json config;
    const json doc = parse_json_limited(text, fmt::format("--config '{}'", path),
                                        /*allow_exceptions=*/false);
    if (doc.is_object()) {
      config = doc.contains("config") && doc["config"].is_object() ? doc["config"] : doc;
    } else {
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        const json j = parse_json_limited(line, fmt::format("--config '{}'", path), false);
        if (j.is_object() && j.contains("type") && j["type"] == "config") {
          config = j;
          break;
        }
      }
    }
    RN50_CHECK(config.is_object(),
               "--config '{}': no configuration in it (expected TOML or INI, a report whose "
               "first line is its config line, a checkpoint's state.json, or a JSON object of "
               "flags)",
               path);
    for (const auto& [k, v] : config.items()) {
      if (is_run_fact(k)) continue;
      add(k, json_inputs(v, fmt::format("--config '{}': '{}'", path, k)), "");
    }
  } else {
    std::vector<CLI::ConfigItem> parsed;
    try {
      std::istringstream in(text);
      parsed = CLI::ConfigTOML().from_config(in);
    } catch (const CLI::Error& e) {
      RN50_FAIL("--config '{}': {}", path, e.what());
    }
    for (const CLI::ConfigItem& it : parsed) {
      if (it.name == "++" || it.name == "--") continue;  // section markers
      RN50_CHECK(
          it.parents.empty() ||
              (it.parents.size() == 1 && (it.parents[0] == "train" || it.parents[0] == "eval")),
          "--config '{}': section [{}] is not [train] or [eval]", path, fmt::join(it.parents, "."));
      add(it.name, it.inputs, it.parents.empty() ? "" : "[" + it.parents[0] + "] ");
    }
  }
  std::vector<std::string> names;
  for (auto& [flag, inputs] : items) {
    if (!(flag->commands & command)) continue;  // e.g. a training flag in a file rn50 eval reads
    RN50_CHECK(!inputs.empty() || flag->is_switch() || flag->is_list(),
               "--config '{}': '{}' has no value", path, flag->key);
    try {
      flag->set(cfg, inputs);
    } catch (const Error& e) {
      RN50_FAIL("--config '{}': {}", path, e.what());
    }
    cfg.from_config.insert(flag->alias_of.empty() ? flag->name : flag->alias_of);
    names.push_back(flag->name);
  }
  return names;
}

}  // namespace rn50
