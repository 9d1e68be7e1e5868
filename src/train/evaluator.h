// rn50: one evaluation pass over a (val) DataSource with forward(train=false).
#pragma once

#include <cstdint>
#include <functional>

#include "core/report.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/parallel.h"
#include "rn50/model.h"
#include "train/metrics.h"

namespace rn50 {

struct EvalResult {
  double loss = 0;     ///< mean label-smoothed cross-entropy over the samples (DLE's val loss)
  double top1 = 0;     ///< percent
  double top5 = 0;     ///< percent
  double ips = 0;      ///< images / wall seconds of the whole pass (data included)
  int64_t images = 0;  ///< samples evaluated (each batch counted by Batch::size)
  double seconds = 0;
  int64_t bad_samples = 0;
  /// Mean seconds per batch (DLE's val.data_time, val.compute_time, val.batch_time): waiting
  /// for the batch, the rest of the batch (upload, forward, loss; the host's view: on GPUs the
  /// device's work shows in the batches that read results back), and the whole batch.
  double data_time = 0, compute_time = 0, batch_time = 0;
};

/// The val.* fields of a report record from an evaluation pass: val.loss, val.top1, val.top5,
/// val.ips, val.images, val.bad_samples, val.data_time, val.compute_time, val.batch_time.
void set_val_fields(ReportRecord& r, const EvalResult& ev);

/// Sums `sums` (loss sum, sample counts, top-1/top-5 correct) and `bad` over every rank in one
/// host allreduce, in place; exact for the counts (doubles hold integers up to 2^53).
void allreduce_metric_sums(Communicator& comm, MetricSums& sums, int64_t& bad);

/// Evaluates `model` on every batch of `source` (epoch `epoch` of the source; val sources do
/// not shuffle). Loss (Backend::softmax_xent_fwd, the training loss) and top-1/top-5
/// (Backend::topk_hits) are computed on the device next to the logits over the first
/// Batch::size rows of each batch, and read back every print_interval batches (64 when 0).
/// print_interval > 0 prints a progress line every that many batches.
/// comm (data parallelism; null = one process): each rank evaluates its shard (every sample in
/// exactly one shard), then (loss sum, top-1 and top-5 correct, count, bad files) are summed
/// over the ranks in one allreduce, so every rank returns the exact global result whatever the
/// world size; the watchdog heartbeat is given every batch.
/// norm: the input normalisation the model was trained with (ImageNet's by default).
EvalResult evaluate(ResNet& model, Backend& backend, DataSource& source, double label_smoothing,
                    int print_interval, int epoch = 0, Communicator* comm = nullptr,
                    const Normalization& norm = {});

/// The logits (N, classes) f32 of an input batch x (N, C, H, W) as InputStage makes it; memory
/// the backend's ops can read (the CPU backends: any host tensor).
using EvalForward = std::function<Tensor(const Tensor& x)>;

/// The same pass with any forward function (the inference engine's run() in `rn50 eval` on the
/// CPU): inputs are staged in `layout` and `dtype` with `channels` (3, or 4 with a zero fourth
/// channel) for a `num_classes`-way model.
EvalResult evaluate(const EvalForward& forward, int64_t num_classes, Layout layout, DType dtype,
                    Backend& backend, DataSource& source, double label_smoothing,
                    int print_interval, int epoch = 0, Communicator* comm = nullptr,
                    const Normalization& norm = {}, int channels = 3);

}  // namespace rn50
