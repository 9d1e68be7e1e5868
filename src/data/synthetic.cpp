// rn50 data: the synthetic source (random images and labels generated once, served zero-copy).
#include <algorithm>

#include "core/check.h"
#include "data/batch_buffer.h"
#include "data/rng.h"
#include "data/shard.h"
#include "rn50/data.h"

namespace rn50 {
namespace {

/// At most this many bytes of distinct synthetic images are generated; bigger datasets cycle
/// through them.
constexpr size_t kMaxSyntheticBytes = size_t{256} << 20;

class SyntheticSource final : public DataSource {
 public:
  SyntheticSource(int64_t num_samples, int num_classes, const LoaderOptions& opt)
      : opt_(opt), n_(num_samples) {
    RN50_CHECK(opt.batch_size > 0, "batch size must be positive (got {})", opt.batch_size);
    RN50_CHECK(opt.crop_size > 0, "crop size must be positive (got {})", opt.crop_size);
    RN50_CHECK(num_classes > 0, "synthetic data needs at least one class (got {})", num_classes);
    // Data parallelism: the same shard plan as the ImageFolder loader (data/shard.h), so every
    // rank gets the same number of batches and val counts each sample exactly once.
    plan_ = data::make_shard_plan(num_samples, opt.rank, opt.world_size, opt.batch_size,
                                  /*train=*/opt.drop_last, /*drop_last=*/opt.drop_last);
    RN50_CHECK(plan_.batches >= 1,
               "synthetic data needs at least one batch of samples per rank ({} samples, {} "
               "ranks, batch size {})",
               num_samples, opt.world_size, opt.batch_size);
    num_batches_ = plan_.batches;
    for (int c = 0; c < num_classes; ++c) classes_.push_back(fmt::format("class_{:04d}", c));

    // Distinct batches generated: all of them if they fit in kMaxSyntheticBytes, else as many
    // whole batches as fit (at least one); batch b of an epoch is distinct batch b % P.
    const data::BatchLayout one{opt.batch_size, opt.crop_size};
    const auto fit = static_cast<int64_t>(kMaxSyntheticBytes / one.total_bytes());
    distinct_ = std::clamp<int64_t>(fit, 1, num_batches_);
    data::SampleRng rng(opt.seed, 0x5e7, static_cast<uint64_t>(opt.rank));  // distinct per rank
    for (int64_t b = 0; b < distinct_; ++b) {
      // From opt.alloc_host when given (pinned on CUDA: uploaded without staging).
      auto s = opt.alloc_host ? data::allocate_with(opt.alloc_host, one.total_bytes())
                              : data::allocate_host_storage(one.total_bytes());
      auto* px = static_cast<uint8_t*>(s->ptr);
      for (size_t i = 0; i < one.image_bytes(); i += 8) {
        const uint64_t r = rng.next();
        for (size_t j = 0; j < 8 && i + j < one.image_bytes(); ++j) px[i + j] = uint8_t(r >> 8 * j);
      }
      auto* labels = reinterpret_cast<int32_t*>(px + one.label_offset());
      for (int i = 0; i < opt.batch_size; ++i) {
        labels[i] = static_cast<int32_t>(rng.randint(0, num_classes - 1));
      }
      batches_.push_back(data::batch_from_storage(s, one, opt.batch_size));
    }
  }

  int64_t num_samples() const override { return n_; }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  int64_t batches_per_epoch() const override { return num_batches_; }
  const std::vector<std::string>& classes() const override { return classes_; }
  void start_epoch(int) override { next_ = 0; }
  bool next(Batch& out) override {
    if (next_ >= num_batches_) return false;
    out = batches_[static_cast<size_t>(next_ % distinct_)];
    out.size = plan_.valid_rows(next_);  // val: empty shard slots at the end are not counted
    ++next_;
    return true;
  }
  int64_t bad_samples() const override { return 0; }
  int64_t epoch_samples() const override {
    int64_t v = 0;
    for (int64_t b = 0; b < num_batches_; ++b) v += plan_.valid_rows(b);
    return v;
  }

 private:
  LoaderOptions opt_;
  data::ShardPlan plan_;
  int64_t n_;
  int64_t num_batches_ = 0;
  int64_t distinct_ = 1;
  int64_t next_ = 0;
  std::vector<std::string> classes_;
  std::vector<Batch> batches_;
};

}  // namespace

/// See rn50/data.h. Images are uniform random bytes, labels uniform in [0, num_classes), both
/// drawn once from (opt.seed, opt.rank); every epoch serves the same batches in the same order.
/// Sharded like the ImageFolder loader (data/shard.h): with drop_last (train) each rank gets
/// floor(floor(N / world) / batch) full batches; without (val) ceil(ceil(N / world) / batch)
/// batches whose sizes add up, over the ranks, to exactly N. Batches share memory with the
/// source (zero-copy): consumers must treat them as read-only. Throws rn50::Error for
/// num_samples < batch_size or num_classes < 1.
std::unique_ptr<DataSource> make_synthetic_source(int64_t num_samples, int num_classes,
                                                  const LoaderOptions& opt) {
  return std::make_unique<SyntheticSource>(num_samples, num_classes, opt);
}

}  // namespace rn50
