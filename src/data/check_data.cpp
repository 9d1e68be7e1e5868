// rn50 data: check_dataset, the library side of `rn50 check-data` (see rn50/data.h).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/progress.h"
#include "data/decode.h"
#include "data/files.h"
#include "rn50/data.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

/// Up to `max` names joined with ", ", then "... (N in all)".
std::string name_list(const std::vector<std::string>& names, size_t max = 10) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

/// One split folder as ImageFolder would see it, plus what it would ignore.
struct SplitScan {
  bool exists = false;
  std::vector<std::string> classes;             ///< sorted class folder names
  std::vector<std::vector<std::string>> files;  ///< image files per class (recursive)
  std::vector<std::string> flat_images;         ///< image files directly in the split folder
};

SplitScan scan_split(const fs::path& dir) {
  SplitScan s;
  s.exists = is_dir(dir);
  if (!s.exists) return s;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_dir(it->path())) {
      s.classes.push_back(name);
    } else if (data::is_image_file_name(name)) {
      s.flat_images.push_back(name);
    }
  }
  std::sort(s.classes.begin(), s.classes.end());
  std::sort(s.flat_images.begin(), s.flat_images.end());
  for (const std::string& c : s.classes) {
    std::vector<std::string> f;
    const auto opts = fs::directory_options::follow_directory_symlink |
                      fs::directory_options::skip_permission_denied;
    std::error_code ec2;
    for (fs::recursive_directory_iterator it(dir / c, opts, ec2), end; !ec2 && it != end;
         it.increment(ec2)) {
      if (!is_dir(it->path()) && data::is_image_file_name(it->path().filename().string())) {
        f.push_back(it->path().string());
      }
    }
    s.files.push_back(std::move(f));
  }
  return s;
}

/// Throws rn50::Error (path and reason) when `path` cannot be read or decoded.
void validate_file(const std::string& path, bool decode, std::vector<uint8_t>& bytes,
                   data::ScaledRegion& region, Image& image) {
  data::read_file(path, bytes);
  data::validate_image_bytes(bytes, path, decode, region, image);
}

}  // namespace

void data::validate_image_bytes(const std::vector<uint8_t>& bytes, const std::string& path,
                                bool decode, ScaledRegion& region, Image& image) {
  const data::ImageHeader h = data::read_image_header(bytes.data(), bytes.size(), path);
  if (h.format == data::ImageFormat::jpeg) {
    RN50_CHECK(data::jpeg_has_eoi(bytes.data(), bytes.size()),
               "cannot decode JPEG '{}': the file is truncated (no end-of-image marker)", path);
    if (!decode) return;
    // 1/8 scale: all entropy-coded data is still decoded (and checked), the IDCT is cheap.
    data::decode_jpeg_region(
        bytes.data(), bytes.size(), path,
        [](const data::JpegFrame& f) {
          data::RegionPlan p;
          p.scale_num = 1;
          p.x1 = (f.width + 7) / 8;
          p.y1 = (f.height + 7) / 8;
          return p;
        },
        region);
    return;
  }
  if (!decode) return;
  const int64_t pixels = int64_t{h.width} * h.height;
  data::decode_png_reduced(bytes.data(), bytes.size(), path,
                           pixels > data::kMaxFullDecodePixels ? 8 : 1, image);
}

namespace {

/// Checks every file of `files` on `workers` threads; returns "path<TAB>reason" of the bad ones.
std::vector<std::string> check_files(const std::vector<std::string>& files, bool decode,
                                     int workers) {
  std::vector<std::string> bad;
  std::mutex mu;
  std::atomic<size_t> next{0}, done{0};
  // stderr: stdout carries the class list. Updated by the calling thread (which also checks).
  ProgressLine progress(stderr, 10.0);
  const auto t0 = std::chrono::steady_clock::now();
  auto work = [&](bool report) {
    std::vector<uint8_t> bytes;
    data::ScaledRegion region;
    Image image;
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      try {
        validate_file(files[i], decode, bytes, region, image);
      } catch (const Error& e) {
        std::lock_guard lk(mu);
        bad.push_back(files[i] + "\t" + e.what());
      }
      const size_t n = ++done;
      if (report) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        progress.update("check-data", static_cast<int64_t>(n), static_cast<int64_t>(files.size()),
                        s > 0 ? static_cast<double>(n) / s : 0.0);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < workers; ++t) threads.emplace_back(work, false);
  work(true);
  for (auto& t : threads) t.join();
  std::sort(bad.begin(), bad.end());
  return bad;
}

}  // namespace

DataCheckReport check_dataset(const std::string& image_root, const DataCheckOptions& opt) {
  RN50_CHECK(opt.workers >= 0, "check_dataset: workers must be >= 0 (got {})", opt.workers);
  DataCheckReport r;
  auto problem = [&](const char* kind, std::string msg) {
    r.problems.push_back({kind, std::move(msg)});
  };
  const fs::path root(image_root);
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    problem("missing_root", fmt::format("--image-root '{}' does not exist", image_root));
    return r;
  }
  if (!is_dir(root)) {
    problem("missing_root", fmt::format("--image-root '{}' is not a directory", image_root));
    return r;
  }
  const SplitScan train = scan_split(root / "train");
  const SplitScan val = scan_split(root / "val");
  for (const auto* sp : {&train, &val}) {
    const char* name = sp == &train ? "train" : "val";
    const std::string dir = (root / name).string();
    if (!sp->exists) {
      problem("missing_split", fmt::format("no {}/ folder: expected '{}/<class>/<image>' (an "
                                           "ImageFolder layout with train/ and val/)",
                                           name, dir));
      continue;
    }
    if (!sp->flat_images.empty()) {
      std::string hint =
          sp == &val
              ? "ILSVRC2012's validation archive unpacks flat: move each image into "
                "val/<synset>/ (e.g. with valprep.sh from the PyTorch ImageNet example, or from "
                "LOC_val_solution.csv)"
              : "move each image into train/<class>/";
      problem("flat_split",
              fmt::format("'{}' holds {} images directly (e.g. '{}') instead of in class folders, "
                          "which the loader ignores; {}",
                          dir, sp->flat_images.size(), sp->flat_images.front(), hint));
    }
    if (sp->classes.empty()) {
      if (sp->flat_images.empty()) {
        problem(
            "no_classes",
            fmt::format("'{}' holds no class folders (expected '{}/<class>/<image>')", dir, dir));
      }
      continue;
    }
    for (size_t c = 0; c < sp->classes.size(); ++c) {
      if (sp->files[c].empty()) {
        problem("empty_class",
                fmt::format("class folder '{}/{}' holds no image file (.jpg .jpeg .png)", dir,
                            sp->classes[c]));
      }
      (sp == &train ? r.train_images : r.val_images) += static_cast<int64_t>(sp->files[c].size());
    }
  }
  if (!train.classes.empty() && !val.classes.empty() && train.classes != val.classes) {
    std::vector<std::string> only_train, only_val;
    std::set_difference(train.classes.begin(), train.classes.end(), val.classes.begin(),
                        val.classes.end(), std::back_inserter(only_train));
    std::set_difference(val.classes.begin(), val.classes.end(), train.classes.begin(),
                        train.classes.end(), std::back_inserter(only_val));
    std::string msg = fmt::format(
        "train/ has {} classes and val/ {}, not the same set (labels are positions in the sorted "
        "class list, so they would not match)",
        train.classes.size(), val.classes.size());
    if (!only_train.empty()) msg += "; only in train/: " + name_list(only_train);
    if (!only_val.empty()) msg += "; only in val/: " + name_list(only_val);
    problem("class_mismatch", msg);
  }
  r.classes = !train.classes.empty() ? train.classes : val.classes;

  std::vector<std::string> files;
  for (const auto* sp : {&train, &val}) {
    for (const auto& f : sp->files) files.insert(files.end(), f.begin(), f.end());
  }
  int workers = opt.workers;
  if (workers == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    workers = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  workers = std::max(1, std::min<int>(workers, static_cast<int>(files.size())));
  r.unreadable = check_files(files, opt.decode, workers);
  r.checked_files = static_cast<int64_t>(files.size());
  for (const std::string& line : r.unreadable) {
    const size_t tab = line.find('\t');
    problem("unreadable",
            fmt::format("unreadable image '{}': {}", line.substr(0, tab), line.substr(tab + 1)));
  }
  return r;
}

}  // namespace rn50
