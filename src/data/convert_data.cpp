#include "data/convert_data.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/check.h"
#include "core/fileio.h"
#include "data/decode.h"
#include "data/manifest.h"
#include "data/tar.h"
#include "data/tfrecord.h"

namespace rn50::data {

namespace fs = std::filesystem;

namespace {

/// One split's shards being written.
class ShardWriter {
 public:
  ShardWriter(const std::string& output, const std::string& format, Split split,
              int64_t shards)
      : output_(output), format_(format), split_(split), shards_(shards) {}

  void add(const std::vector<uint8_t>& image, int label, const std::string& class_name,
           const std::string& source_name) {
    if (count_ == 0) start();
    const std::string_view bytes(reinterpret_cast<const char*>(image.data()), image.size());
    const bool png = sniff_format(image.data(), image.size()) == ImageFormat::png;
    if (format_ == "webdataset") {
      const std::string key = fmt::format("{:09d}", index_);
      append_tar_member(buf_, key + (png ? ".png" : ".jpg"), bytes);
      append_tar_member(buf_, key + ".cls", std::to_string(label));
    } else {
      const int64_t at = static_cast<int64_t>(buf_.size());
      // The standard conversion's labels are 1-based (readers subtract --label-offset 1).
      append_record(buf_, encode_example(bytes, label + 1, class_name, source_name));
      spans_.push_back({at, static_cast<int64_t>(buf_.size()) - at});
    }
    ++index_;
    ++count_;
  }

  /// Writes the shard being filled (atomically); returns its file name and sample count.
  std::pair<std::string, int64_t> finish() {
    const std::string name = shard_name();
    std::string path;
    if (format_ == "webdataset") {
      finish_tar(buf_);
      path = (fs::path(output_) / (split_ == Split::train ? "train" : "val") / name).string();
    } else {
      path = (fs::path(output_) / name).string();
      write_dali_index((fs::path(output_) / "idx" / (name + ".idx")).string(), spans_);
    }
    write_file_atomic(path, buf_);
    bytes_ += static_cast<int64_t>(buf_.size());
    const std::pair<std::string, int64_t> done{fs::path(path).lexically_relative(output_).string(),
                                               count_};
    buf_.clear();
    spans_.clear();
    count_ = 0;
    ++shard_;
    return done;
  }

  int64_t count() const { return count_; }
  int64_t bytes() const { return bytes_; }

 private:
  void start() {
    if (format_ == "webdataset")
      fs::create_directories(fs::path(output_) / (split_ == Split::train ? "train" : "val"));
    else
      fs::create_directories(fs::path(output_) / "idx");
  }
  std::string shard_name() const {
    if (format_ == "webdataset")
      return fmt::format("{}-{:06d}.tar", split_ == Split::train ? "train" : "val", shard_);
    return fmt::format("{}-{:05d}-of-{:05d}", split_ == Split::train ? "train" : "validation",
                       shard_, shards_);
  }

  std::string output_, format_;
  Split split_;
  int64_t shards_, shard_ = 0, count_ = 0, index_ = 0, bytes_ = 0;
  std::string buf_;
  std::vector<RecordSpan> spans_;
};

}  // namespace

ConvertReport convert_data(const StoreOptions& source, const std::string& output,
                           const std::string& format, int shard_size, std::ostream& log) {
  RN50_CHECK(format == "webdataset" || format == "tfrecord",
             "--format '{}': expected webdataset or tfrecord", format);
  RN50_CHECK(shard_size >= 1, "--shard-size {}: must be >= 1", shard_size);
  RN50_CHECK(!output.empty(), "rn50 convert-data: pass --output DIR, the folder to write");
  RN50_CHECK(!fs::exists(fs::path(output) / kManifestFile),
             "--output '{}' already holds a converted dataset ({}); pass an empty folder",
             output, kManifestFile);
  const auto t0 = std::chrono::steady_clock::now();
  ConvertReport r;
  nlohmann::ordered_json manifest;
  manifest["format"] = format;
  nlohmann::ordered_json splits = nlohmann::ordered_json::object();
  std::vector<std::string> classes;
  for (Split split : {Split::train, Split::val}) {
    if (!has_split(source, split)) continue;
    std::string what;
    const auto samples = open_split(source, split, &what);
    if (classes.empty()) classes = samples->classes();
    const int64_t n = samples->size();
    ShardWriter w(output, format, split, (n + shard_size - 1) / shard_size);
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    int64_t written = 0, skipped = 0;
    std::vector<uint8_t> bytes;
    for (int64_t i = 0; i < n; ++i) {
      int label = 0;
      try {
        label = samples->read(i, bytes);
        read_image_header(bytes.data(), bytes.size(), samples->name(i));  // an image at all
      } catch (const Error& e) {
        log << fmt::format("convert-data: skipping {}: {}\n", samples->name(i), e.what());
        ++skipped;
        continue;
      }
      w.add(bytes, label,
            label < static_cast<int>(classes.size()) ? classes[static_cast<size_t>(label)] : "",
            fs::path(samples->name(i)).filename().string());
      ++written;
      if (w.count() == shard_size) {
        const auto [file, count] = w.finish();
        shards.push_back({{"file", file}, {"samples", count}});
      }
    }
    if (w.count() > 0) {
      const auto [file, count] = w.finish();
      shards.push_back({{"file", file}, {"samples", count}});
    }
    log << fmt::format("convert-data: {} -> {} {} shard(s) of {} samples ({} skipped)\n", what,
                       shards.size(), format, written, skipped);
    splits[split == Split::train ? "train" : "val"] = {{"samples", written}, {"shards", shards}};
    r.samples += written;
    r.skipped += skipped;
    r.shards += static_cast<int64_t>(shards.size());
    r.bytes += w.bytes();
  }
  RN50_CHECK(r.shards > 0, "the source holds neither a train nor a val split to convert");
  manifest["classes"] = classes;
  manifest["splits"] = splits;
  write_file_atomic((fs::path(output) / kManifestFile).string(), manifest.dump(1) + "\n");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace rn50::data
