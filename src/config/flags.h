// rn50: the one table of flags of every command. Each flag is declared once, in
// config/flag_table.cpp (name, value kind, help, the commands that take it, how it is read from
// and written to Config, and its value check); from that one entry come
//   * the command line of every command (tools/rn50.cpp registers the entries of each command
//     with CLI11, the help text with the command's default appended; an unknown flag gets the
//     closest known one suggested, a flag of another command is refused naming who takes it),
//   * parsing of the flag's text into Config (set_flag: errors name the flag and the value),
//   * its value check (check_flags; validate() runs those of train and eval),
//   * the resolved configuration printed by --show-config (config_table), and
//   * the "config" line of the report and state.json's "config" (config_to_json), and the
//     generated docs (docs/flags.md, docs/report-schema.md).
// A new flag: a Config field (include/rn50/config.h, with its documentation), one entry in the
// table, and its consumer; combinations in which it has no effect are refused in validate().
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/report.h"
#include "rn50/config.h"

namespace rn50 {

/// The commands, as bits of FlagSpec::commands.
enum Command : unsigned {
  kTrain = 1u << 0,
  kEval = 1u << 1,
  kPredict = 1u << 2,
  kExport = 1u << 3,
  kCheckData = 1u << 4,
  kBenchLoader = 1u << 5,
  kBenchTrain = 1u << 6,
  kBenchInfer = 1u << 7,
  kReport = 1u << 8,
  kServe = 1u << 9,
  kConvertData = 1u << 10,
  kConvertWeights = 1u << 11,
  kBenchPeak = 1u << 12,
};
inline constexpr unsigned kTrainAndEval = kTrain | kEval;

/// Every command, in --help order.
const std::vector<Command>& all_commands();
/// "train", "eval", "predict", "export", "check-data", "bench loader", "bench train",
/// "bench infer", "bench peak", "report", "serve", "convert-data", "convert-weights".
const char* command_name(Command c);
/// The commands of a mask, by name, comma-separated ("train, bench train").
std::string command_names(unsigned commands);

/// A command's defaults: Config{} (DLE's recipe) with the command's own: eval evaluates
/// (--run-scope eval_only); bench train benchmarks (--benchmark) on synthetic data, 20 measured
/// steps after 5 warm-up ones per run; bench infer on synthetic data, 20 timed calls after 3,
/// batch sizes 1 and 32; bench peak 10 timed calls after 2. Help texts and --show-config show
/// these.
Config default_config(Command c);

struct FlagSpec {
  std::string name;  ///< "--epochs"; a positional's name without dashes ("images")
  std::string key;   ///< "epochs": the key in config JSON (name without dashes, '-' -> '_')
  /// What the flag takes, as shown in --help: "INT", "FLOAT", "TEXT", "INT ..." (a list), a
  /// choice "A|B|C", "true|false", or "" for a switch (given alone = true; also `--flag=false`
  /// and `--flag False`).
  std::string value_name;
  std::string help;  ///< one line; the command's default is appended by help_text()
  unsigned commands = kTrainAndEval;
  bool positional = false;  ///< given without a name (predict's images, report's results)
  /// An alias (--use-synthetic of --data, --model-arch-name of --arch): DLE's spelling of
  /// another flag; set_flag records the flag it stands for in Config::given, and aliases are
  /// left out of config_to_json, config_table and the report schema.
  std::string alias_of;
  bool is_switch() const { return value_name.empty(); }
  bool is_list() const;
  /// The flag's current value in `cfg`, as JSON (enums by name).
  std::function<nlohmann::ordered_json(const Config&)> get;
  /// Parses the flag's text values into `cfg` (one value, or several for a list); throws
  /// rn50::Error naming the flag and the text when it is not of the flag's kind.
  std::function<void(Config&, const std::vector<std::string>&)> set;
  /// Checks the value in `cfg` (range, choice); throws rn50::Error naming the flag and the value.
  std::function<void(const Config&)> check;

  /// help + " (default: <value in default_config(command)>)".
  std::string help_text(Command command) const;
};

/// Every flag of every command, in --help order (a name appears twice only for disjoint
/// commands: export's and report's --format).
const std::vector<FlagSpec>& flag_table();

/// The entry named `name` ("--epochs") that `command` takes (any command when 0), or null.
const FlagSpec* find_flag(const std::string& name, unsigned command = 0);
/// The entry named `name` taken by `command` (any command when 0); throws rn50::Error when
/// there is none.
const FlagSpec& flag(const std::string& name, unsigned command = 0);

/// The flag of `command` closest to the unknown `name` (edit distance at most a third of its
/// length, at least 2), for "did you mean"; empty when none is close.
std::string closest_flag(const std::string& name, Command command);

/// Parses `values` into cfg (FlagSpec::set) and records the flag (an alias: the flag it stands
/// for) in cfg.given. Throws rn50::Error naming the flag.
void set_flag(Config& cfg, const FlagSpec& flag, const std::vector<std::string>& values);

/// After the flags are set: what depends on which were given. bench train and bench infer read
/// images when --image-root is given without --data (their default data is synthetic).
void finish_config(Config& cfg, Command command);

/// Runs the value check of every flag that the commands of the mask `commands` take (ranges,
/// choices). Throws rn50::Error naming the first bad flag and value.
void check_flags(const Config& cfg, unsigned commands);

/// Every train/eval flag's value keyed by FlagSpec::key (aliases left out), then "world_size"
/// and "version": the report's config line and state.json's "config".
nlohmann::ordered_json config_to_json(const Config& cfg);

/// The train/eval flags as fields of the report's config line (keys, JSON types from the value
/// kind: INT integer, FLOAT number, "INT ..." list, switch boolean, TEXT and choices string;
/// help as doc).
std::vector<ReportField> config_flag_fields();

/// The commands that take --config FILE, and its help text (rn50 COMMAND --help, docs/flags.md).
inline constexpr unsigned kConfigFileCommands = kTrain | kEval | kBenchTrain;
const char* config_file_help();

/// rn50 train/eval/bench train --config FILE: sets the flags the file names in `cfg` (not
/// recorded in cfg.given, so a full configuration fed back is not refused for flags without
/// effect; flags on the command line are applied after it and win). FILE is TOML or INI through
/// CLI11's parser (`batch-size = 256`, `lr-decay-epochs = [30, 60, 80]`, `amp = true`; keys are
/// flag names without the dashes, '-' or '_'; optionally under [train] / [eval]), or JSON: a
/// report (its config line), a checkpoint's state.json ("config"), or an object of flags; the
/// run facts a report adds (world_size, version, base_lr, ...) are skipped. Flags in the file
/// that `command` does not take (e.g. training flags read by `rn50 eval`) are skipped. Returns
/// the flag names set, in file order. Throws rn50::Error naming the file and the key for an
/// unknown key, a bad value (the flag's own message) or an unreadable file.
std::vector<std::string> apply_config_file(Config& cfg, const std::string& path,
                                           unsigned command);

/// --show-config: the resolved configuration as a text table, one row per flag that `command`
/// takes (aliases left out): flag, "set" (given on the command line), "config" (from --config)
/// or "default", and the value.
std::string config_table(const Config& cfg, Command command);

/// docs/flags.md: every command's flags as a Markdown table (flag, value, default, help),
/// generated from the table (tools/gen_docs.cpp writes it at build time).
std::string flags_markdown();

}  // namespace rn50
