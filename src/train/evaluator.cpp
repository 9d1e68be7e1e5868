#include "train/evaluator.h"

#include <fmt/format.h>

#include <cstdio>
#include <vector>

#include "core/check.h"
#include "train/checkpoint.h"
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

EvalResult evaluate(ResNet& model, Backend& backend, DataSource& source, double label_smoothing,
                    int print_interval, int epoch, Communicator* comm) {
  InputStage input(backend, model.options().layout, model.options().compute_dtype,
                   model.options().num_classes, 1);
  const int64_t k = model.options().num_classes;
  MetricSums sums;
  Tensor host_logits;
  const auto t0 = ThroughputMeter::Clock::now();
  source.start_epoch(epoch);
  const int64_t nb = source.batches_per_epoch();
  Batch b;
  int64_t i = 0;
  while (source.next(b)) {
    ++i;
    if (comm) comm->heartbeat();
    if (b.size <= 0) continue;
    input.load(b);
    const Tensor& logits = model.forward(input.x(), /*train=*/false);
    RN50_CHECK(logits.ndim() == 2 && logits.dim(1) == k, "model returned logits {}, expected "
               "(N, {})", logits.str(), k);
    if (!host_logits.defined() || host_logits.shape() != logits.shape())
      host_logits = Tensor::empty(logits.shape(), DType::f32);
    backend.copy(logits, host_logits);
    backend.synchronize();
    const float* lg = host_logits.data_as<float>();
    const int32_t* lb = b.labels.data_as<int32_t>();
    double loss = 0;
    for (int64_t r = 0; r < b.size; ++r)  // labels checked by InputStage::upload
      loss += smoothed_xent(lg + r * k, k, lb[r], label_smoothing);
    sums.add_loss(loss / static_cast<double>(b.size), b.size);
    sums.add_topk(topk_correct(lg, b.size, k, lb), b.size);
    if (print_interval > 0 && (i % print_interval == 0 || i == nb)) {
      const double s = seconds_between(t0, ThroughputMeter::Clock::now());
      std::printf("eval step %lld/%lld loss %.4f top1 %.2f%% top5 %.2f%% img/s %.1f\n",
                  static_cast<long long>(i), static_cast<long long>(nb), sums.loss(),
                  sums.top1_pct(), sums.top5_pct(),
                  s > 0 ? static_cast<double>(sums.acc_samples) / s : 0.0);
      std::fflush(stdout);
    }
  }
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
  return r;
}

}  // namespace rn50
