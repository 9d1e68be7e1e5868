// The rn50 CLI: bad flags fail with a message naming the flag and value; a synthetic benchmark
// runs and writes its report lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "test_train_util.h"
#include "config/flags.h"

using namespace rn50_test;

namespace {

const std::string kCli = RN50_CLI;

/// The --show-config row of `flag` in `out` ("" when absent).
std::string config_row(const std::string& out, const std::string& flag) {
  const size_t at = out.find(flag + " ");
  return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
}

struct BadCase {
  std::string args;
  std::string expect;  // substring of the output
};

}  // namespace

TEST(CliFlags, BadValuesAreRejectedWithTheirFlag) {
  TempDir tmp("cli_flags");
  const std::string syn = " --data synthetic --arch resnet18 --crop-size 32 --batch-size 2";
  const std::vector<BadCase> cases = {
      {"train --epochs -1" + syn, "--epochs -1"},
      {"train --epochs 0" + syn, "--epochs 0"},
      {"train --data synthetic --batch-size 0", "--batch-size 0"},
      {"train --data synthetic --arch resnet51", "--arch 'resnet51'"},
      {"train --data synthetic --lr -0.1", "--lr -0.1"},
      {"train --data synthetic --momentum 1.5", "--momentum 1.5"},
      {"train --data synthetic --label-smoothing 1", "--label-smoothing 1"},
      {"train --data synthetic --warmup-epochs -1", "--warmup-epochs -1"},
      {"train --data synthetic --print-interval 0", "--print-interval 0"},
      {"train --data synthetic --crop-size 0", "--crop-size 0"},
      {"train --data synthetic --workers -2", "--workers -2"},
      {"train --data synthetic --data-layout NCWH", "--data-layout 'NCWH'"},
      {"train --data synthetic --run-scope everything", "--run-scope 'everything'"},
      {"train --data lmdb", "--data 'lmdb'"},
      // No GPU here (CI): the CUDA error or "not built", and the hint, whichever build this is.
      {"train --data synthetic --device cuda", "use --device cpu"},
      {"train --data synthetic --device cuda:1", "--device cuda:1"},
      {"train --data synthetic --device cuda:x", "--device 'cuda:x'"},
      {"train --data synthetic --device cpu --amp", "on the CPU use --amp --amp-dtype bf16"},
      {"train --data synthetic --amp-dtype fp8", "--amp-dtype 'fp8'"},
      {"train --data synthetic --use-pure-fp16", "--use-pure-fp16 keeps the fp16 weights"},
      {"train --data synthetic --amp --amp-dtype bf16 --use-pure-fp16", "there is no pure bf16"},
      {"train --data synthetic --amp --use-pure-fp16 --qat", "--use-pure-fp16 with --qat"},
      {"train --data synthetic --amp --use-pure-fp16 --dist-backend nccl",
       "with data-parallel training is not built yet"},
      // Accepted, then refused where it cannot run: fp16 compute is the CUDA backend's.
      {"train --data synthetic --device cpu --amp --use-pure-fp16",
       "fp16 mixed precision runs on the CUDA backend only"},
      {"train --data synthetic --image-shape 4,224,112", "must be equal"},
      // The GPU inference engine: no GPU here; fp16 is not a CPU engine precision.
      {"bench infer --device cuda --precision fp16 --batch-sizes 1", "use --device cpu"},
      {"bench infer --device cpu --precision fp16 --batch-sizes 1", "the GPU engine's"},
      {"train --data synthetic --scale-loss 0", "--scale-loss 0"},
      {"train --data synthetic --device tpu", "--device 'tpu'"},
      {"train --data synthetic --last-epoch-of-checkpoint latest", "'latest'"},
      {"eval --data synthetic --benchmark --benchmark-steps 0", "--benchmark-steps 0"},
      // A new user with no dataset: what to pass, and where docs/data.md says how to get data.
      {"train", "pass --image-root DIR"},
      {"train", "--data synthetic"},
      {"train", "docs/data.md, section 'Getting the data'"},
      {"eval", "pass --image-root DIR"},
      {"train --image-root " + tmp.str() + "/nope", "no such directory"},
      {"train --image-root " + tmp.str() + "/nope", "scripts/prepare-imagenet.sh"},
      {"train --image-root " + tmp.str(), "no train/ folder"},
      {"train --epochs abc", "--epochs"},
      {"train --no-such-flag 3", "--no-such-flag"},
      {"eval --data synthetic --from-checkpoint " + tmp.str() + "/nothing", "--from-checkpoint"},
      {"train --data synthetic --benchmark --inference-dir x", "--inference-dir has no effect"},
      {"predict", "no image files given"},
      {"predict x.jpg", "pass one of --from-pretrained-params FILE and --model DIR"},
      {"predict --from-pretrained-params " + tmp.str() + "/missing.safetensors x.jpg",
       "missing.safetensors"},
      {"frobnicate", "frobnicate"},
      // Each subcommand takes only its flags; a flag with no effect here is refused, with why.
      {"eval --lr 9 --data synthetic", "--lr: rn50 eval does not take it"},
      {"eval --epochs 3 --data synthetic", "--epochs: rn50 eval does not take it"},
      {"eval --scale-loss 64 --data synthetic", "--scale-loss: rn50 eval does not take it"},
      {"train --data synthetic --device cpu --scale-loss 64", "--scale-loss has no effect here"},
      {"train --data synthetic --device cpu --use-dynamic-loss-scaling=false",
       "--use-dynamic-loss-scaling has no effect here"},
      {"train --data synthetic --amp-dtype bf16", "add --amp"},
      {"train --data synthetic --device cpu --no-tf32", "TF32 exists on CUDA GPUs only"},
      {"train --data synthetic --device cpu --no-cuda-graphs", "--no-cuda-graphs has no effect"},
      {"train --data synthetic --image-root " + tmp.str(), "--data synthetic reads no images"},
      {"train --image-root " + tmp.str() + " --synthetic-samples 8", "add --data synthetic"},
      {"train" + syn + " --benchmark-steps 3", "add --benchmark"},
      {"train" + syn + " --benchmark --eval-interval 2", "--eval-interval has no effect"},
      {"train" + syn + " --benchmark --checkpoint-dir x", "write no checkpoints"},
      {"train" + syn + " --last-epoch-of-checkpoint 3", "add --from-checkpoint"},
      {"train" + syn + " --timeout 5", "--timeout has no effect here"},
      {"train" + syn + " --bucket-size-mb 5", "a single process allreduces no gradients"},
      {"train" + syn + " --run-scope train_only --eval-interval 2", "--eval-interval"},
      {"train" + syn + " --worker-cpus 0 x", "--worker-cpus 'x': expected an integer"},
      {"train" + syn + " --amp=maybe", "--amp=maybe: expected true or false"},
      {"train" + syn + " --lr-decay-epochs 30 60", "add --lr-scheduler step"},
      {"train" + syn + " --lr-decay-rate 0.5", "add --lr-scheduler step"},
      {"train" + syn + " --rand-crop-scale 0.5,1", "--data synthetic crops no images"},
      {"train --image-root " + tmp.str() + " --rand-crop-scale 0.5,1.5",
       "--rand-crop-scale 0.5,1.5: need 0 < LO <= HI <= 1"},
      {"train --image-root " + tmp.str() + " --rand-crop-ratio 2", "expected two numbers LO,HI"},
      {"train" + syn + " --lr-scheduler step --lr-decay-epochs 60,30",
       "--lr-decay-epochs [60.0,30.0]: epochs must be >= 0 and ascending"},
      {"train" + syn + " --lr-scheduler exponential", "--lr-scheduler 'exponential'"},
      {"train" + syn + " --warmup-epochs 0 --warmup-start-lr 0.1", "there is no warmup"},
      {"eval --data synthetic --bn-weight-decay", "--bn-weight-decay: rn50 eval does not take it"},
  };
  for (const BadCase& c : cases) {
    std::string out;
    const int rc = run_command(kCli + " " + c.args, &out);
    EXPECT_NE(rc, 0) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.expect), std::string::npos)
        << "rn50 " << c.args << "\nexpected '" << c.expect << "' in:\n" << out;
    // What a user reads names flags and files, never rn50's source files.
    EXPECT_EQ(out.find(".cpp:"), std::string::npos) << "rn50 " << c.args << "\n" << out;
  }
}

TEST(CliFlags, SourceLocationOnlyWithRn50Debug) {
  std::string out;
  EXPECT_NE(run_command("RN50_DEBUG=1 " + kCli + " train --data synthetic --batch-size 0", &out), 0);
  EXPECT_NE(out.find("--batch-size 0"), std::string::npos) << out;
  EXPECT_NE(out.find("[at "), std::string::npos) << "RN50_DEBUG=1 shows where it failed:\n" << out;
}

TEST(CliFlags, HelpAndVersion) {
  std::string out;
  EXPECT_EQ(run_command(kCli + " --version", &out), 0);
  EXPECT_NE(out.find("rn50 "), std::string::npos);
  EXPECT_EQ(run_command(kCli + " train --help", &out), 0);
  for (const char* flag : {"--run-scope", "--epochs", "--batch-size", "--lr", "--warmup-epochs",
                           "--momentum", "--weight-decay", "--label-smoothing", "--image-root",
                           "--crop-size", "--resize-short", "--num-of-class", "--arch", "--seed",
                           "--workers", "--prefetch", "--eval-interval", "--save-interval",
                           "--print-interval", "--checkpoint-dir", "--report-file",
                           "--from-checkpoint", "--last-epoch-of-checkpoint",
                           "--from-pretrained-params", "--benchmark", "--benchmark-steps",
                           "--benchmark-warmup-steps", "--data", "--device", "--data-layout",
                           "--zero-init-residual", "--amp", "--amp-dtype", "--scale-loss",
                           "--use-dynamic-loss-scaling", "--no-tf32", "--no-cuda-graphs"})
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  // Every flag of the table in its command's help, with its default; the training-only ones
  // hidden from eval's.
  std::string eval_help;
  EXPECT_EQ(run_command(kCli + " eval --help", &eval_help), 0);
  // (A name may have one entry per command group, e.g. bench infer's DLE --batch-size.)
  std::map<std::string, unsigned> commands_of;
  for (const rn50::FlagSpec& f : rn50::flag_table())
    if (!f.positional) commands_of[f.name] |= f.commands;
  for (const auto& [name, commands] : commands_of) {
    EXPECT_EQ(out.find("\n  " + name + " ") != std::string::npos, (commands & rn50::kTrain) != 0)
        << name;
    EXPECT_EQ(eval_help.find("\n  " + name + " ") != std::string::npos,
              (commands & rn50::kEval) != 0)
        << name;
  }
  EXPECT_NE(out.find("(default: 0.256)"), std::string::npos) << "--lr's default";
}

TEST(CliFlags, ConfigFileThenCommandLine) {
  const std::string dir = std::string(RN50_BINARY_DIR) + "/cli_config_test";
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/run.toml";
  std::ofstream(file) << "arch = \"resnet18\"\nbatch-size = 64\ncrop-size = 32\n"
                         "num-of-class = 10\nscale-loss = 64.0\n";
  std::string out;
  // batch-size from the command line wins; scale-loss (no effect without fp16 AMP) comes from a
  // file, which holds a whole configuration, so it is not refused.
  ASSERT_EQ(run_command(kCli + " train --config " + file +
                            " --data synthetic --benchmark --benchmark-steps 1 "
                            "--benchmark-warmup-steps 0 --batch-size 2 --show-config",
                        &out),
            0)
      << out;
  auto row = [&](const std::string& flag) { return config_row(out, flag); };
  EXPECT_NE(row("--batch-size").find("set"), std::string::npos) << row("--batch-size");
  EXPECT_NE(row("--batch-size").find("2"), std::string::npos) << row("--batch-size");
  EXPECT_NE(row("--arch").find("config"), std::string::npos) << row("--arch");
  EXPECT_NE(row("--arch").find("resnet18"), std::string::npos) << row("--arch");
  EXPECT_NE(row("--lr").find("default"), std::string::npos) << row("--lr");
  // A report fed back names itself as --report-file: refused rather than overwritten.
  const std::string report = dir + "/run.jsonl";
  ASSERT_EQ(run_command(kCli + " train --data synthetic --benchmark --benchmark-steps 1 "
                               "--benchmark-warmup-steps 0 --batch-size 2 --crop-size 32 "
                               "--arch resnet18 --num-of-class 10 --report-file " + report,
                        &out),
            0)
      << out;
  const auto size = std::filesystem::file_size(report);
  EXPECT_NE(run_command(kCli + " train --config " + report, &out), 0);
  EXPECT_NE(out.find("would overwrite the report"), std::string::npos) << out;
  EXPECT_EQ(std::filesystem::file_size(report), size);
  ASSERT_EQ(run_command(kCli + " train --config " + report + " --report-file " + dir +
                            "/rerun.jsonl",
                        &out),
            0)
      << out;
  // A bad key: a clear error naming the file and the key, nothing run.
  std::ofstream(file) << "epochz = 3\n";
  EXPECT_NE(run_command(kCli + " train --config " + file + " --data synthetic", &out), 0);
  EXPECT_NE(out.find("'epochz' is not a flag"), std::string::npos) << out;
}

TEST(CliFlags, ShowConfigPrintsEveryFlagWithItsSource) {
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --data synthetic --benchmark --benchmark-steps 1 "
                               "--benchmark-warmup-steps 0 --batch-size 2 --crop-size 32 "
                               "--arch resnet18 --num-of-class 10 --show-config",
                        &out),
            0)
      << out;
  for (const rn50::FlagSpec& f : rn50::flag_table()) {
    if ((f.commands & rn50::kTrain) && f.alias_of.empty()) {
      EXPECT_NE(out.find(f.name), std::string::npos) << f.name;
    }
  }
  EXPECT_NE(out.find("--batch-size"), std::string::npos);
  const size_t row = out.find("--arch ");
  ASSERT_NE(row, std::string::npos);
  const std::string line = out.substr(row, out.find('\n', row) - row);
  EXPECT_NE(line.find("set"), std::string::npos) << line;
  EXPECT_NE(line.find("resnet18"), std::string::npos) << line;
  const size_t lr = out.find("--lr ");
  EXPECT_NE(out.substr(lr, out.find('\n', lr) - lr).find("default"), std::string::npos);
}

TEST(CliFlags, SyntheticBenchmarkWritesReport) {
  TempDir tmp("cli_bench");
  const std::string report = (tmp.path / "bench.jsonl").string();
  std::string out;
  const int rc = run_command(
      "cd " + sh_quote(tmp.str()) + " && " + kCli +
          " train --data synthetic --benchmark --benchmark-steps 2 --benchmark-warmup-steps 1 "
          "--batch-size 2 --crop-size 64 --arch resnet18 --report-file " + sh_quote(report),
      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("train.ips"), std::string::npos) << out;
  auto lines = read_jsonl(report);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["type"], "config");
  EXPECT_EQ(lines[0]["benchmark"], true);
  EXPECT_EQ(lines[0]["num_of_class"], 1000);
  EXPECT_EQ(lines[0]["world_size"], 1);
  EXPECT_TRUE(lines[0].contains("version"));
  EXPECT_EQ(lines[1]["type"], "benchmark");
  EXPECT_GT(lines[1]["train.ips"].get<double>(), 0.0);
  EXPECT_EQ(lines[1]["steps"], 2);
  EXPECT_EQ(lines[1]["images"], 4);
  // Benchmarks write no checkpoints (DLE semantics).
  EXPECT_FALSE(fs::exists(tmp.path / "output"));
}

TEST(CliFlags, PretrainedClassCountMismatchNamesTheFlag) {
  // A 10-class file loaded into a 7-class model: the error names fc.weight and --num-of-class 10.
  TempDir tmp("cli_mismatch");
  const std::string w = (tmp.path / "w.safetensors").string();
  {
    auto be = rn50::make_backend("onednn");
    rn50::ModelOptions mo;
    mo.num_classes = 10;
    rn50::ResNet m(*be, rn50::arch_from_name("resnet18"), mo);
    m.init(1);
    rn50::save_safetensors(w, m.state_dict());
  }
  std::string out;
  const int rc = run_command(kCli + " eval --data synthetic --synthetic-samples 4 --batch-size 2 "
                                    "--crop-size 32 --arch resnet18 --num-of-class 7 "
                                    "--from-pretrained-params " + sh_quote(w),
                             &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("'fc.weight'"), std::string::npos) << out;
  EXPECT_NE(out.find("--num-of-class 10"), std::string::npos) << out;
}

TEST(CliFlags, UnknownFlagsAndOtherCommandsFlags) {
  std::string out;
  EXPECT_NE(run_command(kCli + " train --batchsize 3", &out), 0);
  EXPECT_NE(out.find("unknown flag --batchsize; did you mean --batch-size?"), std::string::npos)
      << out;
  EXPECT_NE(run_command(kCli + " bench infer --lr 0.1", &out), 0);
  EXPECT_NE(out.find("--lr: rn50 bench infer does not take it"), std::string::npos) << out;
  EXPECT_NE(run_command(kCli + " predict --epochs 3 x.jpg", &out), 0);
  EXPECT_NE(out.find("--epochs: rn50 predict does not take it (a flag of rn50 train)"),
            std::string::npos)
      << out;
  EXPECT_NE(run_command(kCli + " export --xyzzy 1", &out), 0);
  EXPECT_NE(out.find("unknown flag --xyzzy (rn50 export --help lists its flags)"),
            std::string::npos)
      << out;
}

TEST(CliFlags, UnknownCommandNamesEveryCommand) {
  // The message is built from rn50::all_commands(), the list the CLI dispatches on: every
  // command in it, and nothing else.
  std::vector<std::string> expected;
  for (rn50::Command c : rn50::all_commands()) expected.emplace_back(rn50::command_name(c));
  for (const std::string given : {"frobnicate", "bench frobnicate"}) {
    std::string out;
    EXPECT_EQ(run_command(kCli + " " + given + " --epochs 1", &out), 2) << out;
    const std::string head = "unknown command '" + given + "' (expected ";
    const size_t at = out.find(head);
    ASSERT_NE(at, std::string::npos) << out;
    const size_t from = at + head.size(), to = out.find("; see ", from);
    ASSERT_NE(to, std::string::npos) << out;
    std::string list = out.substr(from, to - from);
    const size_t last = list.rfind(" or ");
    ASSERT_NE(last, std::string::npos) << list;
    list.replace(last, 4, ", ");
    std::vector<std::string> named;
    for (size_t p = 0, q; p <= list.size(); p = q + 2) {
      q = list.find(", ", p);
      if (q == std::string::npos) q = list.size();
      named.push_back(list.substr(p, q - p));
    }
    EXPECT_EQ(named, expected) << out;
  }
}

TEST(CliFlags, FlagsDocListsWhatHelpLists) {
  // docs/flags.md says `rn50 COMMAND --help` lists the flags of the command's table, and
  // -h/--help: per command, the names in its help and in its table (positionals included).
  const std::string md = rn50::flags_markdown();
  for (rn50::Command c : rn50::all_commands()) {
    const std::string name = rn50::command_name(c);
    std::string help;
    ASSERT_EQ(run_command(kCli + " " + name + " --help", &help), 0) << help;
    std::set<std::string> in_help;
    std::istringstream lines(help);
    for (std::string l; std::getline(lines, l);) {
      if (l.rfind("  ", 0) != 0 || l.size() < 3 || l[2] == ' ') continue;
      std::string names = l.substr(2, l.find(' ', 2) - 2);  // "-h,--help", "--lr", "images"
      for (size_t p = 0, q; p <= names.size(); p = q + 1) {
        q = names.find(',', p);
        if (q == std::string::npos) q = names.size();
        in_help.insert(names.substr(p, q - p));
      }
    }
    std::set<std::string> in_doc = {"-h", "--help"};
    const size_t from = md.find("\n## rn50 " + name + "\n");
    ASSERT_NE(from, std::string::npos) << name;
    const size_t to = md.find("\n## ", from + 1);
    std::istringstream rows(md.substr(from, to == std::string::npos ? to : to - from));
    for (std::string l; std::getline(rows, l);)
      if (l.rfind("| `", 0) == 0) in_doc.insert(l.substr(3, l.find('`', 3) - 3));
    EXPECT_EQ(in_help, in_doc) << "rn50 " << name << " --help:\n" << help;
  }
}

TEST(CliFlags, ExitCodes) {
  // tools/rn50.cpp's header lists these.
  const std::string syn = " --data synthetic --arch resnet18 --crop-size 32 --batch-size 2";
  const std::vector<std::pair<std::string, int>> cases = {
      {"--version", 0},
      {"train --help", 0},
      {"bench infer --help", 0},
      // refused before the command runs
      {"frobnicate", 2},
      {"bench frobnicate", 2},
      {"train --no-such-flag" + syn, 2},
      {"eval --lr 9", 2},
      {"train --epochs abc" + syn, 2},
      {"train --config /nonexistent/rn50.toml", 2},
      // a refused value: train and eval check values inside the run, the others before it
      {"train --data synthetic --batch-size 0", 1},
      {"bench infer --batch-sizes 0", 2},
      {"bench peak --precisions fp16", 2},
      // an error while the command runs
      {"predict --model /nonexistent/model x.jpg", 1},
      {"export --from-checkpoint /nonexistent/ckpt --output /nonexistent/out", 2},
      // CLI11's own
      {"", 106},
      {"train extra-word" + syn, 109},
      {"train" + syn + " --epochs", 114},
  };
  for (const auto& [args, code] : cases) {
    std::string out;
    EXPECT_EQ(run_command(kCli + " " + args, &out), code) << "rn50 " << args << ":\n" << out;
  }
}

TEST(CliFlags, DleSpellingsEndToEnd) {
  // Paddle's way of writing a synthetic benchmark: booleans as words, capitalised choices, the
  // --model-arch-name and --use-synthetic aliases, --optimizer Momentum.
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --use-synthetic True --model-arch-name ResNet18 "
                               "--lr-scheduler Cosine --data-layout nhwc --show-config True "
                               "--optimizer Momentum --enable-cpu-affinity False --crop-size 32 "
                               "--batch-size 2 --num-of-class 10 --benchmark True "
                               "--benchmark-steps 1 --benchmark-warmup-steps 0",
                        &out),
            0)
      << out;
  auto row = [&](const std::string& flag) { return config_row(out, flag); };
  EXPECT_NE(row("--arch").find("resnet18"), std::string::npos) << row("--arch");
  EXPECT_NE(row("--arch").find("set"), std::string::npos) << row("--arch");
  EXPECT_NE(row("--data").find("synthetic"), std::string::npos) << row("--data");
  EXPECT_NE(row("--lr-scheduler").find("cosine"), std::string::npos) << row("--lr-scheduler");
  EXPECT_NE(row("--data-layout").find("NHWC"), std::string::npos) << row("--data-layout");
  EXPECT_EQ(row("--use-synthetic"), "") << "aliases are not rows of their own";
  // A switch given False is off; a bad word is refused naming the flag.
  EXPECT_NE(run_command(kCli + " train --data synthetic --amp Maybe", &out), 0);
  EXPECT_NE(out.find("--amp=Maybe: expected true or false"), std::string::npos) << out;
}

TEST(CliFlags, BenchInferDlloggerReport) {
  TempDir tmp("cli_dlll");
  const std::string report = (tmp.path / "infer.dlll").string();
  std::string out;
  ASSERT_EQ(run_command(kCli + " bench infer --arch resnet18 --num-of-class 10 --crop-size 32 "
                               "--batch-sizes 1,2 --benchmark-steps 2 --benchmark-warmup-steps 0 "
                               "--precision FP32 --report-format dllogger --report-file " +
                            sh_quote(report),
                        &out),
            0)
      << out;
  std::ifstream f(report);
  int logs = 0;
  for (std::string line; std::getline(f, line);) {
    ASSERT_EQ(line.rfind("DLLL ", 0), 0u) << line;
    logs += line.find("infer.ips") != std::string::npos;
  }
  EXPECT_GE(logs, 2) << "one DLLL line per batch size";
}
