// rn50 train --config FILE: flags from a file (train/flags.h, apply_config_file).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>

#include "core/check.h"
#include "train/flags.h"

namespace rn50 {
namespace {

using json = nlohmann::json;

/// The flag whose config key or name (without "--") is `key` ('-' and '_' alike).
const FlagSpec* flag_for_key(std::string key) {
  std::replace(key.begin(), key.end(), '-', '_');
  for (const FlagSpec& f : train_flags())
    if (f.key == key) return &f;
  return nullptr;
}

/// JSON value -> the flag's text values (lists element by element).
std::vector<std::string> json_inputs(const json& v) {
  std::vector<std::string> out;
  auto one = [](const json& x) {
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

/// Keys a report's config line or state.json carries besides the flags (resolved values).
bool is_run_fact(const std::string& key) {
  static const std::set<std::string> facts{"type",
                                           "schema_version",
                                           "world_size",
                                           "version",
                                           "classes",
                                           "global_batch_size",
                                           "rank",
                                           "launcher",
                                           "communicator",
                                           "base_lr",
                                           "steps_per_epoch",
                                           "backend",
                                           "resolved_device",
                                           "compute_dtype",
                                           "train.samples",
                                           "val.samples",
                                           "params",
                                           "resumed_from",
                                           "start_epoch",
                                           "start_step"};
  return facts.count(key) > 0;
}

}  // namespace

std::vector<std::string> apply_config_file(TrainConfig& cfg, const std::string& path,
                                           unsigned command) {
  std::ifstream f(path);
  RN50_CHECK(f.good(), "--config '{}': cannot open", path);
  std::string first;
  for (char ch; f.get(ch);)
    if (!std::isspace(static_cast<unsigned char>(ch))) {
      first = ch;
      break;
    }
  f.close();
  // (flag, its text values) in file order.
  std::vector<std::pair<const FlagSpec*, std::vector<std::string>>> items;
  auto add = [&](const std::string& key, std::vector<std::string> inputs,
                 const std::string& where) {
    const FlagSpec* flag = flag_for_key(key);
    RN50_CHECK(flag != nullptr,
               "--config '{}': {}'{}' is not a flag of rn50 train (see rn50 train "
               "--help; keys are flag names without the dashes)",
               path, where, key);
    items.emplace_back(flag, std::move(inputs));
  };
  if (first == "{") {
    // JSON: a checkpoint's state.json (its "config"), a JSON object of flags, or a report
    // (JSON lines: its config line).
    json config;
    std::ifstream whole(path);
    const json doc = json::parse(whole, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object()) {
      config = doc.contains("config") && doc["config"].is_object() ? doc["config"] : doc;
    } else {
      std::ifstream lines(path);
      for (std::string line; std::getline(lines, line);) {
        const json j = json::parse(line, nullptr, false);
        if (j.is_object() && j.value("type", "") == "config") {
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
      add(k, json_inputs(v), "");
    }
  } else {
    std::vector<CLI::ConfigItem> parsed;
    try {
      parsed = CLI::ConfigTOML().from_file(path);
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
    if (!(flag->commands & command)) continue;  // a training flag in a file used by rn50 eval
    RN50_CHECK(!inputs.empty() || flag->is_switch() || flag->is_list(),
               "--config '{}': '{}' has no value", path, flag->key);
    try {
      flag->set(cfg, inputs);
    } catch (const Error& e) {
      RN50_FAIL("--config '{}': {}", path, e.what());
    }
    cfg.from_config.insert(flag->name);
    names.push_back(flag->name);
  }
  return names;
}

}  // namespace rn50
