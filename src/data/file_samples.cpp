// rn50 data: sample indexes of one file per image — an ImageFolder split and a file list
// (data/sample_index.h).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "data/decode.h"
#include "data/sample_index.h"

namespace rn50::data {
namespace {

namespace fs = std::filesystem;

/// Samples that are files: (path, label) pairs.
class FileSamples final : public SampleIndex {
 public:
  FileSamples(std::vector<std::pair<std::string, int>> samples, std::vector<std::string> classes)
      : samples_(std::move(samples)), classes_(std::move(classes)) {}
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  const std::vector<std::string>& classes() const override { return classes_; }
  int read(int64_t i, std::vector<uint8_t>& bytes) const override {
    const auto& [path, label] = samples_[static_cast<size_t>(i)];
    read_file(path, bytes);
    return label;
  }
  std::string name(int64_t i) const override { return samples_[static_cast<size_t>(i)].first; }

 private:
  std::vector<std::pair<std::string, int>> samples_;
  std::vector<std::string> classes_;
};

}  // namespace

std::shared_ptr<const SampleIndex> image_folder_samples(ImageFolderIndex index) {
  return std::make_shared<FileSamples>(std::move(index.samples), std::move(index.classes));
}

std::shared_ptr<const SampleIndex> file_list_samples(const std::string& list_file,
                                                     const std::string& root) {
  RN50_CHECK(fs::is_regular_file(list_file), "file list '{}': {}", list_file,
             fs::exists(list_file) ? "not a file" : "no such file");
  std::ifstream f(list_file);
  RN50_CHECK(f.good(), "file list '{}': cannot open it", list_file);
  std::vector<std::pair<std::string, int>> samples;
  std::map<int, std::string> first_dir;  // label -> the first path component of its files
  std::map<int, bool> one_dir;           // label -> all its files share first_dir
  std::string line;
  for (int lineno = 1; std::getline(f, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // "path label": the label is the last field, the path may hold spaces.
    const size_t cut = line.find_last_of(" \t");
    RN50_CHECK(cut != std::string::npos && cut > 0,
               "file list '{}' line {}: expected 'relative/path label', got '{}'", list_file,
               lineno, line);
    std::string path = line.substr(0, cut);
    path.erase(path.find_last_not_of(" \t") + 1);
    const std::string label_text = line.substr(cut + 1);
    int label = -1;
    try {
      size_t used = 0;
      label = std::stoi(label_text, &used);
      if (used != label_text.size()) label = -1;
    } catch (const std::exception&) {
      label = -1;
    }
    RN50_CHECK(label >= 0, "file list '{}' line {}: label '{}' is not an integer >= 0", list_file,
               lineno, label_text);
    RN50_CHECK(label < kMaxClasses, "file list '{}' line {}: label {} is too large (at most {})",
               list_file, lineno, label, kMaxClasses - 1);
    // A file in a folder names its label's class by that folder (train/n01440764/x.JPEG).
    const fs::path p(path);
    const std::string dir = p.has_parent_path() ? p.parent_path().filename().string() : "";
    auto [it, fresh] = first_dir.emplace(label, dir);
    const auto same = one_dir.emplace(label, !dir.empty()).first;
    if (!fresh && it->second != dir) same->second = false;
    samples.emplace_back((fs::path(root) / path).string(), label);
  }
  RN50_CHECK(!samples.empty(), "file list '{}' lists no sample", list_file);
  const int classes = first_dir.rbegin()->first + 1;
  // Folder names when every label has its own folder, else numbered names.
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (int c = 0; c < classes; ++c) {
    const auto d = first_dir.find(c);
    if (d == first_dir.end() || !one_dir.at(c) || d->second.empty() || !seen.insert(d->second).second)
      break;
    names.push_back(d->second);
  }
  if (static_cast<int>(names.size()) != classes) {
    names.clear();
    for (int c = 0; c < classes; ++c) names.push_back(fmt::format("class_{}", c));
  }
  return std::make_shared<FileSamples>(std::move(samples), std::move(names));
}

}  // namespace rn50::data
