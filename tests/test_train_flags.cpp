// The flag table (src/train/flags.h): names and keys are unique and follow the flag names, every
// flag parses its default's text back to the default, bad text names the flag, the report's
// config object holds exactly the table's keys, and set_flag records what was given.
#include <gtest/gtest.h>

#include <set>

#include "rn50/error.h"
#include "train/flags.h"

namespace rn50 {
namespace {

TEST(TrainFlags, NamesAndKeysAreUniqueAndDerived) {
  std::set<std::string> names, keys;
  for (const FlagSpec& f : train_flags()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    ASSERT_EQ(f.name.rfind("--", 0), 0u) << f.name;
    std::string k = f.name.substr(2);
    for (char& c : k) c = c == '-' ? '_' : c;
    EXPECT_EQ(f.key, k);
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_NE(f.help_text().find("(default: "), std::string::npos) << f.name;
    EXPECT_NE(f.commands & kTrainCommand, 0u) << f.name << ": every flag trains or configures";
    EXPECT_TRUE(f.get && f.set && f.check) << f.name;
    EXPECT_EQ(&find_flag(f.name), &f);
  }
  EXPECT_THROW(find_flag("--no-such-flag"), Error);
}

TEST(TrainFlags, DefaultsRoundTripThroughTheirText) {
  const TrainConfig d;
  for (const FlagSpec& f : train_flags()) {
    SCOPED_TRACE(f.name);
    const nlohmann::ordered_json v = f.get(d);
    std::vector<std::string> text;
    if (f.is_list()) {
      for (const auto& e : v) text.push_back(e.dump());
    } else if (f.is_switch()) {
      text.push_back(v.get<bool>() ? "true" : "false");
    } else {
      text.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    }
    if (f.value_name == "TEXT" && text[0].empty()) continue;  // an empty path: no text form
    TrainConfig c;
    set_flag(c, f, text);
    EXPECT_EQ(f.get(c), v);
    EXPECT_EQ(c.given, std::set<std::string>{f.name});
    f.check(c);  // the defaults are valid values
  }
}

TEST(TrainFlags, BadTextNamesTheFlag) {
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
                        Case{"--batch-size", {"99999999999"}, "a smaller integer"}}) {
    TrainConfig c;
    try {
      set_flag(c, find_flag(k.flag), k.text);
      ADD_FAILURE() << k.flag << " accepted " << k.text[0];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.expect), std::string::npos) << e.what();
    }
  }
  // Values that parse but are out of range: the table's check names flag and value.
  TrainConfig c;
  set_flag(c, find_flag("--momentum"), {"1"});
  try {
    find_flag("--momentum").check(c);
    ADD_FAILURE() << "--momentum 1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--momentum 1: must be in [0, 1)"), std::string::npos)
        << e.what();
  }
}

TEST(TrainFlags, ConfigJsonHoldsExactlyTheTable) {
  TrainConfig c;
  set_flag(c, find_flag("--worker-cpus"), {"0", "3"});
  set_flag(c, find_flag("--run-scope"), {"train_only"});
  const auto j = config_to_json(c);
  std::set<std::string> want{"world_size", "version"};
  for (const FlagSpec& f : train_flags()) want.insert(f.key);
  std::set<std::string> got;
  for (const auto& [k, v] : j.items()) got.insert(k);
  EXPECT_EQ(got, want);
  EXPECT_EQ(j["worker_cpus"], nlohmann::json::array({0, 3}));
  EXPECT_EQ(j["run_scope"], "train_only");
  EXPECT_EQ(j["data_layout"], "NHWC");
  EXPECT_EQ(j["lr"], 0.256);
  const std::string table = config_table(c, kEvalCommand);
  EXPECT_EQ(table.find("--lr "), std::string::npos) << "eval's table has no training flags";
  EXPECT_NE(table.find("--batch-size"), std::string::npos);
  EXPECT_NE(config_table(c, kTrainCommand).find("--run-scope"), std::string::npos);
}

}  // namespace
}  // namespace rn50
