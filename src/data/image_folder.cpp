// rn50 data: ImageFolder index (torchvision.datasets.ImageFolder's file discovery).
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/check.h"
#include "data/files.h"
#include "rn50/data.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

using data::is_image_file_name;

/// True when `p` is a directory, following symlinks (os.DirEntry.is_dir()); false on errors.
bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

/// Appends the valid files under class folder `dir` in torchvision's make_dataset order:
/// `for root, _, fnames in sorted(os.walk(dir, followlinks=True)): for f in sorted(fnames)`.
/// That is: every directory of the tree (recursively, following symlinks) sorted by its path
/// string, and within one directory the non-directory entries sorted by name. Strings compare
/// by bytes, which equals Python's code-point order for UTF-8 names.
void collect_class_files(const fs::path& dir, int label,
                         std::vector<std::pair<std::string, int>>& out) {
  std::vector<std::string> dirs{dir.string()};
  for (size_t i = 0; i < dirs.size(); ++i) {  // breadth-first walk; sorted afterwards
    std::error_code ec;
    for (fs::directory_iterator it(dirs[i], ec), end; !ec && it != end; it.increment(ec)) {
      if (is_dir(it->path())) dirs.push_back(it->path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& d : dirs) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      if (!is_dir(it->path())) names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      if (is_image_file_name(n)) out.emplace_back((fs::path(d) / n).string(), label);
    }
  }
}

}  // namespace

/// Scans an ImageFolder split exactly like torchvision 0.14's ImageFolder (find_classes +
/// make_dataset): classes = sorted names of the sub-directories of `root` (symlinks followed,
/// hidden folders included, as os.scandir does); class index = position in that list; samples
/// gathered recursively per class (see collect_class_files). Only .jpg/.jpeg/.png (any case)
/// count; other torchvision extensions (.bmp, .webp, ...) are not decoded by rn50 and skipped.
/// Throws rn50::Error naming `root` when it does not exist or is not a directory, when it holds no
/// class folders, or (as torchvision) when some class folder holds no image file.
ImageFolderIndex ImageFolderIndex::scan(const std::string& root) {
  std::error_code ec;
  RN50_CHECK(fs::exists(root, ec), "dataset folder '{}' does not exist", root);
  RN50_CHECK(is_dir(root), "dataset path '{}' is not a directory", root);

  ImageFolderIndex idx;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_dir(it->path())) idx.classes.push_back(it->path().filename().string());
  }
  RN50_CHECK(!ec, "cannot list dataset folder '{}': {}", root, ec.message());
  std::sort(idx.classes.begin(), idx.classes.end());
  RN50_CHECK(!idx.classes.empty(),
             "couldn't find any class folder in '{}' (expected one sub-folder per class, "
             "e.g. '{}/n01440764/*.JPEG')",
             root, root);

  std::vector<std::string> empty;
  for (size_t c = 0; c < idx.classes.size(); ++c) {
    const size_t before = idx.samples.size();
    collect_class_files(fs::path(root) / idx.classes[c], static_cast<int>(c), idx.samples);
    if (idx.samples.size() == before) empty.push_back(idx.classes[c]);
  }
  if (!empty.empty()) {
    std::string list;
    for (size_t i = 0; i < empty.size() && i < 10; ++i) list += (i ? ", " : "") + empty[i];
    if (empty.size() > 10) list += fmt::format(", ... ({} in all)", empty.size());
    RN50_FAIL("found no valid image file (.jpg .jpeg .png) for the classes {} in '{}'", list, root);
  }
  return idx;
}

}  // namespace rn50
