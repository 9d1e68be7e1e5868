// rn50 data: `rn50 check-data` for every store (data/stores.h): ImageFolder through
// check_dataset (class folders, splits, every file); file lists, TFRecord and WebDataset by
// reading every sample of each split (record CRCs, tar headers, labels) and checking its image,
// with per-shard counts of samples and damaged ones.
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "data/check_store.h"
#include "data/decode.h"

namespace rn50::data {

DataCheckReport check_store(const StoreOptions& store, const DataCheckOptions& opt) {
  const DataFormat format = detect_format(store);
  if (format == DataFormat::imagefolder) return check_dataset(store.root, opt);
  DataCheckReport r;
  r.format = data_format_name(format);
  int workers = opt.workers;
  if (workers <= 0) {
    cpu_set_t set;
    workers = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  std::vector<std::string> class_lists[2];
  for (Split split : {Split::train, Split::val}) {
    const char* name = split == Split::train ? "train" : "val";
    if (!has_split(store, split)) {
      r.problems.push_back({"missing_split", fmt::format("no {} split ({} data)", name,
                                                         data_format_name(format))});
      continue;
    }
    std::string what;
    std::shared_ptr<const SampleIndex> samples;
    try {
      samples = open_split(store, split, &what);
    } catch (const Error& e) {
      r.problems.push_back({"unreadable", e.what()});
      continue;
    }
    class_lists[split == Split::train ? 0 : 1] = samples->classes();
    const int64_t n = samples->size();
    (split == Split::train ? r.train_images : r.val_images) = n;
    const std::vector<int64_t> starts = samples->shard_starts();
    const std::vector<std::string> names = samples->shard_names();
    std::vector<DataCheckReport::Shard> shards(std::max<size_t>(starts.size(), 1));
    for (size_t s = 0; s < starts.size(); ++s) {
      shards[s].file = names[s];
      shards[s].samples = (s + 1 < starts.size() ? starts[s + 1] : n) - starts[s];
    }
    auto shard_of = [&](int64_t i) {
      return starts.empty() ? size_t{0}
                            : static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), i) -
                                                  starts.begin() - 1);
    };
    std::mutex mu;
    std::atomic<int64_t> next{0};
    auto work = [&] {
      std::vector<uint8_t> bytes;
      ScaledRegion region;
      Image image;
      for (int64_t i; (i = next.fetch_add(1)) < n;) {
        try {
          samples->read(i, bytes);
          validate_image_bytes(bytes, samples->name(i), opt.decode, region, image);
        } catch (const Error& e) {
          std::lock_guard lk(mu);
          ++shards[shard_of(i)].damaged;
          r.unreadable.push_back(samples->name(i) + "\t" + e.what());
        }
      }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < std::min<int64_t>(workers, std::max<int64_t>(n, 1)); ++t)
      threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    r.checked_files += n;
    if (!starts.empty()) r.shards.insert(r.shards.end(), shards.begin(), shards.end());
  }
  std::sort(r.unreadable.begin(), r.unreadable.end());
  for (const std::string& line : r.unreadable) {
    const size_t tab = line.find('\t');
    const std::string name = line.substr(0, tab), error = line.substr(tab + 1);
    // Record and member errors already start with the sample's name (shard@offset).
    r.problems.push_back({"unreadable", error.rfind(name, 0) == 0
                                            ? fmt::format("damaged sample {}", error)
                                            : fmt::format("damaged sample '{}': {}", name, error)});
  }
  if (!class_lists[0].empty() && !class_lists[1].empty() && class_lists[0] != class_lists[1])
    r.problems.push_back({"class_mismatch",
                          fmt::format("train has {} classes and val {}: labels would not match",
                                      class_lists[0].size(), class_lists[1].size())});
  r.classes = !class_lists[0].empty() ? class_lists[0] : class_lists[1];
  return r;
}

}  // namespace rn50::data
