// rn50 data: the threaded loader of every stored format (a data::SampleIndex: ImageFolder, file
// lists, TFRecord, WebDataset).
//
// Work is handed out per sample: ticket t of the epoch is row t % B of batch t / B of this rank's
// shard (data/shard.h), so all workers cooperate on the oldest unfinished batch and batches come
// out in order by construction. At most `window` batches (workers * prefetch) are in flight or
// waiting for the consumer; workers block when they would start a batch beyond that. Each worker
// decodes into its own scratch buffers and writes the augmented sample straight into its row of
// the batch buffer (a pooled host allocation, optionally from LoaderOptions::alloc_host, e.g.
// pinned memory). Augmentation randomness is keyed by (seed, epoch, position in the epoch order,
// attempt), so batches are identical whatever the number of workers or ranks.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/fileio.h"
#include "data/batch_buffer.h"
#include "data/decode.h"
#include "data/rng.h"
#include "data/sample.h"
#include "data/sample_index.h"
#include "data/shard.h"
#include "rn50/data.h"

namespace rn50 {
namespace {

using data::BatchLayout;
using data::BatchPool;

/// Samples tried for one train slot before the loader gives up (the slot's own sample and the
/// following ones of the epoch order).
constexpr int kMaxDecodeAttempts = 16;

/// The DataSource of a SampleIndex (see make_sample_source). Pipeline state is guarded by mu_,
/// bad-file bookkeeping by bad_mu_.
class SampleSource final : public DataSource {
 public:
  SampleSource(std::shared_ptr<const data::SampleIndex> samples, Split split,
               const LoaderOptions& opt, const std::string& what)
      : samples_(std::move(samples)),
        starts_(samples_->shard_starts()),
        split_(split),
        opt_(opt),
        n_(samples_->size()),
        pool_(BatchLayout{opt.batch_size, opt.crop_size}, 0) {
    RN50_CHECK(opt.batch_size > 0, "batch size must be positive (got {})", opt.batch_size);
    RN50_CHECK(opt.crop_size > 0, "crop size must be positive (got {})", opt.crop_size);
    RN50_CHECK(split == Split::train || opt.resize_short > 0,
               "resize_short must be positive (got {})", opt.resize_short);
    RN50_CHECK(opt.workers >= 0, "workers must be >= 0 (got {})", opt.workers);
    RN50_CHECK(opt.prefetch >= 1, "prefetch must be >= 1 (got {})", opt.prefetch);
    RN50_CHECK(opt.max_bad_fraction >= 0, "max_bad_fraction must be >= 0 (got {})",
               opt.max_bad_fraction);
    RN50_CHECK(opt.local_ranks >= 1, "local_ranks must be >= 1 (got {})", opt.local_ranks);
    RN50_CHECK(opt.shuffle_buffer >= 0, "shuffle buffer must be >= 0 (got {})",
               opt.shuffle_buffer);
    const bool train = split == Split::train;
    // Shard stores read their shards mostly in sequence: each rank a contiguous block.
    plan_ = data::make_shard_plan(n_, opt.rank, opt.world_size, opt.batch_size, train,
                                  opt.drop_last, /*contiguous=*/!starts_.empty());
    RN50_CHECK(plan_.batches > 0,
               "'{}' has {} samples: rank {} of {} gets {} per epoch, fewer than one batch of {}",
               what, n_, opt.rank, opt.world_size, n_ / opt.world_size, opt.batch_size);
    spec_.train = train;
    spec_.crop = opt.crop_size;
    spec_.resize_short = opt.resize_short;
    spec_.exact = opt.exact_decode;
    spec_.ranges = {opt.rand_crop_scale[0], opt.rand_crop_scale[1], opt.rand_crop_ratio[0],
                    opt.rand_crop_ratio[1]};
    max_bad_ = static_cast<int64_t>(opt.max_bad_fraction * static_cast<double>(plan_.slots));

    const int workers = opt.workers > 0 ? opt.workers : default_loader_workers(opt.local_ranks);
    window_ = std::max<int64_t>(2, int64_t{workers} * opt.prefetch);
    ring_.resize(static_cast<size_t>(window_));
    pool_ = BatchPool(BatchLayout{opt.batch_size, opt.crop_size}, static_cast<size_t>(window_) + 4,
                      opt.alloc_host);
    // Peak demand: one buffer per ring slot plus the batch the consumer holds (next() releases
    // the consumer's previous batch under the lock before a worker can refill that slot).
    pool_.reserve(static_cast<size_t>(window_) + 1);
    threads_.reserve(static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
    try {
      pin_workers();
    } catch (...) {
      shutdown();
      throw;
    }
  }

  ~SampleSource() override { shutdown(); }

  int64_t num_samples() const override { return n_; }
  int num_classes() const override { return static_cast<int>(samples_->classes().size()); }
  int64_t batches_per_epoch() const override { return plan_.batches; }
  const std::vector<std::string>& classes() const override { return samples_->classes(); }
  int64_t epoch_samples() const override {
    int64_t v = 0;
    for (int64_t b = 0; b < plan_.batches; ++b) v += plan_.valid_rows(b);
    return v;
  }

  void start_epoch(int epoch) override {
    std::unique_lock lk(mu_);
    active_ = false;  // no new tickets; wait for samples being decoded for the old epoch
    idle_cv_.wait(lk, [&] { return in_flight_ == 0; });
    epoch_ = epoch;
    if (split_ == Split::train) {
      order_ = starts_.empty() ? data::epoch_permutation(n_, opt_.seed, static_cast<uint64_t>(epoch))
                               : data::shard_shuffle_order(n_, starts_, opt_.shuffle_buffer,
                                                           opt_.seed, static_cast<uint64_t>(epoch));
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
    if (consumed_ >= plan_.batches) return false;
    Slot& slot = ring_[static_cast<size_t>(consumed_ % window_)];
    ready_cv_.wait(lk, [&] { return error_ || (slot.batch == consumed_ && slot.remaining == 0); });
    if (error_) std::rethrow_exception(error_);
    if (slot.dropped > 0) compact(slot);
    out = data::batch_from_storage(slot.buf, pool_.layout(), slot.rows - slot.dropped);
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

  std::vector<std::string> bad_files() const override {
    std::lock_guard lk(bad_mu_);
    return bad_list_locked();
  }

 private:
  /// A batch being assembled: its index in the epoch, storage, rows, rows still to do, and the
  /// val rows without a sample (empty shard slots, undecodable files), removed by compact().
  struct Slot {
    int64_t batch = -1;
    std::shared_ptr<Storage> buf;
    int64_t rows = 0;
    int64_t remaining = 0;
    int64_t dropped = 0;
    std::vector<uint8_t> ok;  ///< per row: holds a sample
  };

  void shutdown() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();  // each worker finishes at most its current sample
    }
  }

  /// Applies LoaderOptions::worker_cpus and logs the mapping; throws naming a CPU that fails.
  void pin_workers() {
    if (opt_.worker_cpus.empty()) return;
    std::string log;
    for (size_t i = 0; i < threads_.size(); ++i) {
      const int cpu = opt_.worker_cpus[i % opt_.worker_cpus.size()];
      RN50_CHECK(cpu >= 0 && cpu < CPU_SETSIZE, "loader worker CPU {} is out of range", cpu);
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      const int rc = pthread_setaffinity_np(threads_[i].native_handle(), sizeof(set), &set);
      RN50_CHECK(rc == 0, "cannot pin loader worker {} to CPU {}: {}", i, cpu, std::strerror(rc));
      log += fmt::format("{}{}->cpu{}", i ? ", " : "", i, cpu);
    }
    std::fprintf(stderr, "rn50: loader: %zu worker threads pinned: %s\n", threads_.size(),
                 log.c_str());
  }

  void worker_loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      work_cv_.wait(lk, [&] {
        return stop_ || (active_ && !error_ && next_ticket_ < plan_.slots &&
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
      bool ok = true;
      try {
        ok = produce(t, epoch, img, label);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      --in_flight_;
      if (err && !error_) error_ = err;
      if (!ok) {
        slot.ok[static_cast<size_t>(row)] = 0;
        ++slot.dropped;
      }
      if (--slot.remaining == 0 || err) ready_cv_.notify_all();
      if (in_flight_ == 0) idle_cv_.notify_all();
    }
  }

  /// Sets up ring slot for batch b (called under mu_ by the worker that takes its first row).
  void start_batch(Slot& slot, int64_t b) {
    slot.batch = b;
    slot.buf = pool_.acquire();
    slot.rows = plan_.batch_rows(b);
    slot.remaining = slot.rows;
    slot.dropped = 0;
    slot.ok.assign(static_cast<size_t>(opt_.batch_size), 1);
    if (slot.rows < opt_.batch_size) clear_rows(slot, slot.rows);
  }

  /// Rows [from, N) of the slot's buffer: zero pixels, label -1.
  void clear_rows(Slot& slot, int64_t from) {
    const BatchLayout& l = pool_.layout();
    auto* base = static_cast<uint8_t*>(slot.buf->ptr);
    const size_t per = size_t{3} * l.crop * l.crop;
    std::fill(base + from * per, base + l.n * per, uint8_t{0});
    auto* labels = reinterpret_cast<int32_t*>(base + l.label_offset());
    std::fill(labels + from, labels + l.n, -1);
  }

  /// Val: moves the rows holding samples to the front (keeping their order), clears the rest.
  void compact(Slot& slot) {
    const BatchLayout& l = pool_.layout();
    auto* base = static_cast<uint8_t*>(slot.buf->ptr);
    const size_t per = size_t{3} * l.crop * l.crop;
    auto* labels = reinterpret_cast<int32_t*>(base + l.label_offset());
    int64_t w = 0;
    for (int64_t r = 0; r < slot.rows; ++r) {
      if (!slot.ok[static_cast<size_t>(r)]) continue;
      if (w != r) {
        std::memcpy(base + w * per, base + r * per, per);
        labels[w] = labels[r];
      }
      ++w;
    }
    clear_rows(slot, w);
  }

  /// Decodes and augments slot `k` of this rank's epoch into img/label. Returns false when the
  /// row holds no sample (val: an empty shard slot or an undecodable file; its pixels are zero
  /// and its label -1). Train: an undecodable file is replaced by the next samples of the epoch
  /// order in turn (deterministically); throws after kMaxDecodeAttempts failures. Every bad file
  /// is logged and counted (note_bad throws past max_bad_fraction).
  bool produce(int64_t k, int epoch, uint8_t* img, int32_t* label) {
    thread_local std::vector<uint8_t> bytes;
    thread_local data::SampleScratch scratch;
    const size_t per = size_t{3} * opt_.crop_size * opt_.crop_size;
    const int64_t pos = plan_.position(k);
    if (pos < 0) {
      std::memset(img, 0, per);
      *label = -1;
      return false;
    }
    const int attempts = split_ == Split::train ? kMaxDecodeAttempts : 1;
    std::string last_error;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      const int64_t idx = order_[static_cast<size_t>((pos + attempt) % n_)];
      try {
        const int cls = samples_->read(idx, bytes);
        data::SampleRng rng(opt_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(pos),
                            static_cast<uint64_t>(attempt));
        data::process_sample(bytes.data(), bytes.size(), samples_->name(idx), spec_, &rng, img,
                             scratch);
        *label = cls;
        return true;
      } catch (const Error& e) {
        last_error = e.what();
        note_bad(idx, samples_->name(idx), last_error);
      }
    }
    if (split_ == Split::val) {
      std::memset(img, 0, per);
      *label = -1;
      return false;
    }
    RN50_FAIL("{} consecutive samples could not be decoded (epoch {}, position {}); last error: {}",
              kMaxDecodeAttempts, epoch, pos, last_error);
  }

  /// Counts a bad file for this epoch and logs it once per source; throws (after writing the
  /// list to bad_files_path) when this epoch's count passes max_bad_fraction.
  void note_bad(int64_t idx, const std::string& path, const std::string& reason) {
    std::lock_guard lk(bad_mu_);
    bad_this_epoch_.insert(idx);
    if (bad_all_.emplace(idx, reason).second) {
      if (reason.rfind(path, 0) == 0)  // a damaged record or member: the reason names it
        std::fprintf(stderr, "rn50: warning: skipping bad sample %s\n", reason.c_str());
      else
        std::fprintf(stderr, "rn50: warning: skipping undecodable image '%s' (%s)\n",
                     path.c_str(), reason.c_str());
    }
    const auto bad = static_cast<int64_t>(bad_this_epoch_.size());
    if (bad <= max_bad_) return;
    std::string where = "not written (no bad-files path was given)";
    if (!opt_.bad_files_path.empty()) {
      // Atomically (a temporary file renamed over it): another worker passing the limit too
      // rewrites the list while the trainer may already be reading the first one's.
      std::string text;
      for (const std::string& line : bad_list_locked()) text += line + '\n';
      try {
        write_file_atomic(opt_.bad_files_path, text);
        where = fmt::format("listed in '{}'", opt_.bad_files_path);
      } catch (const Error& e) {
        where = fmt::format("not listed ({})", e.what());
      }
    }
    RN50_FAIL(
        "too many undecodable images: {} in this epoch so far, more than max-bad-fraction "
        "{} of the {} samples this process reads per epoch ({} allowed); the bad files are "
        "{}; last: '{}' ({})",
        bad, opt_.max_bad_fraction, plan_.slots, max_bad_, where, path, reason);
  }

  std::vector<std::string> bad_list_locked() const {
    std::vector<std::string> out;
    for (const auto& [idx, reason] : bad_all_) out.push_back(samples_->name(idx) + "\t" + reason);
    std::sort(out.begin(), out.end());
    return out;
  }

  std::shared_ptr<const data::SampleIndex> samples_;
  std::vector<int64_t> starts_;  ///< the store's shard starts (empty: one file per sample)
  Split split_;
  LoaderOptions opt_;
  int64_t n_;
  data::ShardPlan plan_;
  data::SampleSpec spec_;
  int64_t max_bad_ = 0;  ///< bad files per epoch tolerated
  int64_t window_ = 2;   ///< batches in flight or ready at most

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
  std::map<int64_t, std::string> bad_all_;  ///< index -> reason, every bad file met

  std::vector<std::thread> threads_;  // last: started after every other member exists
};

}  // namespace

int default_loader_workers(int local_ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0
                       ? CPU_COUNT(&set)
                       : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cpus / std::max(1, local_ranks));
}

/// See rn50/data.h. `split_root` is the split folder itself (e.g. "<dataset>/train"), holding
/// one sub-folder per class; `split` selects the augmentation and the order (train: per-epoch
/// permutation of (seed, epoch), sharded and batched per data/shard.h; val: file order, the last
/// batch short, its rows past `size` zero pixels and label -1). Up to max(2, workers * prefetch)
/// batches are decoded ahead (each batch_size * 3 * crop^2 bytes). A file that fails to read or
/// decode is logged once to stderr (path and reason) and counted in bad_samples() for every
/// epoch it is met. Train: its slot takes the next sample of the epoch order (batch sizes never
/// change); 16 failures in a row make next() throw. Val: the sample is left out of its batch
/// (the batch's `size` shrinks; the valid rows stay first and in order), never replaced by a
/// duplicate. next() throws once an epoch's bad files exceed max_bad_fraction. Throws
/// rn50::Error for a bad folder (see ImageFolderIndex::scan), a dataset root holding train/ and
/// val/, bad options, or fewer samples per rank than one batch (train with drop_last).
std::unique_ptr<DataSource> make_image_folder_source(const std::string& split_root, Split split,
                                                     const LoaderOptions& opt) {
  ImageFolderIndex index = ImageFolderIndex::scan(split_root);
  const auto& cls = index.classes;
  RN50_CHECK(
      !(std::count(cls.begin(), cls.end(), "train") && std::count(cls.begin(), cls.end(), "val")),
      "'{}' holds 'train' and 'val' folders: pass the split folder ('{}/train' or "
      "'{}/val'), not the dataset root",
      split_root, split_root, split_root);
  return data::make_sample_source(data::image_folder_samples(std::move(index)), split, opt,
                                  split_root);
}

std::unique_ptr<DataSource> data::make_sample_source(std::shared_ptr<const SampleIndex> samples,
                                                     Split split, const LoaderOptions& opt,
                                                     const std::string& what) {
  return std::make_unique<SampleSource>(std::move(samples), split, opt, what);
}

}  // namespace rn50
