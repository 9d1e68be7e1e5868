// rn50 data: the threaded ImageFolder loader.
//
// Work is handed out per sample: a ticket t of the epoch is sample t % N of batch t / N, so all
// workers cooperate on the oldest unfinished batch and batches come out in order by
// construction. At most `window` batches (workers * prefetch) are in flight or waiting for the
// consumer; workers block when they would start a batch beyond that. Each worker decodes into
// its own scratch image and writes the augmented sample straight into its slot of the batch
// buffer. Augmentation randomness is keyed by (seed, epoch, position in the epoch), so batches
// are identical whatever the number of workers.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/check.h"
#include "data/batch_buffer.h"
#include "data/decode.h"
#include "data/rng.h"
#include "data/transforms.h"
#include "rn50/data.h"

namespace rn50 {
namespace {

using data::BatchLayout;
using data::BatchPool;

/// Consecutive samples tried for one slot before the loader gives up (the slot's own sample and
/// its replacements).
constexpr int kMaxDecodeAttempts = 16;

/// The ImageFolder DataSource (see make_image_folder_source): index, epoch order, worker pool and
/// the ring of batches being assembled. All pipeline state is guarded by mu_.
class ImageFolderSource final : public DataSource {
 public:
  ImageFolderSource(const std::string& split_root, Split split, const LoaderOptions& opt)
      : index_(ImageFolderIndex::scan(split_root)),
        split_(split),
        opt_(opt),
        n_(static_cast<int64_t>(index_.samples.size())),
        pool_(BatchLayout{opt.batch_size, opt.crop_size}, 0) {
    RN50_CHECK(opt.batch_size > 0, "batch size must be positive (got {})", opt.batch_size);
    RN50_CHECK(opt.crop_size > 0, "crop size must be positive (got {})", opt.crop_size);
    RN50_CHECK(split == Split::train || opt.resize_short > 0,
               "resize_short must be positive (got {})", opt.resize_short);
    RN50_CHECK(opt.workers >= 0, "workers must be >= 0 (got {})", opt.workers);
    RN50_CHECK(opt.prefetch >= 1, "prefetch must be >= 1 (got {})", opt.prefetch);
    const auto& cls = index_.classes;
    RN50_CHECK(
        !(std::count(cls.begin(), cls.end(), "train") && std::count(cls.begin(), cls.end(), "val")),
        "'{}' holds 'train' and 'val' folders: pass the split folder ('{}/train' or "
        "'{}/val'), not the dataset root",
        split_root, split_root, split_root);
    drop_last_ = split == Split::train && opt.drop_last;
    num_batches_ = drop_last_ ? n_ / opt.batch_size : (n_ + opt.batch_size - 1) / opt.batch_size;
    RN50_CHECK(num_batches_ > 0, "'{}' has {} samples, fewer than one batch of {}", split_root, n_,
               opt.batch_size);
    total_ = drop_last_ ? num_batches_ * opt.batch_size : n_;
    int workers = opt.workers > 0
                      ? opt.workers
                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    window_ = std::max<int64_t>(2, int64_t{workers} * opt.prefetch);
    ring_.resize(static_cast<size_t>(window_));
    pool_ = BatchPool(BatchLayout{opt.batch_size, opt.crop_size}, static_cast<size_t>(window_) + 4);
    threads_.reserve(static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
  }

  ~ImageFolderSource() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();  // each worker finishes at most its current sample
  }

  int64_t num_samples() const override { return n_; }
  int num_classes() const override { return static_cast<int>(index_.classes.size()); }
  int64_t batches_per_epoch() const override { return num_batches_; }
  const std::vector<std::string>& classes() const override { return index_.classes; }

  void start_epoch(int epoch) override {
    std::unique_lock lk(mu_);
    active_ = false;  // no new tickets; wait for samples being decoded for the old epoch
    idle_cv_.wait(lk, [&] { return in_flight_ == 0; });
    epoch_ = epoch;
    if (split_ == Split::train) {
      order_ = data::epoch_permutation(n_, opt_.seed, static_cast<uint64_t>(epoch));
    } else if (order_.empty()) {
      order_.resize(static_cast<size_t>(n_));
      for (int64_t i = 0; i < n_; ++i) order_[static_cast<size_t>(i)] = i;
    }
    next_ticket_ = 0;
    consumed_ = 0;
    for (auto& s : ring_) s = Slot{};
    error_ = nullptr;
    {
      std::lock_guard blk(bad_mu_);
      bad_this_epoch_.clear();
    }
    active_ = true;
    lk.unlock();
    work_cv_.notify_all();
  }

  bool next(Batch& out) override {
    std::unique_lock lk(mu_);
    RN50_CHECK(active_ || error_, "DataSource::next() called before start_epoch()");
    if (consumed_ >= num_batches_) return false;
    Slot& slot = ring_[static_cast<size_t>(consumed_ % window_)];
    ready_cv_.wait(lk, [&] { return error_ || (slot.batch == consumed_ && slot.remaining == 0); });
    if (error_) std::rethrow_exception(error_);
    out = data::batch_from_storage(slot.buf, pool_.layout(), slot.size);
    slot = Slot{};  // drop our handle: the storage is recycled once the consumer drops `out`
    ++consumed_;
    lk.unlock();
    work_cv_.notify_all();
    return true;
  }

  int64_t bad_samples() const override {
    std::lock_guard lk(bad_mu_);
    return static_cast<int64_t>(bad_this_epoch_.size());
  }

 private:
  /// A batch being assembled: its index in the epoch, storage, valid rows, rows still to do.
  struct Slot {
    int64_t batch = -1;
    std::shared_ptr<Storage> buf;
    int64_t size = 0;
    int64_t remaining = 0;
  };

  void worker_loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      work_cv_.wait(lk, [&] {
        return stop_ || (active_ && !error_ && next_ticket_ < total_ &&
                         next_ticket_ / opt_.batch_size < consumed_ + window_);
      });
      if (stop_) return;
      const int64_t t = next_ticket_++;
      const int64_t b = t / opt_.batch_size, row = t % opt_.batch_size;
      Slot& slot = ring_[static_cast<size_t>(b % window_)];
      if (row == 0) start_batch(slot, b);
      const BatchLayout& l = pool_.layout();
      auto* base = static_cast<uint8_t*>(slot.buf->ptr);
      uint8_t* img = base + static_cast<size_t>(row) * 3 * l.crop * l.crop;
      auto* label = reinterpret_cast<int32_t*>(base + l.label_offset()) + row;
      const int epoch = epoch_;
      ++in_flight_;
      lk.unlock();
      std::exception_ptr err;
      try {
        produce(t, epoch, img, label);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      --in_flight_;
      if (err && !error_) error_ = err;
      if (--slot.remaining == 0 || err) ready_cv_.notify_all();
      if (in_flight_ == 0) idle_cv_.notify_all();
    }
  }

  /// Sets up ring slot for batch b (called under mu_ by the worker that takes its first row).
  void start_batch(Slot& slot, int64_t b) {
    slot.batch = b;
    slot.buf = pool_.acquire();
    slot.size = std::min<int64_t>(opt_.batch_size, total_ - b * opt_.batch_size);
    slot.remaining = slot.size;
    if (slot.size < opt_.batch_size) {  // short last batch (val): zero pixels, label -1 past size
      const BatchLayout& l = pool_.layout();
      auto* base = static_cast<uint8_t*>(slot.buf->ptr);
      const size_t per = size_t{3} * l.crop * l.crop;
      std::fill(base + slot.size * per, base + l.n * per, uint8_t{0});
      auto* labels = reinterpret_cast<int32_t*>(base + l.label_offset());
      std::fill(labels + slot.size, labels + l.n, -1);
    }
  }

  /// Decodes and augments the sample at epoch position `pos` into img/label. When a file cannot
  /// be decoded it is logged and counted, and the next samples of the epoch order are tried in
  /// turn (deterministically) until one decodes; throws after kMaxDecodeAttempts failures.
  void produce(int64_t pos, int epoch, uint8_t* img, int32_t* label) {
    thread_local std::vector<uint8_t> bytes;
    thread_local Image image;
    std::string last_error;
    for (int attempt = 0; attempt < kMaxDecodeAttempts; ++attempt) {
      const int64_t idx = order_[static_cast<size_t>((pos + attempt) % n_)];
      const auto& [path, cls] = index_.samples[static_cast<size_t>(idx)];
      try {
        data::read_file(path, bytes);
        data::decode_image(bytes.data(), bytes.size(), path, image);
        if (split_ == Split::train) {
          data::SampleRng rng(opt_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(pos),
                              static_cast<uint64_t>(attempt));
          data::train_transform(image, opt_.crop_size, rng, img);
        } else {
          data::eval_transform(image, opt_.resize_short, opt_.crop_size, img);
        }
        *label = cls;
        return;
      } catch (const Error& e) {
        last_error = e.what();
        note_bad(idx, path, last_error);
      }
    }
    RN50_FAIL("{} consecutive samples could not be decoded (epoch {}, position {}); last error: {}",
              kMaxDecodeAttempts, epoch, pos, last_error);
  }

  /// Counts a bad file for this epoch; logs it once per source.
  void note_bad(int64_t idx, const std::string& path, const std::string& reason) {
    std::lock_guard lk(bad_mu_);
    bad_this_epoch_.insert(idx);
    if (logged_bad_.insert(idx).second) {
      std::fprintf(stderr, "rn50: warning: skipping undecodable image '%s' (%s)\n", path.c_str(),
                   reason.c_str());
    }
  }

  ImageFolderIndex index_;
  Split split_;
  LoaderOptions opt_;
  int64_t n_;
  bool drop_last_ = true;
  int64_t num_batches_ = 0;
  int64_t total_ = 0;   ///< samples produced per epoch (num_batches * N with drop_last, else n)
  int64_t window_ = 2;  ///< batches in flight or ready at most

  std::mutex mu_;  // guards everything below up to bad_mu_
  std::condition_variable work_cv_, ready_cv_, idle_cv_;
  bool stop_ = false;
  bool active_ = false;
  int epoch_ = 0;
  std::vector<int64_t> order_;  ///< epoch order; written only while no worker is active
  int64_t next_ticket_ = 0;
  int64_t consumed_ = 0;
  int in_flight_ = 0;
  std::vector<Slot> ring_;
  BatchPool pool_;
  std::exception_ptr error_;

  mutable std::mutex bad_mu_;
  std::set<int64_t> bad_this_epoch_;
  std::set<int64_t> logged_bad_;

  std::vector<std::thread> threads_;  // last: started after every other member exists
};

}  // namespace

/// See rn50/data.h. `split_root` is the split folder itself (e.g. "<dataset>/train"), holding
/// one sub-folder per class; `split` selects the augmentation and the order (train: per-epoch
/// permutation of (seed, epoch), drop_last as opt.drop_last; val: file order, last batch short,
/// its rows past `size` zero pixels and label -1). Up to max(2, workers * prefetch) batches are
/// decoded ahead (each batch_size * 3 * crop^2 bytes). A file that fails to read or decode is
/// logged once to stderr, counted in bad_samples() for every epoch it is met, and its slot is
/// filled by the next sample of the epoch order (so batch sizes never change; in val that sample
/// then appears twice); 16 failures in a row make next() throw. Throws rn50::Error for a bad
/// folder (see ImageFolderIndex::scan), a dataset root holding train/ and val/, bad options, or
/// fewer samples than one batch.
std::unique_ptr<DataSource> make_image_folder_source(const std::string& split_root, Split split,
                                                     const LoaderOptions& opt) {
  return std::make_unique<ImageFolderSource>(split_root, split, opt);
}

}  // namespace rn50
