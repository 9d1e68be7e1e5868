// rn50 data: the samples of one split, however they are stored — ImageFolder files, a file list
// (PaddleClas), TFRecord shards (DLE TensorFlow's ImageNet conversion, with DALI's index
// files), WebDataset tar shards — as one random-access index the loader (data/loader.cpp)
// reads from: sample i's encoded image bytes and its label. Stores that keep samples together
// in shard files say where each shard starts, so that the epoch order can shuffle shards and
// read them mostly in sequence (data/epoch_order.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rn50/data.h"

namespace rn50::data {

/// Most classes a store's labels may imply (labels 0 .. kMaxClasses - 1): a label read from a
/// file list or a .cls member sizes the class list, so a corrupt one must not ask for billions
/// of names. ImageNet-21k has 21,841 classes.
inline constexpr int kMaxClasses = 1 << 20;

class SampleIndex {
 public:
  virtual ~SampleIndex() = default;
  /// Samples in the split.
  virtual int64_t size() const = 0;
  /// Class names by label (synsets for ImageFolder; from a manifest or numbered otherwise).
  virtual const std::vector<std::string>& classes() const = 0;
  /// Reads sample i: its encoded image (JPEG or PNG) into `bytes` (resized; capacity reused)
  /// and returns its label, 0-based and below classes().size(). Thread-safe. Throws rn50::Error
  /// naming the sample (name(i)) when it cannot be read: an unreadable file, a damaged record
  /// (CRC, framing, truncation), a missing or out-of-range label.
  virtual int read(int64_t i, std::vector<uint8_t>& bytes) const = 0;
  /// Names sample i in messages and bad-file lists: a file path, "shard@offset" (TFRecord),
  /// "shard.tar:member" (WebDataset).
  virtual std::string name(int64_t i) const = 0;
  /// For shard stores: the first sample of each shard, ascending, starting with 0 (samples
  /// [starts[s], starts[s + 1]) live in shard s, read in that order most cheaply). Empty for
  /// stores of one file per sample.
  virtual std::vector<int64_t> shard_starts() const { return {}; }
  /// The shard files, as shard_starts() numbers them (empty with it).
  virtual std::vector<std::string> shard_names() const { return {}; }
};

/// The loader of `samples` (as make_image_folder_source, rn50/data.h, for any store): workers
/// decode and augment into pooled batches; train order: a permutation of (seed, epoch), or for
/// shard stores (shard_starts non-empty) shard_shuffle_order with LoaderOptions::shuffle_buffer
/// and a contiguous block per rank (data/shard.h). A sample read() refuses is a bad sample,
/// named by name(), counted against max_bad_fraction. `what` names the split in messages.
/// Throws rn50::Error for bad options or fewer samples per rank than one batch.
std::unique_ptr<DataSource> make_sample_source(std::shared_ptr<const SampleIndex> samples,
                                               Split split, const LoaderOptions& opt,
                                               const std::string& what);

/// An ImageFolder split (ImageFolderIndex::scan) as a SampleIndex: the files themselves.
std::shared_ptr<const SampleIndex> image_folder_samples(ImageFolderIndex index);

/// A file list (PaddleClas' train_list.txt / val_list.txt): one "relative/path label" line per
/// sample, paths relative to `root`, labels 0-based integers (blank lines skipped). Classes:
/// max label + 1, named by the folder of its files when every label has a folder of its own
/// (e.g. "n01440764/..."), else "class_<i>". Throws rn50::Error naming the list file and line
/// for a malformed line, a label that is negative or not below kMaxClasses, or an empty list.
std::shared_ptr<const SampleIndex> file_list_samples(const std::string& list_file,
                                                     const std::string& root);

}  // namespace rn50::data
