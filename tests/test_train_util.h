// Helpers shared by the trainer/CLI tests (test_train_*.cpp, test_cli_*.cpp): temp folders,
// a small ImageFolder of symlinks into shared/data/imagenette, running the CLI, reading reports.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "require.h"

namespace rn50_test {

namespace fs = std::filesystem;

/// A fresh directory under the build tree, removed when the object dies.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::path(RN50_BINARY_DIR) / "test_tmp" /
           (tag + "_" + (info ? std::string(info->name()) : "x") + "_" +
            std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    if (!std::getenv("RN50_KEEP_TMP")) fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

inline fs::path imagenette_root() { return fs::path(RN50_SOURCE_DIR) / ".." / "shared" / "data" / "imagenette"; }

/// Builds root/{train,val}/<synset>/ with symlinks to the first `n_train` / `n_val` files (sorted)
/// of the first `n_classes` imagenette classes. Returns false when imagenette is absent.
inline bool make_imagenette_subset(const fs::path& root, int n_classes, int n_train, int n_val) {
  const fs::path src = imagenette_root();
  if (!fs::is_directory(src / "train") || !fs::is_directory(src / "val")) return false;
  for (const char* split : {"train", "val"}) {
    std::vector<fs::path> classes;
    for (auto& e : fs::directory_iterator(src / split))
      if (e.is_directory()) classes.push_back(e.path());
    std::sort(classes.begin(), classes.end());
    if (static_cast<int>(classes.size()) < n_classes) return false;
    const int n = std::string(split) == "train" ? n_train : n_val;
    for (int c = 0; c < n_classes; ++c) {
      std::vector<fs::path> files;
      for (auto& e : fs::directory_iterator(classes[c]))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      if (static_cast<int>(files.size()) < n) return false;
      const fs::path dst = root / split / classes[c].filename();
      fs::create_directories(dst);
      for (int i = 0; i < n; ++i) fs::create_symlink(fs::absolute(files[i]), dst / files[i].filename());
    }
  }
  return true;
}

/// Runs a shell command; returns its exit status (or -1) and captures stdout+stderr.
inline int run_command(const std::string& cmd, std::string* output = nullptr) {
  std::string full = cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/// Single-quotes `s` for the shell.
inline std::string sh_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

/// The JSON objects of a JSON-lines file.
inline std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream f(p);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// The lines of `v` whose "type" is `type`.
inline std::vector<nlohmann::json> of_type(const std::vector<nlohmann::json>& v,
                                           const std::string& type) {
  std::vector<nlohmann::json> out;
  for (auto& j : v)
    if (j.value("type", "") == type) out.push_back(j);
  return out;
}

/// True when /usr/bin/python3 can import every module in `modules` (space-separated).
inline bool python_has(const std::string& modules) {
  std::string cmd = std::string(rn50::test::python()) + " -c " + sh_quote("import " + modules);
  return run_command(cmd + " >/dev/null") == 0;
}

}  // namespace rn50_test
