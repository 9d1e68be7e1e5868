// rn50 inference with data loading (rn50/inference.h time_engine_with_loader): per batch size,
// the whole path of a served or evaluated image timed on real files, as DLE's inference tables
// measure it (PaddlePaddle/Classification/RN50v1.5/inference.py benchmark_dataset: each batch's
// latency runs from the end of the previous batch to the end of this one, so it holds the wait
// for the loader, the host-side normalisation and the engine call). The loader decodes, resizes
// and crops on its own threads ahead of the consumer (rn50/data.h), as DALI does for DLE; the
// wait for it is the batch's data_time (DLE's name).
#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <ostream>

#include "core/check.h"
#include "core/report.h"
#include "core/stats.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "rn50/roofline.h"

namespace rn50 {

namespace {

/// The next batch of `src` with exactly `batch` images: an epoch's partial last batch is skipped
/// and the source restarts at the next epoch (its images again). Throws naming `what` when one
/// whole epoch has no full batch.
void next_full_batch(DataSource& src, int64_t batch, int* epoch, Batch& b, const std::string& what) {
  for (int pass = 0; pass < 2; ++pass) {
    while (src.next(b))
      if (b.size == batch) return;
    src.start_epoch(++*epoch);
  }
  RN50_FAIL("{}: no full batch of {} images in an epoch ({} images, {} unreadable); give a "
            "smaller batch size",
            what, batch, src.num_samples(), src.bad_samples());
}

}  // namespace

std::vector<InferBenchPoint> time_engine_with_loader(
    InferenceEngine& engine, const InferBenchConfig& cfg, const std::string& arch, int classes,
    const std::function<DataSource&(int batch)>& source_for, const Normalization& norm,
    const std::string& what, std::ostream& out, ReportWriter* report) {
  const std::string device =
      cfg.engine.device == "ref" ? std::string("ref") : resolve_device(cfg.engine.device).name;
  const double gflops_per_image =
      forward_flops(describe(arch_from_name(arch), classes), cfg.crop_size, cfg.crop_size) / 1e9;
  std::optional<PeakTable> peaks;
  if (!cfg.peak_file.empty()) peaks = PeakTable::load(cfg.peak_file);
  out << fmt::format(
      "inference with data loading: {} {} on {}, images of {} (decode, resize, {}x{} center "
      "crop on the loader's threads; normalise and the engine call on this one), {} timed "
      "batches after {}\n",
      arch, engine.precision(), device, what, cfg.crop_size, cfg.crop_size, cfg.steps,
      cfg.warmup_steps);
  out << fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8} {}\n", "batch",
                     "img/s", "avg ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "data ms",
                     "loader", "input");
  out.flush();
  auto host = make_backend("onednn");  // the normalisation, as measure_accuracy and predict
  std::vector<InferBenchPoint> points;
  for (int batch : cfg.batch_sizes) {
    DataSource& src = source_for(batch);
    int epoch = 0;
    src.start_epoch(epoch);
    Tensor x = Tensor::empty({batch, 3, cfg.crop_size, cfg.crop_size}, DType::f32,
                             cfg.input_layout);
    Batch b;
    // One batch, loader to logits; returns its wall seconds and the loader's share of them.
    auto call = [&](double* data_s) {
      const auto t0 = std::chrono::steady_clock::now();
      next_full_batch(src, batch, &epoch, b, what);
      const auto t1 = std::chrono::steady_clock::now();
      RN50_CHECK(b.images.h() == cfg.crop_size && b.images.w() == cfg.crop_size,
                 "{}: the loader gives {}x{} images, the benchmark times {}x{}", what,
                 b.images.h(), b.images.w(), cfg.crop_size, cfg.crop_size);
      host->normalize_u8(b.images.slice0(0, batch), norm.mean, norm.std, x);
      engine.run(x);
      const auto t2 = std::chrono::steady_clock::now();
      *data_s = std::chrono::duration<double>(t1 - t0).count();
      return std::chrono::duration<double>(t2 - t0).count();
    };
    double unused = 0;
    for (int i = 0; i < cfg.warmup_steps; ++i) call(&unused);
    std::vector<double> ms;
    double total = 0, data_total = 0;
    for (int i = 0; i < cfg.steps; ++i) {
      double data_s = 0;
      const double s = call(&data_s);
      total += s;
      data_total += data_s;
      ms.push_back(1e3 * s);
    }
    InferBenchPoint p;
    p.batch_size = batch;
    p.steps = cfg.steps;
    p.ips = static_cast<double>(batch) * cfg.steps / total;
    p.latency_avg_ms = 1e3 * total / cfg.steps;
    p.latency_p50_ms = percentile(ms, 50);
    p.latency_p90_ms = percentile(ms, 90);
    p.latency_p95_ms = percentile(ms, 95);
    p.latency_p99_ms = percentile(ms, 99);
    p.data_time = data_total / cfg.steps;
    p.data_share = total > 0 ? data_total / total : 0.0;
    ReportRecord r("infer_benchmark");
    r.set("batch_size", batch)
        .set("infer.ips", p.ips)
        .set("infer.latency_avg_ms", p.latency_avg_ms)
        .set("infer.latency_p50_ms", p.latency_p50_ms)
        .set("infer.latency_p90_ms", p.latency_p90_ms)
        .set("infer.latency_p95_ms", p.latency_p95_ms)
        .set("infer.latency_p99_ms", p.latency_p99_ms)
        .set("steps", cfg.steps)
        .set("warmup_steps", cfg.warmup_steps)
        .set("arch", arch)
        .set("num_of_class", classes)
        .set("crop_size", cfg.crop_size)
        .set("precision", engine.precision())
        .set("device", device)
        .set("input", std::string("loader"))
        .set("data_time", p.data_time)
        .set("data_share", p.data_share)
        .set("image_root", what);
    set_roofline_fields(r, gflops_per_image, p.ips, peaks ? &*peaks : nullptr, engine.precision(),
                        device);
    out << fmt::format("{:>6} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.2f} "
                       "{:>7.1f}% loader\n",
                       batch, p.ips, p.latency_avg_ms, p.latency_p50_ms, p.latency_p90_ms,
                       p.latency_p95_ms, p.latency_p99_ms, 1e3 * p.data_time,
                       100 * p.data_share);
    out.flush();
    if (report) report->write(r);
    points.push_back(p);
  }
  return points;
}

}  // namespace rn50
