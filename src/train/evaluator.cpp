#include "train/evaluator.h"

#include <fmt/format.h>

#include <cstdio>
#include <vector>

#include "core/check.h"
#include "core/progress.h"
#include "model/input_stage.h"
#include "train/metrics.h"

namespace rn50 {

void allreduce_metric_sums(Communicator& comm, MetricSums& sums, int64_t& bad) {
  std::vector<double> v{sums.loss_sum,
                        static_cast<double>(sums.loss_samples),
                        static_cast<double>(sums.top1),
                        static_cast<double>(sums.top5),
                        static_cast<double>(sums.acc_samples),
                        static_cast<double>(bad)};
  comm.allreduce_sum_host(v);
  sums.loss_sum = v[0];
  sums.loss_samples = static_cast<int64_t>(v[1]);
  sums.top1 = static_cast<int64_t>(v[2]);
  sums.top5 = static_cast<int64_t>(v[3]);
  sums.acc_samples = static_cast<int64_t>(v[4]);
  bad = static_cast<int64_t>(v[5]);
}

void set_val_fields(ReportRecord& r, const EvalResult& ev) {
  r.set("val.loss", ev.loss);
  r.set("val.top1", ev.top1);
  r.set("val.top5", ev.top5);
  r.set("val.ips", ev.ips);
  r.set("val.images", ev.images);
  r.set("val.bad_samples", ev.bad_samples);
  r.set("val.data_time", ev.data_time);
  r.set("val.compute_time", ev.compute_time);
  r.set("val.batch_time", ev.batch_time);
}

EvalResult evaluate(ResNet& model, Backend& backend, DataSource& source, double label_smoothing,
                    int print_interval, int epoch, Communicator* comm, const Normalization& norm) {
  const ModelOptions& o = model.options();
  return evaluate([&model](const Tensor& x) { return model.forward(x, /*train=*/false); },
                  o.num_classes, o.layout, o.compute_dtype, backend, source, label_smoothing,
                  print_interval, epoch, comm, norm, o.input_channels);
}

EvalResult evaluate(const EvalForward& forward, int64_t num_classes, Layout layout, DType dtype,
                    Backend& backend, DataSource& source, double label_smoothing,
                    int print_interval, int epoch, Communicator* comm, const Normalization& norm,
                    int channels) {
  InputStage input(backend, layout, dtype, static_cast<int>(num_classes), 1, norm,
                   /*reversed_labels=*/false, channels);
  const int64_t k = num_classes;
  // Per-batch results stay on the device and are read back every `chunk` batches: the mean
  // loss of the batch's valid rows, and its top-1/top-5 hits.
  const int64_t chunk = print_interval > 0 ? print_interval : 64;
  ProgressLine progress(stdout, 0);  // every print_interval batches; in place on a terminal
  Tensor loss_hist = backend.alloc({chunk}, DType::f32);
  Tensor hits_hist = backend.alloc({2 * chunk}, DType::f32);
  Tensor probs;
  std::vector<int64_t> pending;  // valid rows of each batch since the last read-back
  MetricSums sums;
  const auto t0 = ThroughputMeter::Clock::now();
  auto read_back = [&] {
    if (pending.empty()) return;
    const int64_t n = static_cast<int64_t>(pending.size());
    Tensor hl = Tensor::empty({n}, DType::f32), hh = Tensor::empty({2 * n}, DType::f32);
    backend.copy(loss_hist.slice0(0, n), hl);
    backend.copy(hits_hist.slice0(0, 2 * n), hh);
    backend.synchronize();
    for (int64_t b = 0; b < n; ++b) {
      const int64_t rows = pending[static_cast<size_t>(b)];
      sums.add_loss(hl.data_as<float>()[b], rows);
      sums.add_topk({static_cast<int64_t>(hh.data_as<float>()[2 * b]),
                     static_cast<int64_t>(hh.data_as<float>()[2 * b + 1])},
                    rows);
    }
    pending.clear();
  };
  source.start_epoch(epoch);
  const int64_t nb = source.batches_per_epoch();
  Batch b;
  int64_t i = 0;
  double data_s = 0;  // waiting for batches
  for (auto tw = ThroughputMeter::Clock::now(); source.next(b);
       tw = ThroughputMeter::Clock::now()) {
    data_s += seconds_between(tw, ThroughputMeter::Clock::now());
    ++i;
    if (comm) comm->heartbeat();
    if (b.size <= 0) continue;
    input.load(b);
    const Tensor logits = forward(input.x());
    RN50_CHECK(logits.ndim() == 2 && logits.dim(1) == k, "model returned logits {}, expected "
               "(N, {})", logits.str(), k);
    if (!probs.defined() || probs.dim(0) < logits.dim(0))
      probs = backend.alloc({logits.dim(0), k}, DType::f32);
    // Only the first Batch::size rows are samples (a short last batch is padded).
    const Tensor z = logits.slice0(0, b.size), labels = input.labels().slice0(0, b.size);
    Tensor p = probs.slice0(0, b.size);
    const int64_t slot = static_cast<int64_t>(pending.size());
    Tensor loss = loss_hist.slice0(slot, slot + 1), hits = hits_hist.slice0(2 * slot, 2 * slot + 2);
    backend.softmax_xent_fwd(z, labels, static_cast<float>(label_smoothing), loss, p);
    backend.topk_hits(z, labels, hits);
    pending.push_back(b.size);
    if (static_cast<int64_t>(pending.size()) == chunk) read_back();
    if (print_interval > 0 && (i % print_interval == 0 || i == nb)) {
      read_back();
      const double s = seconds_between(t0, ThroughputMeter::Clock::now());
      progress.show(fmt::format("eval step {}/{} loss {:.4f} top1 {:.2f}% top5 {:.2f}% img/s {:.1f}",
                                i, nb, sums.loss(), sums.top1_pct(), sums.top5_pct(),
                                s > 0 ? static_cast<double>(sums.acc_samples) / s : 0.0),
                    /*force=*/true);
    }
  }
  read_back();
  int64_t bad = source.bad_samples();
  // Exact global metrics: integer counts and the loss sum of every rank, one allreduce.
  if (comm && comm->world_size() > 1) allreduce_metric_sums(*comm, sums, bad);
  EvalResult r;
  r.seconds = seconds_between(t0, ThroughputMeter::Clock::now());
  r.images = sums.acc_samples;
  r.loss = sums.loss();
  r.top1 = sums.top1_pct();
  r.top5 = sums.top5_pct();
  r.ips = r.seconds > 0 ? static_cast<double>(r.images) / r.seconds : 0.0;
  r.bad_samples = bad;
  if (i > 0) {
    r.batch_time = r.seconds / static_cast<double>(i);
    r.data_time = data_s / static_cast<double>(i);
    r.compute_time = r.batch_time - r.data_time;
  }
  return r;
}

}  // namespace rn50
