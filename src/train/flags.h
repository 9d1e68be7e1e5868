// rn50: the table of `rn50 train` / `rn50 eval` flags. Each flag is declared once, in flags.cpp
// (name, value kind, help, the commands that take it, how it is read from and written to
// TrainConfig, and its value check); from that one entry come
//   * the command line (tools/rn50.cpp registers every entry with CLI11, the help text with its
//     default appended),
//   * parsing of the flag's text into TrainConfig (set_flag: errors name the flag and the value),
//   * its value check (validate() in config.cpp runs every entry's check),
//   * the resolved configuration printed by --show-config (config_table), and
//   * the "config" line of the report and state.json's "config" (config_to_json).
// A new flag: a TrainConfig field (include/rn50/train.h, with its documentation) and one entry
// in the table; combinations in which it has no effect are refused in validate().
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/report.h"
#include "rn50/train.h"

namespace rn50 {

/// The commands that take a flag (bit mask).
enum FlagCommands : unsigned { kTrainCommand = 1u, kEvalCommand = 2u, kTrainAndEval = 3u };

struct FlagSpec {
  std::string name;  ///< "--epochs"
  std::string key;   ///< "epochs": the key in config JSON (name without dashes, '-' -> '_')
  /// What the flag takes, as shown in --help: "INT", "FLOAT", "TEXT", "INT ..." (a list), a
  /// choice "A|B|C", or "" for a switch (given alone = true; --flag=false also accepted).
  std::string value_name;
  std::string help;  ///< one line; the default is appended by help_text()
  unsigned commands = kTrainAndEval;
  bool is_switch() const { return value_name.empty(); }
  bool is_list() const;
  /// The flag's current value in `cfg`, as JSON (enums by name).
  std::function<nlohmann::ordered_json(const TrainConfig&)> get;
  /// Parses the flag's text values into `cfg` (one value, or several for a list); throws
  /// rn50::Error naming the flag and the text when it is not of the flag's kind.
  std::function<void(TrainConfig&, const std::vector<std::string>&)> set;
  /// Checks the value in `cfg` (range, choice); throws rn50::Error naming the flag and the value.
  std::function<void(const TrainConfig&)> check;

  /// help + " (default: <value>)".
  std::string help_text() const;
};

/// Every flag of `rn50 train` and `rn50 eval`, in --help order.
const std::vector<FlagSpec>& train_flags();

/// The entry named `name` ("--epochs"); throws rn50::Error when there is none.
const FlagSpec& find_flag(const std::string& name);

/// Parses `values` into cfg (FlagSpec::set) and records the flag in cfg.given. Throws
/// rn50::Error naming the flag.
void set_flag(TrainConfig& cfg, const FlagSpec& flag, const std::vector<std::string>& values);

/// Every flag's value keyed by FlagSpec::key, then "world_size" and "version": the report's
/// config line and state.json's "config".
nlohmann::ordered_json config_to_json(const TrainConfig& cfg);

/// The flags as fields of the report's config line (keys, JSON types from the value kind: INT
/// integer, FLOAT number, "INT ..." list, switch boolean, TEXT and choices string; help as doc).
std::vector<ReportField> config_flag_fields();

/// rn50 train/eval --config FILE: sets the flags the file names in `cfg` (not recorded in
/// cfg.given, so a full configuration fed back is not refused for flags without effect; flags
/// on the command line are applied after it and win). FILE is TOML or INI through CLI11's
/// parser (`batch-size = 256`, `lr-decay-epochs = [30, 60, 80]`, `amp = true`; keys are flag
/// names without the dashes, '-' or '_'; optionally under [train] / [eval]), or JSON: a report
/// (its config line), a checkpoint's state.json ("config"), or an object of flags; the run
/// facts a report adds (world_size, version, base_lr, ...) are skipped. Training flags in a
/// file read by `rn50 eval` are skipped. Returns the flag names set, in file order. Throws
/// rn50::Error naming the file and the key for an unknown key, a bad value (the flag's own
/// message) or an unreadable file.
std::vector<std::string> apply_config_file(TrainConfig& cfg, const std::string& path,
                                           unsigned command);

/// --show-config: the resolved configuration as a text table, one row per flag that `command`
/// takes (kTrainCommand or kEvalCommand): flag, value, and "set" (given on the command line) or
/// "default".
std::string config_table(const TrainConfig& cfg, unsigned command);

}  // namespace rn50
