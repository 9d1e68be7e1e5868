// rn50 data: bench_loader, the library side of `rn50 bench loader` (see rn50/data.h).
#include <sys/resource.h>

#include <chrono>
#include <filesystem>

#include "core/check.h"
#include "core/report.h"
#include "data/sample_index.h"
#include "data/stores.h"
#include "rn50/data.h"

namespace rn50 {
namespace {

/// User + system CPU seconds of this process (all threads).
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

}  // namespace

LoaderBenchResult bench_loader(const LoaderBenchConfig& cfg) {
  RN50_CHECK(cfg.batches >= 0 && cfg.warmup_batches >= 0,
             "bench loader: --batches and --warmup-batches must be >= 0 (got {} and {})",
             cfg.batches, cfg.warmup_batches);
  const std::string split = cfg.split == Split::train ? "train" : "val";
  LoaderOptions lo = cfg.loader;
  if (cfg.split == Split::val) lo.drop_last = false;
  if (lo.workers == 0) lo.workers = default_loader_workers(lo.local_ranks);
  StoreOptions store = cfg.store;
  if (store.root.empty()) store.root = cfg.image_root;
  std::string dir;
  auto src = data::make_sample_source(data::open_split(store, cfg.split, &dir), cfg.split, lo, dir);
  const int64_t per_epoch = src->batches_per_epoch();
  int64_t timed = cfg.batches;
  if (timed == 0) timed = per_epoch - cfg.warmup_batches;
  RN50_CHECK(
      timed > 0,
      "bench loader: '{}' has {} batches of {} per epoch, none left after {} warm-up batches "
      "(pass --batches)",
      dir, per_epoch, lo.batch_size, cfg.warmup_batches);

  int epoch = 0;
  src->start_epoch(epoch);
  Batch b;
  auto next = [&] {  // next batch, rolling over into the next epoch
    while (!src->next(b)) src->start_epoch(++epoch);
  };
  for (int64_t i = 0; i < cfg.warmup_batches; ++i) next();
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  int64_t images = 0;
  for (int64_t i = 0; i < timed; ++i) {
    next();
    images += b.size;
  }
  LoaderBenchResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_seconds = process_cpu_seconds() - c0;
  r.images = images;
  r.ips = r.seconds > 0 ? double(images) / r.seconds : 0.0;
  r.workers = lo.workers;
  ReportRecord rec("loader");
  rec.set("loader.ips", r.ips);
  rec.set("loader.images", r.images);
  rec.set("loader.seconds", r.seconds);
  rec.set("loader.cpu_seconds", r.cpu_seconds);
  rec.set("loader.ips_per_cpu_second", r.cpu_seconds > 0 ? double(images) / r.cpu_seconds : 0.0);
  rec.set("loader.bad_samples", src->bad_samples());
  rec.set("workers", lo.workers);
  rec.set("batch_size", lo.batch_size);
  rec.set("split", split);
  rec.set("exact_decode", lo.exact_decode);
  rec.set("image_root", cfg.image_root);
  rec.set("data_format", data_format_name(data::detect_format(store)));
  r.json = rec.to_json().dump();
  if (!cfg.report_file.empty()) {
    ReportWriter w(cfg.report_file, ReportWriter::Mode::append);
    w.write(rec);
  }
  return r;
}

}  // namespace rn50
