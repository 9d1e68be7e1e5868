// rn50: the commands and the lookups, checks and views of the flag table (config/flags.h; the
// entries: config/flag_table.cpp).
#include "config/flags.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/flag_kinds.h"
#include "core/check.h"

namespace rn50 {

using json = nlohmann::ordered_json;

const std::vector<Command>& all_commands() {
  static const std::vector<Command> all{
      kTrain,      kEval,      kPredict, kExport, kCheckData,   kBenchLoader,   kBenchTrain,
      kBenchInfer, kBenchPeak, kReport,  kServe,  kConvertData, kConvertWeights};
  return all;
}

const char* command_name(Command c) {
  switch (c) {
    case kTrain: return "train";
    case kEval: return "eval";
    case kPredict: return "predict";
    case kExport: return "export";
    case kCheckData: return "check-data";
    case kBenchLoader: return "bench loader";
    case kBenchTrain: return "bench train";
    case kBenchInfer: return "bench infer";
    case kBenchPeak: return "bench peak";
    case kReport: return "report";
    case kServe: return "serve";
    case kConvertData: return "convert-data";
    case kConvertWeights: return "convert-weights";
  }
  return "?";
}

std::string command_names(unsigned commands) {
  std::vector<std::string> names;
  for (Command c : all_commands())
    if (commands & c) names.push_back(command_name(c));
  return fmt::format("{}", fmt::join(names, ", "));
}

Config default_config(Command c) {
  Config cfg;
  switch (c) {
    case kEval:
      cfg.run_scope = RunScope::eval_only;
      break;
    case kBenchTrain:
      cfg.benchmark = true;
      cfg.data = DataKind::synthetic;
      cfg.benchmark_steps = 20;
      cfg.benchmark_warmup_steps = 5;
      cfg.report_file = "bench_train.json";
      break;
    case kBenchInfer:
      cfg.data = DataKind::synthetic;
      cfg.benchmark_steps = 20;
      cfg.benchmark_warmup_steps = 3;
      cfg.batch_sizes = {1, 32};
      break;
    case kBenchPeak:
      cfg.benchmark_steps = 10;
      cfg.benchmark_warmup_steps = 2;
      break;
    case kTrain:
    case kPredict:
    case kExport:
    case kCheckData:
    case kBenchLoader:
    case kReport:
    case kServe:
    case kConvertData:
    case kConvertWeights:
      break;
  }
  return cfg;
}

bool FlagSpec::is_list() const {
  return value_name.size() > 4 && value_name.compare(value_name.size() - 4, 4, " ...") == 0;
}

std::string FlagSpec::help_text(Command command) const {
  const json d = get(default_config(command));
  std::string dv = d.is_string() ? d.get<std::string>() : d.dump();
  if (dv.empty() || dv == "[]") dv = "none";
  return fmt::format("{} (default: {})", help, dv);
}

const FlagSpec* find_flag(const std::string& name, unsigned command) {
  for (const FlagSpec& f : flag_table())
    if (f.name == name && (command == 0 || (f.commands & command))) return &f;
  return nullptr;
}

const FlagSpec& flag(const std::string& name, unsigned command) {
  const FlagSpec* f = find_flag(name, command);
  RN50_CHECK(f != nullptr, "no flag named '{}'{}", name,
             command ? fmt::format(" in rn50 {}", command_names(command)) : std::string());
  return *f;
}

namespace {
/// Levenshtein distance.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closest_flag(const std::string& name, Command command) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const FlagSpec& f : flag_table()) {
    if (!(f.commands & command) || f.positional) continue;
    const size_t d = edit_distance(flag_kinds::lower(name), f.name);
    if (d < best_d) {
      best_d = d;
      best = f.name;
    }
  }
  return best;
}

void set_flag(Config& cfg, const FlagSpec& flag, const std::vector<std::string>& values) {
  flag.set(cfg, values);
  cfg.given.insert(flag.alias_of.empty() ? flag.name : flag.alias_of);
}

void finish_config(Config& cfg, Command command) {
  if ((command == kBenchTrain || command == kBenchInfer) && cfg.given.count("--image-root") &&
      !cfg.given.count("--data"))
    cfg.data = DataKind::imagefolder;
}

void check_flags(const Config& cfg, unsigned commands) {
  for (const FlagSpec& f : flag_table())
    if (f.commands & commands) f.check(cfg);
}

json config_to_json(const Config& cfg) {
  json j;
  for (const FlagSpec& f : flag_table())
    if ((f.commands & kTrainAndEval) && f.alias_of.empty()) j[f.key] = f.get(cfg);
  j["world_size"] = cfg.world_size;
  j["version"] = kRn50Version;
  return j;
}

std::vector<ReportField> config_flag_fields() {
  std::vector<ReportField> out;
  for (const FlagSpec& f : flag_table()) {
    if (!(f.commands & kTrainAndEval) || !f.alias_of.empty()) continue;
    FieldType t = FieldType::string;
    if (f.is_switch() || f.value_name == "true|false") t = FieldType::boolean;
    else if (f.is_list()) t = FieldType::list;
    else if (f.value_name == "INT") t = FieldType::integer;
    else if (f.value_name == "FLOAT") t = FieldType::number;
    out.push_back({f.key, t, true, false, f.name + ": " + f.help});
  }
  return out;
}

std::string config_table(const Config& cfg, Command command) {
  size_t w = 0;
  for (const FlagSpec& f : flag_table())
    if (f.commands & command) w = std::max(w, f.name.size());
  std::string out = fmt::format("{:<{}}  {:<10}  {}\n", "flag", w, "source", "value");
  for (const FlagSpec& f : flag_table()) {
    if (!(f.commands & command) || !f.alias_of.empty()) continue;
    const json v = f.get(cfg);
    out += fmt::format("{:<{}}  {:<10}  {}\n", f.name, w,
                       cfg.given.count(f.name)         ? "set"
                       : cfg.from_config.count(f.name) ? "config"
                                                       : "default",
                       v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

const char* config_file_help() {
  return "read flags from FILE first: TOML/INI (batch-size = 256, amp = true, "
         "lr-decay-epochs = [30, 60]; configs/ has DLE's recipes), or a report / "
         "state.json to rerun its configuration; flags given here override it";
}

std::string flags_markdown() {
  std::string md =
      "# rn50 flags\n\n"
      "Generated from the flag table (src/config/flag_table.cpp) at build time; do not edit.\n"
      "Each command takes the flags listed under it; `rn50 COMMAND --help` lists the same ones,\n"
      "and `-h`/`--help`.\n"
      "Booleans take DLE's `True`/`False` (or true/false/1/0); choices are matched in any case.\n";
  for (Command c : all_commands()) {
    md += fmt::format("\n## rn50 {}\n\n| flag | value | default | meaning |\n|---|---|---|---|\n",
                      command_name(c));
    if (c & kConfigFileCommands)
      md += fmt::format("| `--config` | FILE | none | {} |\n", config_file_help());
    for (const FlagSpec& f : flag_table()) {
      if (!(f.commands & c)) continue;
      const json d = f.get(default_config(c));
      std::string dv = d.is_string() ? d.get<std::string>() : d.dump();
      if (dv.empty() || dv == "[]") dv = "none";
      std::string help = f.help;
      if (!f.alias_of.empty()) help += fmt::format(" (an alias of `{}`)", f.alias_of);
      for (char& ch : help)
        if (ch == '|') ch = '/';
      std::string value = f.is_switch() ? std::string("switch") : f.value_name;
      for (char& ch : value)
        if (ch == '|') ch = '/';
      md += fmt::format("| `{}` | {} | {} | {} |\n", f.name, value,
                        f.alias_of.empty() ? dv : std::string("-"), help);
    }
  }
  return md;
}

}  // namespace rn50
