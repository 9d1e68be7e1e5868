// rn50: data sources. Every source yields batches of decoded, augmented uint8 RGB images in
// NHWC (logical (N,3,H,W), Layout::NHWC) plus int32 labels; normalisation happens on the device
// (Backend::normalize_u8).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rn50/tensor.h"

namespace rn50 {

/// ImageNet mean/std on [0,1] RGB (torchvision / DLE).
inline constexpr std::array<float, 3> kImageNetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd{0.229f, 0.224f, 0.225f};

/// A decoded 8-bit RGB image, row-major H x W x 3.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

/// One batch. images: u8 (N,3,H,W) Layout::NHWC host tensor; labels: i32 (N). `size` <= N is
/// the number of valid samples (eval's last batch may be short; rows past size are undefined).
struct Batch {
  Tensor images;
  Tensor labels;
  int64_t size = 0;
};

/// An ImageFolder split: classes = sorted sub-folder names (torchvision), samples sorted by
/// path within each class. Files with an image extension (.jpg .jpeg .png, any case) count.
struct ImageFolderIndex {
  std::vector<std::string> classes;
  std::vector<std::pair<std::string, int>> samples;  ///< (path, class index)
  /// Throws rn50::Error naming `root` when it does not exist or holds no class folders.
  static ImageFolderIndex scan(const std::string& root);
};

enum class Split { train, val };

struct LoaderOptions {
  int batch_size = 256;
  int crop_size = 224;       ///< RandomResizedCrop size (train) / center crop (val)
  int resize_short = 256;    ///< val: shorter side resized to this before the center crop
  int workers = 0;           ///< decode threads; 0 = hardware concurrency
  int prefetch = 2;          ///< batches queued ahead per worker
  uint64_t seed = 0;
  bool drop_last = true;     ///< train: drop the last partial batch (DLE); val: always false
};

/// A source of batches, one epoch at a time (ImageFolder loader, synthetic data).
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int num_classes() const = 0;
  virtual int64_t batches_per_epoch() const = 0;
  /// Class names (synsets for ImageFolder).
  virtual const std::vector<std::string>& classes() const = 0;
  /// Starts epoch `epoch`: reshuffles (train) from (seed, epoch) and begins prefetching.
  virtual void start_epoch(int epoch) = 0;
  /// Next batch of the epoch in order; false at the end. Blocks while workers decode.
  virtual bool next(Batch& out) = 0;
  /// Files skipped as undecodable in the current epoch (each also logged once with the reason).
  virtual int64_t bad_samples() const = 0;
};

/// ImageFolder loader over root/train or root/val with worker threads and a bounded prefetch
/// queue. Train: RandomResizedCrop(crop, scale 0.08-1, ratio 3/4-4/3) + horizontal flip;
/// val: resize shorter side to resize_short (bilinear, antialiased like PIL), center crop.
std::unique_ptr<DataSource> make_image_folder_source(const std::string& split_root, Split split,
                                                     const LoaderOptions& opt);
/// Random uint8 images and labels (fixed per epoch), for --data synthetic benchmarks.
std::unique_ptr<DataSource> make_synthetic_source(int64_t num_samples, int num_classes,
                                                  const LoaderOptions& opt);

}  // namespace rn50
