// rn50: the inputs the fuzz harnesses (fuzz/, scripts/fuzz.sh) found crashing, hanging or leaking
// a reader, run through the same harness functions (fuzz/targets.h, compiled here without
// libFuzzer) in the normal test suite. Each file tests/fuzz_regressions/<harness>/<name> must be
// read cleanly: success, or an rn50::Error whose message reads as a user message (no source
// location, not empty). An optional <name>.error beside it holds text the message must contain.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../fuzz/targets.h"
#include "rn50/error.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using Harness = std::function<void(const uint8_t*, size_t)>;

const std::map<std::string, Harness>& harnesses() {
  static const std::map<std::string, Harness> h{
      {"decode_image", fuzz::fuzz_decode_image},
      {"decode_region", fuzz::fuzz_decode_region},
      {"validate_image", fuzz::fuzz_validate_image},
      {"tfrecord", fuzz::fuzz_tfrecord},
      {"example", fuzz::fuzz_example},
      {"dali_index", fuzz::fuzz_dali_index},
      {"tar", fuzz::fuzz_tar},
      {"file_list", fuzz::fuzz_file_list},
      {"safetensors", fuzz::fuzz_safetensors},
      {"model_io", fuzz::fuzz_model_io},
      {"checkpoint_state", fuzz::fuzz_checkpoint_state},
      {"config", fuzz::fuzz_config},
      {"report", fuzz::fuzz_report},
#ifdef RN50_HAVE_SERVE
      {"serve_protocol", fuzz::fuzz_serve_protocol},
#endif
  };
  return h;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Runs every saved input of one harness folder; returns how many ran.
int run_folder(const fs::path& dir, const Harness& harness) {
  std::vector<fs::path> inputs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() != ".error") inputs.push_back(e.path());
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& input : inputs) {
    SCOPED_TRACE(input.string());
    const std::string bytes = read_all(input);
    fs::path expect_path = input;
    expect_path += ".error";
    const std::string expect = fs::exists(expect_path) ? read_all(expect_path) : "";
    try {
      harness(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      EXPECT_TRUE(expect.empty()) << "read without the expected error: " << expect;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_FALSE(msg.empty());
      EXPECT_EQ(msg.find(".cpp:"), std::string::npos) << msg;
      std::string want = expect;
      while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
      EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwanted: " << want;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a non-rn50::Error exception escaped: " << e.what();
    }
  }
  return static_cast<int>(inputs.size());
}

TEST(FuzzRegressions, EverySavedInputIsReadCleanly) {
  const fs::path root = fs::path(RN50_SOURCE_DIR) / "tests" / "fuzz_regressions";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
#ifndef RN50_HAVE_SERVE
    if (name.rfind("serve_", 0) == 0) continue;  // the server is not built
#endif
    const auto h = harnesses().find(name);
    ASSERT_NE(h, harnesses().end()) << "no harness named '" << name << "' (fuzz/targets.h)";
    run_folder(e.path(), h->second);
  }
}

/// A million nested '[' (2 MB): before the depth limit (core/json_value.h kMaxJsonDepth), copying
/// or dumping such a value overflowed the stack (rn50 serve's flatten() and error messages, a
/// state.json "config", any field's error message). Each JSON reader now refuses it cleanly.
TEST(FuzzRegressions, DeeplyNestedJsonIsRefused) {
  const std::string deep = std::string(1000000, '[') + "1" + std::string(1000000, ']');
  const std::vector<std::pair<std::string, std::string>> cases{
      {"checkpoint_state", "{\"epoch\": 0, \"config\": " + deep + "}"},
      {"model_io", "{\"format\": \"rn50-inference\", \"format_version\": " + deep + "}"},
      {"config", "{\"epochs\": " + deep + "}"},
      {"report", "{\"type\": \"epoch\", \"epoch\": " + deep + "}\n"},
#ifdef RN50_HAVE_SERVE
      {"serve_protocol", std::string(1, '\0') +
                             "{\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", "
                             "\"shape\": [1, 3, 1, 1], \"data\": " + deep + "}]}"},
#endif
  };
  for (const auto& [name, input] : cases) {
    SCOPED_TRACE(name);
    try {
      harnesses().at(name)(reinterpret_cast<const uint8_t*>(input.data()), input.size());
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
    }
  }
}

/// The seed corpora (fuzz/corpus/<harness>/) are valid inputs: they must read cleanly too, so a
/// reader change that breaks a seed shows up here.
TEST(FuzzRegressions, SeedCorporaReadCleanly) {
  const fs::path root = fs::path(RN50_SOURCE_DIR) / "fuzz" / "corpus";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  for (const auto& [name, harness] : harnesses()) {  // (serve_protocol only with the server)
    SCOPED_TRACE(name);
    ASSERT_TRUE(fs::is_directory(root / name));
    EXPECT_GT(run_folder(root / name, harness), 0);
  }
}

}  // namespace
}  // namespace rn50
