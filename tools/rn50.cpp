// rn50: the command line.
//   rn50 train | eval | predict | export | check-data | bench loader|train|infer|peak | report
//        | serve | convert-data | convert-weights [flags]
// (rn50::all_commands(), src/config/flags.cpp: the one list of commands; this file dispatches
// on it and names it when a command is unknown). Every command's flags come from one table
// (src/config/flags.h): names and spellings follow
// NVIDIA DeepLearningExamples (PaddlePaddle RN50 v1.5 train.py where it has them), values are
// read as DLE writes them (True/False, Cosine, NHWC, FP32), their meanings are documented on
// Config (include/rn50/config.h) and listed per command in docs/flags.md. This file registers
// the table with CLI11, catches flags the command does not take (naming who takes them, or the
// closest known flag), and hands the resolved Config to the command (tools/commands.cpp).
// Exit codes (tests/test_cli_flags.cpp, CliFlags.ExitCodes):
//   0  done (--help and --version too);
//   1  train, eval or predict failed (the message on stderr), train's and eval's refused values
//      included: they check values inside the run (--batch-size 0); check-data found a problem
//      in the dataset; convert-data skipped a sample it could not read;
//   2  refused before the command ran: an unknown command, an unknown flag or another
//      command's, a value that does not parse (--epochs abc), a --config file that cannot be
//      read; for the other commands also a refused value (bench infer --batch-sizes 0) and an
//      error while they ran (export from a missing checkpoint): main's catch below;
//   CLI11's codes (>= 100) for the syntax CLI11 refuses itself: 106 no command, 109 an
//   unexpected argument, 114 a flag without its value.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/cpu_info.h"
#include "commands.h"
#include "config/flag_kinds.h"
#include "core/check.h"
#include "rn50/parallel.h"
#include "rn50/config.h"

namespace {

using rn50::Command;
using rn50::FlagSpec;

/// One command's flags as CLI11 collects them: the text of each table entry it takes.
struct CommandFlags {
  Command command;
  CLI::App* app = nullptr;
  std::string config_file;  ///< --config FILE (train, eval, bench train)
  std::map<const FlagSpec*, std::vector<std::string>> text;
  std::map<const FlagSpec*, CLI::Option*> option;
};

bool takes_config_file(Command c) { return (c & rn50::kConfigFileCommands) != 0; }

/// Every command, from the one list: "train, eval, ..., convert-data or convert-weights".
std::string command_list() {
  std::string out;
  const std::vector<Command>& all = rn50::all_commands();
  for (size_t i = 0; i < all.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") +
           rn50::command_name(all[i]);
  return out;
}

/// Registers the table's entries `cf.command` takes with CLI11 (help with the command's
/// default).
void add_flags(CommandFlags& cf) {
  if (takes_config_file(cf.command))
    cf.app->add_option("--config", cf.config_file, rn50::config_file_help())->type_name("FILE");
  for (const FlagSpec& f : rn50::flag_table()) {
    if (!(f.commands & cf.command)) continue;
    std::vector<std::string>& v = cf.text[&f];
    CLI::Option* o;
    const std::string type =
        f.is_list() ? f.value_name.substr(0, f.value_name.size() - 4) : f.value_name;
    if (f.positional) {
      o = cf.app->add_option(f.name, v, f.help)->type_name(type);
    } else if (f.is_switch()) {
      o = cf.app->add_flag(f.name, v, f.help_text(cf.command));  // "true", or --flag=VALUE's
    } else {
      // CLI11 appends " ..." to list options itself.
      o = cf.app->add_option(f.name, v, f.help_text(cf.command))->type_name(type);
      if (!f.is_list())
        o->expected(1)->allow_extra_args(false)->multi_option_policy(
            CLI::MultiOptionPolicy::TakeLast);
    }
    cf.option[&f] = o;
  }
}

/// The command named by the words after the program name, or 0.
unsigned command_of(int argc, char** argv, int* words) {
  if (argc < 2) return 0;
  const std::string a = argv[1];
  const std::string b = argc > 2 ? argv[2] : "";
  for (Command c : rn50::all_commands()) {
    const std::string name = rn50::command_name(c);
    if (name == a) {
      *words = 1;
      return c;
    }
    if (name == "bench " + b && a == "bench") {
      *words = 2;
      return c;
    }
  }
  return 0;
}

/// The arguments after the command's words, checked against the table before CLI11 sees them:
/// a flag the command does not take is refused naming the commands that take it, an unknown
/// one with the closest known flag; a switch followed by a boolean word (DLE's `--amp True`)
/// becomes `--amp=True`. Throws rn50::Error.
std::vector<std::string> normalised_arguments(int argc, char** argv, int first, Command cmd) {
  const std::string name = rn50::command_name(cmd);
  std::vector<std::string> out(argv, argv + first);
  bool positionals = false;
  for (const FlagSpec& f : rn50::flag_table()) positionals |= f.positional && (f.commands & cmd);
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      out.insert(out.end(), argv + i, argv + argc);
      break;
    }
    if (a.rfind("--", 0) != 0 || a.size() <= 2) {
      out.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string flag = a.substr(0, eq);
    if (flag == "--help" || (flag == "--config" && takes_config_file(cmd))) {
      out.push_back(a);
      continue;
    }
    const FlagSpec* f = rn50::find_flag(flag, cmd);
    if (!f || f->positional) {
      const FlagSpec* other = rn50::find_flag(flag);
      RN50_CHECK(!other || other->positional,
                 "{}: rn50 {} does not take it ({}); see rn50 {} --help", flag, name,
                 cmd == rn50::kEval && (other->commands & rn50::kTrain)
                     ? std::string("it is a training flag: evaluation trains nothing")
                     : "a flag of rn50 " + rn50::command_names(other->commands),
                 name);
      const std::string near = rn50::closest_flag(flag, cmd);
      RN50_FAIL("unknown flag {}{} (rn50 {} --help lists its flags)", flag,
                near.empty() ? std::string() : "; did you mean " + near + "?", name);
    }
    // A word after a switch is its value: a boolean word always, any word where the command
    // takes no positional arguments (so that `--amp Maybe` is refused naming --amp).
    if (f->is_switch() && eq == std::string::npos && i + 1 < argc && argv[i + 1][0] != '-' &&
        (rn50::flag_kinds::is_bool_word(argv[i + 1]) || !positionals)) {
      out.push_back(a + "=" + argv[++i]);
      continue;
    }
    out.push_back(a);
  }
  return out;
}

/// The command's Config: its defaults, then --config FILE, then the flags given.
rn50::Config resolve(const CommandFlags& cf) {
  rn50::Config c = rn50::default_config(cf.command);
  if (!cf.config_file.empty()) rn50::apply_config_file(c, cf.config_file, cf.command);
  for (const auto& [f, o] : cf.option)
    if (o->count() > 0) rn50::set_flag(c, *f, cf.text.at(f));
  rn50::finish_config(c, cf.command);
  // Rerunning a report's configuration would truncate that very report: refuse instead.
  std::error_code ec;
  RN50_CHECK(cf.config_file.empty() || c.report_file.empty() ||
                 !std::filesystem::equivalent(cf.config_file, c.report_file, ec),
             "--config '{}' is also this run's --report-file: the run would overwrite the report "
             "it was configured from; pass --report-file with a new name",
             cf.config_file);
  return c;
}

const char* description(Command c) {
  switch (c) {
    case rn50::kTrain: return "train (and evaluate) a ResNet with DLE's RN50 v1.5 recipe";
    case rn50::kEval: return "evaluate on <image-root>/val (= train --run-scope eval_only)";
    case rn50::kPredict: return "classify image files (top-k per image)";
    case rn50::kExport:
      return "fold a trained model (BatchNorm into the convolutions) and write it for "
             "inference: model.json + model.safetensors (read by rn50 bench infer --model, "
             "predict --model) and model.onnx (opset 13, dynamic batch)";
    case rn50::kCheckData:
      return "validate a dataset (ImageFolder, file lists, WebDataset or TFRecord shards): "
             "train and val with the same class set, no empty class, every image decodable, "
             "per-shard counts and damaged records; prints the class list";
    case rn50::kBenchLoader:
      return "time the input pipeline alone on any data format (reports loader.ips)";
    case rn50::kBenchTrain:
      return "training throughput sweep, DLPerf's method: every (precision, batch size) run "
             "--repeats times as rn50 train --benchmark; median/min/max images/s, step-time "
             "percentiles, data-wait share, peak memory and the environment, into one JSON "
             "(rn50 report reads it). Under mpirun -np N every rank runs it (bench/scaling.sh)";
    case rn50::kBenchInfer:
      return "inference throughput and latency (avg, p50, p90, p95, p99) per batch size, with "
             "the inference engine (BN folded, fused post-ops); GFLOP/s achieved and, with "
             "--peak-file, its share of the measured peak; --profile: per-op times";
    case rn50::kBenchPeak:
      return "the machine's own limit: oneDNN's large matmul and 3x3 convolution on every core "
             "in fp32, bf16 and int8 (u8 x s8), GFLOP/s (GOP/s) per op and precision, and the "
             "memory bandwidth (STREAM copy and triad, GB/s); its "
             "--report-file is the --peak-file of bench train, bench infer and train "
             "--benchmark";
    case rn50::kServe:
      return "serve exported models over KServe's Open Inference Protocol v2 (Triton's REST "
             "API) with dynamic batching, Prometheus metrics (/metrics) and a web page (/)";
    case rn50::kConvertData:
      return "write a dataset (ImageFolder, file lists or shards) as WebDataset tar shards or "
             "TFRecord shards with DALI index files: train and val, each shard atomically, plus "
             "manifest.json (classes, counts, shards)";
    case rn50::kConvertWeights:
      return "convert a torchvision .pth, a DLE PyTorch checkpoint or a DLE Paddle .pdparams "
             "to a safetensors file with torchvision's keys (for --from-pretrained-params); "
             "runs tools/convert_weights.py with Python's pickle";
    case rn50::kReport:
      return "tables from result files: throughput (median, spread), speedup over one device "
             "and scaling efficiency, precision speedup, time to train 90 ImageNet epochs, "
             "training curves, inference latency, GFLOP/s and % of the measured peak (bench "
             "peak lines), per-op profiles (--profile records); plots with --plot";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rn50: ResNet-50 v1.5 training (NVIDIA DeepLearningExamples recipe), evaluation, "
               "benchmarks, export and prediction"};
  app.require_subcommand(1);
  // The version, and the instruction set this CPU gives the kernels (core/cpu_info.h).
  const rn50::CpuInfo& cpu = rn50::cpu_info();
  app.set_version_flag(
      "--version", std::string("rn50 ") + rn50::kRn50Version + " (CPU kernels: " +
                       rn50::isa_level_name(cpu.level) +
                       (cpu.cap.empty() ? std::string() : ", capped by " + cpu.cap + ", detected " +
                                                              rn50::isa_level_name(cpu.detected)) +
                       ")");
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: loader, train, infer, peak");
  bench->require_subcommand(1);
  std::vector<CommandFlags> commands;
  commands.reserve(rn50::all_commands().size());
  for (Command c : rn50::all_commands()) {
    CommandFlags& cf = commands.emplace_back();  // CLI11 binds to its members: never moved
    cf.command = c;
    const std::string name = rn50::command_name(c);
    cf.app = name.rfind("bench ", 0) == 0 ? bench->add_subcommand(name.substr(6), description(c))
                                          : app.add_subcommand(name, description(c));
    add_flags(cf);
  }

  int words = 0;
  const unsigned cmd = command_of(argc, argv, &words);
  // An unknown command (`rn50 bench X` too: CLI11 would say that a subcommand is required).
  const bool bench_word = argc > 1 && std::string(argv[1]) == "bench";
  if (cmd == 0 && argc > 1 && argv[1][0] != '-' &&
      (!bench_word || (argc > 2 && argv[2][0] != '-'))) {
    const std::string given = bench_word ? std::string("bench ") + argv[2] : argv[1];
    std::cerr << "error: unknown command '" << given << "' (expected " << command_list()
              << "; see " << argv[0] << " --help)\n";
    return 2;
  }
  std::vector<std::string> args(argv, argv + argc);
  if (cmd != 0) {
    try {
      args = normalised_arguments(argc, argv, 1 + words, static_cast<Command>(cmd));
    } catch (const rn50::Error& e) {
      std::cerr << "error: " << rn50::error_text(e) << "\n";
      return 2;
    }
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  CLI11_PARSE(app, static_cast<int>(cargs.size()), cargs.data());

  for (const CommandFlags& cf : commands) {
    if (!*cf.app) continue;
    try {
      return rn50::cli::run(cf.command, resolve(cf));
    } catch (const rn50::Error& e) {
      std::cerr << "error: " << rn50::error_text(e) << "\n";
      // One rank of a job: stop the others now (they may wait in a collective for this one).
      rn50::abort_job_if_distributed(2);
      return 2;
    }
  }
  return 0;
}
