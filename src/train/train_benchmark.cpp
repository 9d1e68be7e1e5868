// rn50: `rn50 train --benchmark` (a driver of train/session.h), also each run of a
// `rn50 bench train` sweep: images/s, the GFLOP/s they are and, with --peak-file, their share
// of the measured peak (rn50/roofline.h); with --profile, the per-op profile of the measured
// steps (rn50/profile.h).
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/check.h"
#include "rn50/profile.h"
#include "rn50/roofline.h"
#include "train/metrics.h"
#include "train/session.h"

namespace rn50 {

namespace {

/// The gradient allreduce of one step timed on its own (blocking), and the part of it the
/// measured steps waited for after backward (the rest was hidden under backward); into `rec`.
void report_allreduce(Session& s, ReportRecord& rec, int64_t measured_steps,
                      double comm_wait_at_warm) {
  GradBucketer* bucketer = s.bucketer();
  if (!bucketer || measured_steps <= 0) return;
  const double exposed = (s.step().comm_wait_seconds() - comm_wait_at_warm) /
                         static_cast<double>(measured_steps);
  Tensor slab = s.backend->alloc({s.model->num_params()}, DType::f32);
  s.backend->copy(s.model->grad_slab(), slab);
  s.comm().allreduce_sum(slab);  // warm-up
  s.backend->synchronize();
  const int reps = 5;
  const auto t0 = ThroughputMeter::Clock::now();
  for (int r = 0; r < reps; ++r) s.comm().allreduce_sum(slab);
  s.backend->synchronize();
  const double full = seconds_between(t0, ThroughputMeter::Clock::now()) / reps;
  rec.set("allreduce_seconds_per_step", full);
  rec.set("buckets", bucketer->num_buckets());
  if (s.comm().name() == "nccl") {
    // NCCL waits happen on the device: the exposed share shows in the step time, compare
    // with --dist-backend single at world size 1.
    s.log.out("benchmark: gradient allreduce {:.4f} s per step on its own ({} buckets of <= {} "
              "MiB, NCCL: overlap shows in the step time)\n",
              full, bucketer->num_buckets(), s.cfg.bucket_size_mb);
    return;
  }
  const double hidden = full > 0 ? std::clamp(1.0 - exposed / full, 0.0, 1.0) : 0.0;
  rec.set("allreduce_exposed_seconds_per_step", exposed);
  rec.set("allreduce_hidden_share", hidden);
  s.log.out("benchmark: gradient allreduce {:.4f} s per step on its own ({} buckets of <= {} "
            "MiB), {:.4f} s of it exposed after backward: {:.0f}% hidden under backward\n",
            full, bucketer->num_buckets(), s.cfg.bucket_size_mb, exposed, 100 * hidden);
}

/// The profile of the measured steps: its table into the log, its record into the report.
void report_profile(Session& s, const OpProfiler& prof) {
  const ProfileSummary sum = summarize_profile(prof);
  s.log.out("{}\n", profile_table(sum, fmt::format("profile: {} {} batch {} on {}, per training "
                                                   "step (data wait excluded)",
                                                   s.cfg.arch, precision_name(s.precision),
                                                   s.cfg.batch_size, s.device.name)));
  ReportRecord r("profile");
  r.set("source", std::string("train --benchmark"))
      .set("arch", s.cfg.arch)
      .set("precision", std::string(precision_name(s.precision)))
      .set("device", s.device.name)
      .set("batch_size", s.cfg.batch_size)
      .set("crop_size", s.cfg.crop_size)
      .set("steps", sum.steps)
      .set("step_ms", sum.step_ms)
      .set("ops_ms", sum.ops_ms)
      .set_json("ops", profile_ops_json(sum))
      .set_json("families", profile_families_json(sum));
  if (sum.roof) r.set_json("roofline", profile_roof_json(sum));
  s.report.write(r);
}

}  // namespace

TrainBenchmarkResult run_train_benchmark(Session& s) {
  const Config& cfg = s.cfg;
  const int64_t warm = cfg.benchmark_warmup_steps, steps = cfg.benchmark_steps;
  const int world = s.proc.world_size;
  // The roofline: GFLOP of one image's step (forward, backward-data, backward-weights: 3 x the
  // forward) at the network's input, and the peaks (read before the first step: a bad file
  // fails now).
  const double gflops_per_image = train_flops(s.model->desc(), cfg.crop_size, cfg.crop_size) / 1e9;
  std::optional<PeakTable> peaks;
  if (!cfg.peak_file.empty()) peaks = PeakTable::load(cfg.peak_file);
  OpProfiler prof;
  // With peaks of this device, the profile gives each op its roofline time (rn50/profile.h).
  if (peaks) prof.set_roof(Roof::from(*peaks, s.device.name));
  ThroughputMeter meter(warm);
  int epoch = s.start_epoch;
  s.train->start_epoch(epoch);
  meter.start();
  Batch b;
  float last_loss = 0;
  double wait_at_warm = 0;
  for (int64_t i = 0; i < warm + steps; ++i) {
    if (i == warm) {
      wait_at_warm = s.step().comm_wait_seconds();
      // The measured steps for an external profiler (the device is idle: the last warmup step
      // synchronised at its boundary).
      s.backend->profiler_range(true);
    }
    const auto tw = ThroughputMeter::Clock::now();
    if (!s.train->next(b)) {
      s.train->start_epoch(++epoch);
      RN50_CHECK(s.train->next(b), "--benchmark: the training source yielded no batch");
    }
    const auto td = ThroughputMeter::Clock::now();
    const double lr = s.sched.at(s.global_step);
    const bool boundary =
        (i + 1) % cfg.print_interval == 0 || i + 1 == warm + steps || i + 1 == warm;
    {
      // --profile: the measured steps' ops (the step without its data wait) into `prof`.
      std::optional<OpProfiler::Activation> on;
      if (cfg.profile && i >= warm) on.emplace(prof);
      s.run_step(b, lr, 0, /*metrics=*/false);
      if (boundary) s.backend->synchronize();
    }
    ++s.global_step;
    const double compute = seconds_between(td, ThroughputMeter::Clock::now());
    if (cfg.profile && i >= warm) prof.add_step(compute);
    meter.step(b.size, seconds_between(tw, td), compute);
    if (boundary) {
      last_loss = s.read_losses(1)[0];
      s.check_amp_skips(s.global_step);
      s.log.out("benchmark step {}/{}{} loss {:.4f} lr {:.6g}{}\n", i + 1, warm + steps,
                i < warm ? " (warmup)" : "", last_loss, lr,
                meter.measured_steps() ? fmt::format(" img/s {:.1f}", meter.ips() * world)
                                       : std::string());
    }
  }
  s.backend->profiler_range(false);
  const double job_ips = meter.ips() * world;
  s.log.out("benchmark: train.ips {:.2f} img/s over {} steps of batch {} x {} process(es) ({:.2f} "
            "s), data {:.4f} s/step compute {:.4f} s/step\n",
            job_ips, meter.measured_steps(), cfg.batch_size, world, meter.measured_seconds(),
            meter.mean_data_time(), meter.mean_compute_time());
  ReportRecord rec("benchmark");
  rec.set("train.ips", job_ips);
  rec.set("train.ips_per_rank", meter.ips());
  rec.set("world_size", world);
  rec.set("train.data_time", meter.mean_data_time());
  rec.set("train.compute_time", meter.mean_compute_time());
  rec.set("train.loss", last_loss);
  report_allreduce(s, rec, meter.measured_steps(), wait_at_warm);
  rec.set("steps", meter.measured_steps());
  rec.set("warmup_steps", warm);
  rec.set("batch_size", cfg.batch_size);
  rec.set("images", meter.measured_images());
  rec.set("seconds", meter.measured_seconds());
  rec.set("arch", cfg.arch);
  rec.set("crop_size", cfg.crop_size);
  rec.set("data_layout", layout_name(cfg.data_layout));
  rec.set("backend", s.backend->name());
  rec.set("device", s.device.name);
  rec.set("precision", std::string(precision_name(s.precision)));
  rec.set("graph_replayed_steps", s.step().replayed_steps());
  const int64_t mem = s.backend->device_memory_used_bytes();
  if (mem >= 0) {
    rec.set("gpu_memory_used_bytes", mem);
    s.log.out("benchmark: GPU memory in use {:.2f} GiB (device total - free, CUDA context "
              "included)\n",
              static_cast<double>(mem) / (1 << 30));
  }
  s.set_loss_scale_fields(rec);
  const auto [peak, share] =
      set_roofline_fields(rec, gflops_per_image, job_ips, peaks ? &*peaks : nullptr,
                          precision_name(s.precision), s.device.name);
  s.log.out("benchmark: {:.3f} GFLOP per image (3 x forward), {:.1f} GFLOP/s achieved{}\n",
            gflops_per_image, job_ips * gflops_per_image,
            peak ? fmt::format(", {:.1f}% of the measured {} peak ({:.1f} GFLOP/s, {})",
                               100 * share, peak_precision(precision_name(s.precision)),
                               peak->gflops, peak->op)
                 : std::string());
  if (cfg.profile) rec.set("profiled", true);
  s.report.write(rec);
  if (cfg.profile && meter.measured_steps() > 0) report_profile(s, prof);

  TrainBenchmarkResult r;
  r.ips = job_ips;
  r.ips_per_rank = meter.ips();
  r.world_size = world;
  r.step_seconds = meter.measured_step_seconds();
  r.data_seconds = meter.measured_data_seconds();
  r.compute_seconds = meter.measured_compute_seconds();
  r.images = meter.measured_images();
  r.gpu_memory_used_bytes = mem;
  r.backend = s.backend->name();
  r.device = s.device.name;
  r.precision = precision_name(s.precision);
  r.communicator = s.comm().name();
  r.last_loss = last_loss;
  r.environment = s.backend->environment();
  r.gflops_per_image = gflops_per_image;
  if (peak) {
    r.peak_gflops = peak->gflops;
    r.peak_op = peak->op;
  }
  for (auto& kv : communicator_libraries()) r.environment.push_back(kv);
  return r;
}

}  // namespace rn50
