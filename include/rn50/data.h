// rn50: data sources. Every source yields batches of decoded, augmented uint8 RGB images in
// NHWC (logical (N,3,H,W), Layout::NHWC) plus int32 labels; normalisation happens on the device
// (Backend::normalize_u8).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rn50/tensor.h"

namespace rn50 {

/// ImageNet mean/std on [0,1] RGB (torchvision / DLE).
inline constexpr std::array<float, 3> kImageNetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd{0.229f, 0.224f, 0.225f};

/// The input normalisation x = (pixel / 255 - mean[c]) / std[c] per RGB channel, on [0,1]
/// values (DLE --normalize-mean / --normalize-std); ImageNet's by default.
struct Normalization {
  std::array<float, 3> mean = kImageNetMean;
  std::array<float, 3> std = kImageNetStd;
};

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

/// Allocator of host batch buffers: called as alloc(shape, dtype, layout) with shape {bytes},
/// DType::u8, Layout::NCHW; must return a host-accessible tensor of at least that many bytes
/// (e.g. pinned memory from Backend::alloc_host, which has this signature).
using HostAllocator = std::function<Tensor(std::vector<int64_t>, DType, Layout)>;

struct LoaderOptions {
  int batch_size = 256;
  int crop_size = 224;       ///< RandomResizedCrop size (train) / center crop (val)
  int resize_short = 256;    ///< val: shorter side resized to this before the center crop
  /// train: RandomResizedCrop's area fraction range and aspect-ratio range (torchvision's and
  /// DLE's defaults).
  std::array<double, 2> rand_crop_scale{0.08, 1.0};
  std::array<double, 2> rand_crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  /// Decode threads (a fixed pool); 0 = the CPUs this process may run on (sched_getaffinity)
  /// divided by local_ranks, at least 1.
  int workers = 0;
  int prefetch = 2;          ///< batches decoded ahead per worker (at least 2 in all)
  /// Train from shards (TFRecord, WebDataset): samples in the shuffle buffer that reorders the
  /// shard stream (data/rng.h shard_shuffle_order); 0 or 1 = shard order only.
  int64_t shuffle_buffer = 1024;
  uint64_t seed = 0;
  bool drop_last = true;     ///< train: drop the last partial batch (DLE); val: always false
  /// false (default): fast DALI-style decoding -- the crop is chosen from the header's size and
  /// only what it needs is decoded (JPEG DCT scaling by 1/2, 1/4, 1/8 and region-of-interest
  /// decoding), resized by the 14-bit SIMD resampler; same crops and flips as exact mode, pixels
  /// within a few levels of it. true: decode whole images and resample exactly as PIL /
  /// torchvision do (bit-identical batches; used by the parity tests). See data/sample.h.
  bool exact_decode = false;
  /// next() throws rn50::Error when the files that could not be decoded in the current epoch
  /// exceed this fraction of the samples this rank processes per epoch (train.bad_samples);
  /// below it each such file is skipped, logged once (path and reason) and counted. DLE has no
  /// such limit (a bad file stops its run); 0.001 = 1281 of ImageNet's 1.28M.
  double max_bad_fraction = 0.001;
  /// When the loader aborts for max_bad_fraction, the bad files are written here, one
  /// "path<TAB>reason" line each ("" = not written; the trainer passes e.g.
  /// "<report-file>.bad_files.txt").
  std::string bad_files_path;
  /// Data parallelism: this process is rank `rank` of `world_size` (see data/shard.h: disjoint
  /// strided shards of each epoch's order, the same number of batches on every rank, val covers
  /// every sample exactly once).
  int rank = 0;
  int world_size = 1;
  /// Processes sharing this machine (for the default number of workers).
  int local_ranks = 1;
  /// Pin worker thread i to CPU worker_cpus[i % size] (pthread_setaffinity_np); empty = no
  /// pinning. The pinning is logged to stderr; an invalid CPU id throws at construction.
  std::vector<int> worker_cpus;
  /// Allocator for the batch buffers (default: 64-byte-aligned malloc), called on the thread
  /// that creates the source: workers * prefetch + 1 buffers up front (more, up to
  /// workers * prefetch + 4 retained, only while the consumer keeps old batches), reused after.
  HostAllocator alloc_host;
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
  /// Every undecodable file met so far (all epochs), as "path<TAB>reason", sorted by path.
  virtual std::vector<std::string> bad_files() const { return {}; }
  /// Samples this process delivers per epoch (its shard; before bad files are removed in val).
  virtual int64_t epoch_samples() const { return num_samples(); }
};

/// The default number of loader workers (LoaderOptions::workers = 0): the CPUs this process may
/// run on (sched_getaffinity) divided by local_ranks, at least 1.
int default_loader_workers(int local_ranks = 1);

/// ImageFolder loader over root/train or root/val with worker threads and a bounded prefetch
/// queue. Train: RandomResizedCrop(crop, scale 0.08-1, ratio 3/4-4/3) + horizontal flip;
/// val: resize shorter side to resize_short (bilinear, antialiased like PIL), center crop.
std::unique_ptr<DataSource> make_image_folder_source(const std::string& split_root, Split split,
                                                     const LoaderOptions& opt);
/// Random uint8 images and labels (fixed per epoch), for --data synthetic benchmarks.
std::unique_ptr<DataSource> make_synthetic_source(int64_t num_samples, int num_classes,
                                                  const LoaderOptions& opt);

/// One problem found by check_dataset.
struct DataProblem {
  /// missing_root | missing_split | flat_split | no_classes | empty_class | class_mismatch |
  /// unreadable
  std::string kind;
  std::string message;  ///< names the folder or file, says what is wrong and what to do
};

struct DataCheckOptions {
  /// true: decode every file (JPEG at 1/8 scale: every entropy-coded block is still read, so
  /// corrupt data is found; PNG fully, row by row); false: read each file's header only (and
  /// check that a JPEG has its end-of-image marker).
  bool decode = true;
  int workers = 0;  ///< threads; 0 = the CPUs this process may run on
};

/// What check_dataset found. classes: the class list the loader will use (train's sorted class
/// folders, or val's when train/ is unusable).
struct DataCheckReport {
  /// The dataset's store: "imagefolder", "filelist", "tfrecord" or "webdataset".
  std::string format = "imagefolder";
  std::vector<std::string> classes;
  int64_t train_images = 0, val_images = 0;
  int64_t checked_files = 0;
  std::vector<std::string> unreadable;  ///< "path<TAB>reason", sorted
  std::vector<DataProblem> problems;
  /// Shard stores: per shard file, its samples and how many of them are damaged.
  struct Shard {
    std::string file;
    int64_t samples = 0, damaged = 0;
  };
  std::vector<Shard> shards;
  bool ok() const { return problems.empty(); }
};

/// Validates an ImageFolder dataset root before training (rn50 check-data): the root, train/ and
/// val/ exist; each split holds class folders and no images directly in it (a flat val/, as
/// ILSVRC2012's validation archive unpacks, is reported with a hint to sort it into class
/// folders); no class folder is without images (.jpg .jpeg .png, recursively, as ImageFolder
/// counts them); train/ and val/ hold the same class set (ImageFolder numbers classes by sorted
/// position, so any difference shifts labels); every image file can be read and decoded (or its
/// header parsed). Each problem is one DataProblem with a specific message. Never throws for a
/// bad dataset (only for bad options).
DataCheckReport check_dataset(const std::string& image_root, const DataCheckOptions& opt = {});

/// rn50 bench loader: times an ImageFolder loader on image_root/<split>.
/// How a dataset is stored (src/data/stores.h opens it): ImageFolder, a PaddleClas file list,
/// TFRecord shards (DLE TensorFlow's ImageNet conversion) or WebDataset tar shards.
enum class DataFormat { automatic, imagefolder, filelist, tfrecord, webdataset };
/// "auto", "imagefolder", "filelist", "tfrecord", "webdataset".
const char* data_format_name(DataFormat f);
/// Parses those names (any case); throws rn50::Error naming --data-format otherwise.
DataFormat parse_data_format(const std::string& name);

/// Where a dataset is (the flags of the same names).
struct StoreOptions {
  DataFormat format = DataFormat::automatic;  ///< --data-format
  std::string root;                            ///< --image-root
  std::string train_list, val_list;            ///< --train-list, --val-list
  std::string train_shards, val_shards;        ///< --train-shards, --val-shards (WebDataset)
  std::string idx_dir;                         ///< --data-idx-dir (TFRecord)
  int label_offset = 1;                        ///< --label-offset (TFRecord)
  int num_classes = 0;                         ///< --num-of-class (TFRecord without manifest)
};

struct LoaderBenchConfig {
  std::string image_root;
  /// The dataset (format, lists, shards); its root is image_root.
  StoreOptions store;
  Split split = Split::train;
  LoaderOptions loader;
  int64_t batches = 0;         ///< timed batches; 0 = the rest of one epoch after the warm-up
  int64_t warmup_batches = 2;  ///< untimed batches first (thread start-up, first allocations)
  std::string report_file;     ///< "" = none; else one JSON line is appended
};

struct LoaderBenchResult {
  double ips = 0;             ///< images per second of wall time (loader.ips)
  double seconds = 0;         ///< wall time of the timed batches
  double cpu_seconds = 0;     ///< user + system CPU time of the process meanwhile
  int64_t images = 0;         ///< valid images in the timed batches
  int workers = 0;
  std::string json;           ///< the JSON line (also appended to report_file)
};

/// Runs the loader for warmup_batches, then times `batches` more (continuing into the next epoch
/// if needed), consuming each batch as the trainer would (holding it until the next arrives).
/// JSON keys: "loader.ips", "loader.images", "loader.seconds", "loader.cpu_seconds",
/// "loader.ips_per_cpu_second", "loader.bad_samples", "workers", "batch_size", "split",
/// "exact_decode", "image_root". Throws rn50::Error for loader errors or an unwritable report.
LoaderBenchResult bench_loader(const LoaderBenchConfig& cfg);

}  // namespace rn50
