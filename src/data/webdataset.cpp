// rn50 data: WebDataset shards as a SampleIndex (data/tar.h).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/fileio.h"
#include "data/files.h"
#include "data/manifest.h"
#include "data/tar.h"

namespace rn50::data {

namespace {

namespace fs = std::filesystem;

/// The WebDataset key and extension of a member path: "dir/x.cls" -> ("dir/x", "cls").
std::pair<std::string, std::string> key_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {name.substr(0, dot), ext};
}

/// Reads up to `size` bytes at `offset` of file `path` into `out`; returns the bytes read (0
/// when the file cannot be opened).
int64_t read_into(const std::string& path, int64_t offset, int64_t size, uint8_t* out) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  const size_t done = pread_full(fd, out, static_cast<size_t>(size), offset);
  ::close(fd);
  return static_cast<int64_t>(done);
}

std::string read_range(const std::string& path, int64_t offset, int64_t size) {
  std::string out(static_cast<size_t>(size), '\0');
  out.resize(static_cast<size_t>(
      read_into(path, offset, size, reinterpret_cast<uint8_t*>(out.data()))));
  return out;
}

class WebdatasetSamples final : public SampleIndex {
 public:
  WebdatasetSamples(const std::vector<std::string>& shards, const std::string& manifest_dir)
      : shards_(shards) {
    int max_label = -1;
    for (size_t s = 0; s < shards_.size(); ++s) {
      starts_.push_back(static_cast<int64_t>(samples_.size()));
      std::vector<std::string> problems;
      const std::vector<TarMember> members = scan_tar(shards_[s], &problems);
      for (size_t i = 0; i < members.size();) {
        const std::string key = key_of(members[i].name).first;
        Sample smp{s, key, -1, 0, -1, {}};
        for (; i < members.size() && key_of(members[i].name).first == key; ++i) {
          const auto [k, ext] = key_of(members[i].name);
          if (ext == "jpg" || ext == "jpeg" || ext == "png") {
            smp.data_offset = members[i].data_offset;
            smp.size = members[i].size;
          } else if (ext == "cls") {
            const std::string text = read_range(shards_[s], members[i].data_offset,
                                                std::min<int64_t>(members[i].size, 32));
            smp.label = parse_label(text);
            if (smp.label < 0)
              smp.broken = fmt::format("{}:{}: .cls '{}' is not a class number", shards_[s],
                                       members[i].name, text);
            else if (smp.label >= kMaxClasses)
              smp.broken = fmt::format("{}:{}: .cls class {} is too large (at most {})",
                                       shards_[s], members[i].name, smp.label, kMaxClasses - 1);
          }
        }
        if (smp.broken.empty() && smp.data_offset < 0)
          smp.broken = fmt::format("{}:{}: the sample has no .jpg/.jpeg/.png member", shards_[s], key);
        if (smp.broken.empty() && smp.label < 0)
          smp.broken = fmt::format("{}:{}: the sample has no .cls member", shards_[s], key);
        if (smp.broken.empty()) max_label = std::max(max_label, smp.label);
        samples_.push_back(std::move(smp));
      }
      for (std::string& p : problems) samples_.push_back(Sample{s, "", -1, 0, -1, std::move(p)});
    }
    RN50_CHECK(!samples_.empty(), "the WebDataset shards ({} of them, the first '{}') hold no sample",
               shards_.size(), shards_.front());
    classes_ = manifest_classes(manifest_dir);
    if (classes_.empty())
      for (int c = 0; c <= max_label; ++c) classes_.push_back(fmt::format("class_{}", c));
  }

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::vector<int64_t> shard_starts() const override { return starts_; }
  std::vector<std::string> shard_names() const override { return shards_; }
  std::string name(int64_t i) const override {
    const Sample& s = samples_[static_cast<size_t>(i)];
    if (s.broken.empty()) return fmt::format("{}:{}", shards_[s.shard], s.key);
    return s.broken.substr(0, s.broken.find(": ", shards_[s.shard].size()));  // shard@offset, shard:key
  }
  int read(int64_t i, std::vector<uint8_t>& bytes) const override {
    const Sample& s = samples_[static_cast<size_t>(i)];
    RN50_CHECK(s.broken.empty(), "{}", s.broken);
    RN50_CHECK(s.label < static_cast<int64_t>(classes_.size()),
               "{}: class {} is outside the manifest's {} classes", name(i), s.label,
               classes_.size());
    bytes.resize(static_cast<size_t>(s.size));
    const int64_t got = read_into(shards_[s.shard], s.data_offset, s.size, bytes.data());
    RN50_CHECK(got == s.size, "{}: the image member is cut off ({} of {} bytes)", name(i), got,
               s.size);
    return s.label;
  }

 private:
  struct Sample {
    size_t shard;
    std::string key;
    int64_t data_offset;  ///< the image member's data, -1 when the sample has none
    int64_t size;
    int label;
    std::string broken;  ///< why the sample cannot be read, or empty
  };
  static int parse_label(const std::string& text) {
    size_t a = text.find_first_not_of(" \t\r\n"), b = text.find_last_not_of(" \t\r\n");
    if (a == std::string::npos) return -1;
    const std::string t = text.substr(a, b - a + 1);
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    return std::stoi(t);
  }
  std::vector<std::string> shards_, classes_;
  std::vector<Sample> samples_;
  std::vector<int64_t> starts_;
};

}  // namespace

std::shared_ptr<const SampleIndex> webdataset_samples(const std::vector<std::string>& shards,
                                                      const std::string& manifest_dir) {
  RN50_CHECK(!shards.empty(), "no WebDataset shard given");
  return std::make_shared<WebdatasetSamples>(shards, manifest_dir);
}

}  // namespace rn50::data
