// Report records (src/core/report.h): the builder refuses what the schema does not declare, the
// documented schema (docs/report-schema.md) is the one in the code, and every line that real runs
// of rn50 train / eval / benchmark / bench loader write passes check_report_line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/dllogger.h"
#include "core/report.h"
#include "require.h"
#include "rn50/error.h"
#include "test_train_util.h"
#include "config/flags.h"

namespace rn50 {
namespace {

using namespace rn50_test;
using json = nlohmann::json;

TEST(ReportRecord, RefusesUndeclaredFieldsAndWrongTypes) {
  EXPECT_THROW(ReportRecord("no-such-type"), Error);
  ReportRecord r("step");
  EXPECT_THROW(r.set("train.los", 1.0), Error);      // a typo is not a new field
  EXPECT_THROW(r.set("epoch", 1.5), Error);          // integer field
  EXPECT_THROW(r.set("train.lr", "0.1"), Error);     // number field
  EXPECT_THROW(r.set_flags(json::object()), Error);  // step lines carry no flags
  r.set("epoch", 0).set("step", 3).set("iteration", 3).set("train.loss", 2.5).set("train.lr", 0.1);
  r.set("train.loss_avg", std::nan(""));  // NaN -> null
  try {
    (void)r.to_json();
    ADD_FAILURE() << "a record without train.ips must not be written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.ips"), std::string::npos) << e.what();
  }
  r.set("train.ips", 100.0);
  const nlohmann::ordered_json j = r.to_json();
  auto it = j.begin();
  EXPECT_EQ(it.key(), "type");
  EXPECT_EQ(it.value(), "step");
  ++it;
  EXPECT_EQ(it.key(), "schema_version");
  EXPECT_EQ(it.value(), kReportSchemaVersion);
  EXPECT_TRUE(j["train.loss_avg"].is_null());
  EXPECT_TRUE(check_report_line(json::parse(j.dump())).empty());
}

TEST(ReportRecord, EvalEpochMayBeNullOtherIntegersNot) {
  ReportRecord e("eval");
  e.set_json("epoch", nullptr);
  ReportRecord s("epoch");
  EXPECT_THROW(s.set_json("epoch", nullptr), Error);
}

TEST(ReportRecord, CheckFindsEveryKindOfProblem) {
  const json good = {{"type", "eval"},      {"schema_version", kReportSchemaVersion},
                     {"epoch", 2},          {"val.loss", 1.0},
                     {"val.top1", 50.0},    {"val.top5", 90.0},
                     {"val.ips", 10.0},     {"val.images", 100},
                     {"val.bad_samples", 0}};
  EXPECT_TRUE(check_report_line(good).empty());
  auto problems = [&](auto edit) {
    json j = good;
    edit(j);
    return check_report_line(j);
  };
  EXPECT_EQ(problems([](json& j) { j["schema_version"] = 1; }).size(), 1u);
  EXPECT_EQ(problems([](json& j) { j["val.top10"] = 1.0; }).size(), 1u);
  EXPECT_EQ(problems([](json& j) { j["val.images"] = "100"; }).size(), 1u);
  EXPECT_EQ(problems([](json& j) { j.erase("val.top5"); }).size(), 1u);
  EXPECT_EQ(problems([](json& j) { j["type"] = "evaluation"; }).size(), 1u);
  // Config lines: flags are checked against the flag table when it is given.
  const std::vector<ReportField> flags = config_flag_fields();
  ReportRecord c("config");
  c.set_flags(config_to_json(Config{}));
  for (const char* k : {"num_of_class", "classes", "global_batch_size", "rank", "steps_per_epoch",
                        "params", "train.samples", "val.samples"})
    c.set(k, 1);
  for (const char* k : {"launcher", "communicator", "backend", "resolved_device", "compute_dtype"})
    c.set(k, "x");
  c.set("base_lr", 0.1);
  json cj = json::parse(c.to_json().dump());
  EXPECT_TRUE(check_report_line(cj, &flags).empty());
  cj["epochs"] = "ninety";
  EXPECT_EQ(check_report_line(cj, &flags).size(), 1u);
  cj["not_a_flag"] = 1;
  EXPECT_EQ(check_report_line(cj, &flags).size(), 2u);
}

TEST(ReportSchema, DocumentIsCurrent) {
  const std::string text = report_schema_markdown(config_flag_fields());
  const fs::path generated = fs::path(RN50_BINARY_DIR) / "report-schema.md";
  std::ofstream(generated) << text;
  const fs::path doc = fs::path(RN50_SOURCE_DIR) / "docs" / "report-schema.md";
  std::ifstream f(doc);
  ASSERT_TRUE(f.good()) << doc << " is missing: cp " << generated << " " << doc;
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), text) << "docs/report-schema.md is out of date: cp " << generated << " "
                            << doc;
}

/// Checks every line of `report` against the schema; returns the types seen.
std::multiset<std::string> check_file(const fs::path& report) {
  const std::vector<ReportField> flags = config_flag_fields();
  std::multiset<std::string> seen;
  for (const json& line : read_jsonl(report)) {
    for (const std::string& p : check_report_line(line, &flags))
      ADD_FAILURE() << report.filename() << ": " << p << "\n  " << line.dump();
    seen.insert(line.value("type", "?"));
  }
  return seen;
}

TEST(ReportSchema, EveryLineRealRunsWriteConforms) {
  TempDir tmp("report_schema");
  RN50_REQUIRE_OR_SKIP("data", make_imagenette_subset(tmp.path / "data", 2, 8, 4),
                       "imagenette not found");
  const std::string cli = RN50_CLI;
  const std::string data = sh_quote((tmp.path / "data").string());
  const std::string ckpt = sh_quote((tmp.path / "ckpt").string());
  const std::string tiny = " --arch resnet18 --crop-size 32 --resize-short 37 --workers 2 ";
  std::string out;
  auto run = [&](const std::string& args, const fs::path& report) {
    const int rc =
        run_command(cli + args + tiny + " --report-file " + sh_quote(report.string()), &out);
    EXPECT_EQ(rc, 0) << args << "\n" << out;
    return check_file(report);
  };

  auto t = run(" train --image-root " + data +
                   " --epochs 1 --warmup-epochs 0 --batch-size 4 "
                   "--print-interval 1 --checkpoint-dir " +
                   ckpt,
               tmp.path / "train.jsonl");
  EXPECT_EQ(t.count("config"), 1u);
  EXPECT_GE(t.count("step"), 2u);
  EXPECT_EQ(t.count("epoch"), 1u);
  const json epoch = of_type(read_jsonl(tmp.path / "train.jsonl"), "epoch").at(0);
  EXPECT_TRUE(epoch.contains("val.top1")) << "the epoch was evaluated: " << epoch.dump();

  const std::string last = sh_quote((tmp.path / "ckpt" / "resnet18" / "0").string());
  auto r = run(" train --image-root " + data +
                   " --epochs 2 --warmup-epochs 0 --batch-size 4 "
                   "--from-checkpoint " +
                   last + " --checkpoint-dir " + ckpt,
               tmp.path / "resume.jsonl");
  EXPECT_EQ(r.count("epoch"), 1u);
  EXPECT_TRUE(read_jsonl(tmp.path / "resume.jsonl").at(0).contains("resumed_from"));

  auto e = run(" eval --image-root " + data + " --batch-size 4 --from-checkpoint " + last,
               tmp.path / "eval.jsonl");
  EXPECT_EQ(e.count("eval"), 1u);

  auto b =
      run(" train --data synthetic --benchmark --benchmark-steps 2 "
          "--benchmark-warmup-steps 1 --batch-size 2 --num-of-class 10",
          tmp.path / "bench.jsonl");
  EXPECT_EQ(b.count("benchmark"), 1u);

  auto eb = run(" eval --data synthetic --benchmark --benchmark-steps 2 "
                "--benchmark-warmup-steps 1 --batch-size 2 --num-of-class 2 --from-checkpoint " +
                    last,
                tmp.path / "eval_bench.jsonl");
  EXPECT_EQ(eb.count("config"), 1u);
  EXPECT_EQ(eb.count("infer_benchmark"), 1u);

  const int rc = run_command(cli + " bench loader --image-root " + data +
                                 " --batch-size 4 --crop-size 32 --workers 2 --batches 2 "
                                 "--warmup-batches 1 --report-file " +
                                 sh_quote((tmp.path / "loader.jsonl").string()),
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(check_file(tmp.path / "loader.jsonl").count("loader"), 1u);

  // --report-format dllogger: every line is DLLogger's (METADATA, then LOG with the steps DLE
  // uses); the records rebuilt from the LOG lines conform to the schema; rn50 report reads it.
  const fs::path dl = tmp.path / "train.dlll";
  ASSERT_EQ(run_command(cli + " train --image-root " + data +
                            " --epochs 1 --warmup-epochs 0 --batch-size 4 --print-interval 1 "
                            "--save-interval 0 --report-format dllogger --report-file " +
                            sh_quote(dl.string()) + tiny,
                        &out),
            0)
      << out;
  const std::vector<ReportField> flags = config_flag_fields();
  std::multiset<std::string> steps;
  std::ifstream f(dl);
  for (std::string line; std::getline(f, line);) {
    ASSERT_EQ(line.rfind("DLLL {", 0), 0u) << line;
    const nlohmann::json d = parse_dllogger_line(line);
    if (d["type"] == "METADATA") continue;
    const nlohmann::json rec = dllogger_to_record(d);
    ASSERT_FALSE(rec.is_null()) << line;
    for (const std::string& p : check_report_line(rec, &flags)) ADD_FAILURE() << p << "\n" << line;
    steps.insert(d["step"].is_string() ? d["step"].get<std::string>()
                                       : std::to_string(d["step"].size()));
  }
  EXPECT_EQ(steps.count("PARAMETER"), 1u);  // config
  EXPECT_GE(steps.count("2"), 2u);           // [epoch, iteration] step lines
  EXPECT_EQ(steps.count("1"), 1u);           // [epoch] epoch line
  ASSERT_EQ(run_command(cli + " report --format csv " + sh_quote(dl.string()), &out), 0) << out;
  EXPECT_NE(out.find("# Training curve"), std::string::npos) << out;
}

}  // namespace
}  // namespace rn50
