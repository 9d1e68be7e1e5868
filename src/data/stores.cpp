#include "data/stores.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/check.h"
#include "data/tar.h"
#include "data/tfrecord.h"

namespace rn50 {

const char* data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::automatic: return "auto";
    case DataFormat::imagefolder: return "imagefolder";
    case DataFormat::filelist: return "filelist";
    case DataFormat::tfrecord: return "tfrecord";
    case DataFormat::webdataset: return "webdataset";
  }
  return "?";
}

DataFormat parse_data_format(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (DataFormat f : {DataFormat::automatic, DataFormat::imagefolder, DataFormat::filelist,
                       DataFormat::tfrecord, DataFormat::webdataset})
    if (n == data_format_name(f)) return f;
  RN50_FAIL("--data-format '{}': expected auto, imagefolder, filelist, tfrecord or webdataset",
            name);
}

namespace data {

namespace fs = std::filesystem;

namespace {

bool holds_tar(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".tar") return true;
  return false;
}

const char* split_dir(Split s) { return s == Split::train ? "train" : "val"; }

}  // namespace

DataFormat detect_format(const StoreOptions& o) {
  if (o.format != DataFormat::automatic) return o.format;
  if (!o.train_list.empty() || !o.val_list.empty()) return DataFormat::filelist;
  if (!o.train_shards.empty() || !o.val_shards.empty()) return DataFormat::webdataset;
  if (!o.root.empty()) {
    if (!tfrecord_shards(o.root, Split::train).empty() ||
        !tfrecord_shards(o.root, Split::val).empty())
      return DataFormat::tfrecord;
    if (holds_tar(fs::path(o.root) / "train") || holds_tar(fs::path(o.root) / "val"))
      return DataFormat::webdataset;
  }
  return DataFormat::imagefolder;
}

bool has_split(const StoreOptions& o, Split split) {
  const bool train = split == Split::train;
  switch (detect_format(o)) {
    case DataFormat::automatic:
    case DataFormat::imagefolder:
      return fs::is_directory(fs::path(o.root) / split_dir(split));
    case DataFormat::filelist: return !(train ? o.train_list : o.val_list).empty();
    case DataFormat::tfrecord: return !tfrecord_shards(o.root, split).empty();
    case DataFormat::webdataset:
      return !(train ? o.train_shards : o.val_shards).empty() ||
             holds_tar(fs::path(o.root) / split_dir(split));
  }
  return false;
}

std::shared_ptr<const SampleIndex> open_split(const StoreOptions& o, Split split,
                                              std::string* what) {
  const bool train = split == Split::train;
  const DataFormat f = detect_format(o);
  switch (f) {
    case DataFormat::automatic:
    case DataFormat::imagefolder: {
      const std::string dir = (fs::path(o.root) / split_dir(split)).string();
      *what = dir;
      return image_folder_samples(ImageFolderIndex::scan(dir));
    }
    case DataFormat::filelist: {
      const std::string& list = train ? o.train_list : o.val_list;
      RN50_CHECK(!list.empty(), "--data-format filelist: the {} split needs {}",
                 split_dir(split), train ? "--train-list FILE" : "--val-list FILE");
      *what = list;
      return file_list_samples(list, o.root);
    }
    case DataFormat::tfrecord: {
      TfrecordOptions t;
      t.idx_dir = o.idx_dir;
      t.label_offset = o.label_offset;
      t.num_classes = o.num_classes;
      *what = fmt::format("TFRecord shards in '{}' ({})", o.root, train ? "train" : "validation");
      return tfrecord_samples(o.root, split, t);
    }
    case DataFormat::webdataset: {
      const std::string& pattern = train ? o.train_shards : o.val_shards;
      const std::string spec =
          pattern.empty() ? (fs::path(o.root) / split_dir(split)).string() : pattern;
      *what = fmt::format("WebDataset shards '{}'", spec);
      const std::string manifest_dir =
          pattern.empty() ? spec : fs::path(expand_shards(spec).front()).parent_path().string();
      return webdataset_samples(expand_shards(spec), manifest_dir);
    }
  }
  RN50_FAIL("unknown data format");
}

}  // namespace data
}  // namespace rn50
