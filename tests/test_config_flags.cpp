// The flag table of every command (src/config/flags.h): names and keys follow the flag names and
// a name has one entry per command, every flag parses its command's default back from its text,
// bad text names the flag, DLE's spellings are read (True/False, Cosine, NHWC, FP32, aliases,
// --optimizer Momentum), an unknown flag finds its closest neighbour, the report's config object
// holds exactly the train/eval keys, and set_flag records what was given.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "config/flags.h"
#include "rn50/error.h"

namespace rn50 {
namespace {

TEST(ConfigFlags, NamesAndKeysAreDerivedAndUniquePerCommand) {
  std::map<std::string, unsigned> commands_of;
  for (const FlagSpec& f : flag_table()) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(commands_of[f.name] & f.commands, 0u) << "two entries for one command";
    commands_of[f.name] |= f.commands;
    std::string k = f.positional ? f.name : f.name.substr(2);
    if (!f.positional) {
      EXPECT_EQ(f.name.rfind("--", 0), 0u);
    }
    for (char& c : k) c = c == '-' ? '_' : c;
    EXPECT_EQ(f.key, k);
    EXPECT_FALSE(f.help.empty());
    EXPECT_NE(f.commands, 0u) << "a flag no command takes";
    EXPECT_TRUE(f.get && f.set && f.check);
    for (Command c : all_commands())
      if (f.commands & c) {
        EXPECT_NE(f.help_text(c).find("(default: "), std::string::npos);
        EXPECT_EQ(find_flag(f.name, c), &f);
      }
    EXPECT_TRUE(f.alias_of.empty() || find_flag(f.alias_of) != nullptr) << f.alias_of;
  }
  EXPECT_EQ(find_flag("--no-such-flag"), nullptr);
  EXPECT_THROW(flag("--no-such-flag"), Error);
  // export's and report's --format are two flags of one name.
  EXPECT_NE(find_flag("--format", kExport), find_flag("--format", kReport));
  EXPECT_EQ(find_flag("--epochs", kPredict), nullptr);
}

TEST(ConfigFlags, EveryCommandsDefaultsRoundTripThroughTheirText) {
  for (Command cmd : all_commands()) {
    const Config d = default_config(cmd);
    for (const FlagSpec& f : flag_table()) {
      if (!(f.commands & cmd)) continue;
      SCOPED_TRACE(std::string(command_name(cmd)) + " " + f.name);
      const nlohmann::ordered_json v = f.get(d);
      std::vector<std::string> text;
      if (f.is_list() || f.positional) {
        for (const auto& e : v) text.push_back(e.is_string() ? e.get<std::string>() : e.dump());
        if (text.empty()) continue;  // an empty list: nothing to give
      } else if (f.is_switch()) {
        text.push_back(v.get<bool>() ? "true" : "false");
      } else {
        text.push_back(v.is_string() ? v.get<std::string>() : v.dump());
      }
      if ((f.value_name == "TEXT" || f.name == "--precision") && text[0].empty()) continue;
      Config c = default_config(cmd);
      set_flag(c, f, text);
      EXPECT_EQ(f.get(c), v);
      EXPECT_EQ(c.given, std::set<std::string>{f.alias_of.empty() ? f.name : f.alias_of});
      f.check(c);  // the defaults are valid values
    }
  }
}

TEST(ConfigFlags, CommandDefaults) {
  EXPECT_EQ(default_config(kEval).run_scope, RunScope::eval_only);
  const Config bt = default_config(kBenchTrain);
  EXPECT_TRUE(bt.benchmark);
  EXPECT_EQ(bt.data, DataKind::synthetic);
  EXPECT_EQ(bt.batch_sizes, std::vector<int>{256});
  const Config bi = default_config(kBenchInfer);
  EXPECT_EQ(bi.batch_sizes, (std::vector<int>{1, 32}));
  EXPECT_EQ(bi.benchmark_warmup_steps, 3);
  // The help shows the command's own default.
  EXPECT_NE(flag("--benchmark-steps").help_text(kTrain).find("(default: 50)"), std::string::npos);
  EXPECT_NE(flag("--benchmark-steps").help_text(kBenchInfer).find("(default: 20)"),
            std::string::npos);
  // --image-root without --data reads images in the benchmarks whose default is synthetic.
  Config c = default_config(kBenchInfer);
  set_flag(c, flag("--image-root"), {"/data"});
  finish_config(c, kBenchInfer);
  EXPECT_EQ(c.data, DataKind::imagefolder);
}

TEST(ConfigFlags, DleSpellings) {
  Config c;
  for (const char* t : {"True", "TRUE", "1", "yes", "on"}) {
    set_flag(c, flag("--show-config"), {t});
    EXPECT_TRUE(c.show_config) << t;
  }
  set_flag(c, flag("--use-dynamic-loss-scaling"), {"False"});
  EXPECT_FALSE(c.use_dynamic_loss_scaling);
  set_flag(c, flag("--enable-cpu-affinity"), {"False"});
  EXPECT_FALSE(c.enable_cpu_affinity);
  set_flag(c, flag("--use-pure-fp16"), {"True"});
  EXPECT_TRUE(c.use_pure_fp16);
  set_flag(c, flag("--lr-scheduler"), {"Cosine"});
  EXPECT_EQ(c.lr_scheduler, "cosine");
  set_flag(c, flag("--data-layout"), {"nchw"});
  EXPECT_EQ(c.data_layout, Layout::NCHW);
  set_flag(c, flag("--precision", kBenchInfer), {"INT8"});
  EXPECT_EQ(c.precision, "int8");
  set_flag(c, flag("--model-arch-name"), {"ResNet50"});
  EXPECT_EQ(c.arch, "resnet50");
  EXPECT_TRUE(c.given.count("--arch")) << "an alias records the flag it stands for";
  set_flag(c, flag("--use-synthetic"), {"True"});
  EXPECT_EQ(c.data, DataKind::synthetic);
  EXPECT_TRUE(c.given.count("--data"));
  set_flag(c, flag("--use-synthetic"), {"False"});
  EXPECT_EQ(c.data, DataKind::imagefolder);
  set_flag(c, flag("--optimizer"), {"Momentum"});
  try {
    set_flag(c, flag("--optimizer"), {"Adam"});
    ADD_FAILURE() << "--optimizer Adam accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Momentum only"), std::string::npos) << e.what();
  }
}

TEST(ConfigFlags, ClosestFlag) {
  EXPECT_EQ(closest_flag("--batchsize", kTrain), "--batch-size");
  EXPECT_EQ(closest_flag("--epoch", kTrain), "--epochs");
  EXPECT_EQ(closest_flag("--Batch-Size", kTrain), "--batch-size");
  EXPECT_EQ(closest_flag("--batch-szes", kBenchInfer), "--batch-sizes");
  EXPECT_EQ(closest_flag("--completely-different", kTrain), "");
  EXPECT_EQ(closest_flag("--epochs", kPredict), "") << "not a predict flag, nor close to one";
}

TEST(ConfigFlags, BadTextNamesTheFlag) {
  struct Case {
    const char* flag;
    std::vector<std::string> text;
    const char* expect;
  };
  for (const Case& k : {Case{"--epochs", {"1.5"}, "--epochs '1.5': expected an integer"},
                        Case{"--seed", {"-1"}, "--seed '-1': expected an integer >= 0"},
                        Case{"--lr", {"0.1x"}, "--lr '0.1x': expected a number"},
                        Case{"--amp", {"maybe"}, "--amp=maybe: expected true or false"},
                        Case{"--data", {"lmdb"}, "--data 'lmdb'"},
                        Case{"--data-layout", {"HWC"}, "--data-layout 'HWC'"},
                        Case{"--precision", {"fp8"}, "--precision 'fp8'"},
                        Case{"--batch-sizes", {"1,x"}, "--batch-sizes 'x'"},
                        Case{"--batch-size", {"99999999999"}, "a smaller integer"}}) {
    Config c;
    try {
      set_flag(c, flag(k.flag), k.text);
      ADD_FAILURE() << k.flag << " accepted " << k.text[0];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.expect), std::string::npos) << e.what();
    }
  }
  // Values that parse but are out of range: the table's check names flag and value.
  Config c;
  set_flag(c, flag("--momentum"), {"1"});
  try {
    flag("--momentum").check(c);
    ADD_FAILURE() << "--momentum 1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--momentum 1: must be in [0, 1)"), std::string::npos)
        << e.what();
  }
  set_flag(c, flag("--top-k"), {"0"});
  EXPECT_THROW(check_flags(c, kPredict), Error);
}

TEST(ConfigFlags, ConfigJsonHoldsExactlyTheTrainAndEvalFlags) {
  Config c;
  set_flag(c, flag("--worker-cpus"), {"0", "3"});
  set_flag(c, flag("--run-scope"), {"train_only"});
  const auto j = config_to_json(c);
  std::set<std::string> want{"world_size", "version"};
  for (const FlagSpec& f : flag_table())
    if ((f.commands & kTrainAndEval) && f.alias_of.empty()) want.insert(f.key);
  std::set<std::string> got;
  for (const auto& [k, v] : j.items()) got.insert(k);
  EXPECT_EQ(got, want);
  EXPECT_FALSE(j.contains("top_k")) << "predict's flags are not a run's configuration";
  EXPECT_FALSE(j.contains("use_synthetic")) << "aliases are not keys";
  EXPECT_EQ(j["worker_cpus"], nlohmann::json::array({0, 3}));
  EXPECT_EQ(j["run_scope"], "train_only");
  EXPECT_EQ(j["data_layout"], "NHWC");
  EXPECT_EQ(j["lr"], 0.256);
  const std::string table = config_table(c, kEval);
  EXPECT_EQ(table.find("--lr "), std::string::npos) << "eval's table has no training flags";
  EXPECT_NE(table.find("--batch-size"), std::string::npos);
  EXPECT_NE(config_table(c, kTrain).find("--run-scope"), std::string::npos);
}

TEST(ConfigFlags, FlagsDocumentListsEveryCommand) {
  const std::string md = flags_markdown();
  for (Command c : all_commands())
    EXPECT_NE(md.find(std::string("## rn50 ") + command_name(c)), std::string::npos);
  for (const FlagSpec& f : flag_table())
    EXPECT_NE(md.find("`" + f.name + "`"), std::string::npos) << f.name;
}

}  // namespace
}  // namespace rn50
