// rn50 train --config FILE: TOML/INI keys (dashes or underscores, [train] section), the JSON a
// report or state.json holds (a round trip reproduces the resolved configuration), the shipped
// configs/, and errors naming the file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/report.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "config/flags.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

fs::path write(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(RN50_BINARY_DIR) / "config_file_test";
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

TEST(ConfigFile, TomlKeysWithDashesOrUnderscores) {
  const fs::path p = write("a.toml",
                           "# comment\n"
                           "epochs = 7\n"
                           "batch_size = 64\n"
                           "lr-decay-epochs = [3, 5]\n"
                           "lr-scheduler = \"step\"\n"
                           "data-layout = \"NCHW\"\n"
                           "zero-init-residual = true\n"
                           "enable-cpu-affinity = false\n"
                           "[train]\n"
                           "label-smoothing = 0.2\n");
  Config c;
  const auto names = apply_config_file(c, p.string(), kTrain);
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(c.epochs, 7);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.lr_decay_epochs, (std::vector<double>{3, 5}));
  EXPECT_EQ(c.lr_scheduler, "step");
  EXPECT_EQ(c.data_layout, Layout::NCHW);
  EXPECT_TRUE(c.zero_init_residual);
  EXPECT_FALSE(c.enable_cpu_affinity);
  EXPECT_DOUBLE_EQ(c.label_smoothing, 0.2);
  EXPECT_TRUE(c.given.empty()) << "file values are not command-line flags";
  EXPECT_EQ(c.from_config.count("--epochs"), 1u);
  // The table shows where each value came from.
  const std::string table = config_table(c, kTrain);
  const size_t row = table.find("--epochs ");
  EXPECT_NE(table.substr(row, table.find('\n', row) - row).find("config"), std::string::npos);
  // rn50 eval skips the training flags of the same file.
  Config e;
  const auto eval_names = apply_config_file(e, p.string(), kEval);
  EXPECT_EQ(std::count(eval_names.begin(), eval_names.end(), "--epochs"), 0);
  EXPECT_EQ(e.data_layout, Layout::NCHW);
}

TEST(ConfigFile, ReportConfigLineReproducesTheConfiguration) {
  Config a;
  set_flag(a, flag("--epochs"), {"12"});
  set_flag(a, flag("--lr"), {"0.1"});
  set_flag(a, flag("--worker-cpus"), {"0", "1"});
  set_flag(a, flag("--rand-crop-scale"), {"0.35", "1"});
  set_flag(a, flag("--amp"), {});
  set_flag(a, flag("--amp-dtype"), {"bf16"});
  set_flag(a, flag("--report-format"), {"dllogger"});
  // As a report's first line (with the run facts a report adds), then a step line.
  ReportRecord r("config");
  r.set_flags(config_to_json(a));
  r.set("num_of_class", 10).set("classes", 10).set("global_batch_size", 256).set("rank", 0);
  r.set("launcher", std::string("single")).set("communicator", std::string("single"));
  r.set("base_lr", 0.1).set("steps_per_epoch", int64_t{5}).set("backend", std::string("onednn"));
  r.set("resolved_device", std::string("cpu")).set("compute_dtype", std::string("bf16"));
  r.set("train.samples", int64_t{10}).set("val.samples", int64_t{10}).set("params", int64_t{1});
  const fs::path p =
      write("report.jsonl", r.to_json().dump() + "\n{\"type\":\"step\",\"epoch\":0}\n");
  Config b;
  apply_config_file(b, p.string(), kTrain);
  auto ja = config_to_json(a), jb = config_to_json(b);
  ja["num_of_class"] = 10;  // the report holds the resolved class count
  EXPECT_EQ(ja.dump(), jb.dump());
  // state.json: {"config": {...}}.
  const fs::path s = write(
      "state.json", nlohmann::ordered_json{{"epoch", 3}, {"config", config_to_json(a)}}.dump(2));
  Config c;
  apply_config_file(c, s.string(), kTrain);
  EXPECT_EQ(config_to_json(a).dump(), config_to_json(c).dump());
}

TEST(ConfigFile, ShippedConfigs) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(RN50_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".toml") continue;
    ++n;
    Config c;
    apply_config_file(c, e.path().string(), kTrain);
    EXPECT_EQ(c.arch, "resnet50") << e.path();
    EXPECT_EQ(c.batch_size, 256) << e.path();
    EXPECT_DOUBLE_EQ(c.lr, 0.256) << e.path();
    EXPECT_DOUBLE_EQ(c.momentum, 0.875) << e.path();
    EXPECT_DOUBLE_EQ(c.weight_decay, 1.0 / 32768) << e.path();
    const std::string name = e.path().filename().string();
    const int epochs = name.find("_50e_") != std::string::npos    ? 50
                       : name.find("_250e_") != std::string::npos ? 250
                                                                  : 90;
    EXPECT_EQ(c.epochs, epochs) << name;
    EXPECT_DOUBLE_EQ(c.mixup, epochs == 250 ? 0.2 : 0.0) << name << ": DLE mixes up for 250 only";
    EXPECT_EQ(c.amp, name.find("_amp") != std::string::npos) << name;
    c.image_root = "/data";
    // fp16 AMP needs a GPU: refused on a machine without one.
    if (!c.amp || cuda_device_count() > 0) {
      EXPECT_NO_THROW(validate(c)) << name;
    } else {
      EXPECT_THROW(validate(c), Error) << name;
    }
  }
  EXPECT_EQ(n, 6);
}

TEST(ConfigFile, ErrorsNameFileAndKey) {
  Config c;
  const fs::path unknown = write("unknown.toml", "epochs = 3\nlearning-rate = 0.1\n");
  try {
    apply_config_file(c, unknown.string(), kTrain);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(unknown.string()), std::string::npos) << m;
    EXPECT_NE(m.find("'learning-rate' is not a flag"), std::string::npos) << m;
  }
  const fs::path bad = write("bad.toml", "epochs = many\n");
  try {
    apply_config_file(c, bad.string(), kTrain);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.toml"), std::string::npos) << m;
    EXPECT_NE(m.find("--epochs"), std::string::npos) << m;
  }
  const fs::path section = write("section.toml", "[predict]\ntop-k = 3\n");
  EXPECT_THROW(apply_config_file(c, section.string(), kTrain), Error);
  const fs::path nojson = write("nothing.json", "{\"type\":\"step\"}\n[1,2]\n");
  EXPECT_THROW(apply_config_file(c, nojson.string(), kTrain), Error);
  EXPECT_THROW(
      apply_config_file(c, (fs::path(RN50_BINARY_DIR) / "no-such.toml").string(), kTrain),
      Error);
}

TEST(ConfigFile, CpuAffinityFlag) {
  Config c;
  EXPECT_TRUE(c.enable_cpu_affinity);
  set_flag(c, flag("--enable-cpu-affinity"), {"false"});
  EXPECT_FALSE(c.enable_cpu_affinity);
  set_flag(c, flag("--enable-cpu-affinity"), {"true"});
  EXPECT_TRUE(c.enable_cpu_affinity);
  EXPECT_THROW(set_flag(c, flag("--enable-cpu-affinity"), {"maybe"}), Error);
  EXPECT_EQ(config_to_json(c)["enable_cpu_affinity"], true);
}

}  // namespace
}  // namespace rn50
