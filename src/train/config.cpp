#include "train/config.h"

#include <cmath>

#include "core/check.h"
#include "rn50/backend.h"
#include "rn50/model.h"

namespace rn50 {

const char* run_scope_name(RunScope s) {
  switch (s) {
    case RunScope::train_eval: return "train_eval";
    case RunScope::train_only: return "train_only";
    case RunScope::eval_only: return "eval_only";
  }
  return "?";
}

RunScope parse_run_scope(const std::string& s) {
  if (s == "train_eval") return RunScope::train_eval;
  if (s == "train_only") return RunScope::train_only;
  if (s == "eval_only") return RunScope::eval_only;
  RN50_FAIL("--run-scope '{}': expected train_eval, train_only or eval_only", s);
}

const char* data_kind_name(DataKind k) {
  return k == DataKind::imagefolder ? "imagefolder" : "synthetic";
}

DataKind parse_data_kind(const std::string& s) {
  if (s == "imagefolder") return DataKind::imagefolder;
  if (s == "synthetic") return DataKind::synthetic;
  RN50_FAIL("--data '{}': expected imagefolder or synthetic", s);
}

DType compute_dtype(const TrainConfig& cfg) {
  if (!cfg.amp) return DType::f32;
  return cfg.amp_dtype == "bf16" ? DType::bf16 : DType::f16;
}

void validate(const TrainConfig& c) {
  auto positive = [](long long v, const char* flag) {
    RN50_CHECK(v >= 1, "{} {}: must be >= 1", flag, v);
  };
  auto non_negative = [](long long v, const char* flag) {
    RN50_CHECK(v >= 0, "{} {}: must be >= 0", flag, v);
  };
  auto finite_nonneg = [](double v, const char* flag) {
    RN50_CHECK(std::isfinite(v) && v >= 0, "{} {}: must be a finite number >= 0", flag, v);
  };
  positive(c.epochs, "--epochs");
  positive(c.batch_size, "--batch-size");
  finite_nonneg(c.lr, "--lr");
  finite_nonneg(c.warmup_epochs, "--warmup-epochs");
  finite_nonneg(c.momentum, "--momentum");
  RN50_CHECK(c.momentum < 1, "--momentum {}: must be < 1", c.momentum);
  finite_nonneg(c.weight_decay, "--weight-decay");
  finite_nonneg(c.label_smoothing, "--label-smoothing");
  RN50_CHECK(c.label_smoothing < 1, "--label-smoothing {}: must be < 1", c.label_smoothing);
  positive(c.crop_size, "--crop-size");
  positive(c.resize_short, "--resize-short");
  non_negative(c.num_classes, "--num-of-class");
  non_negative(c.workers, "--workers");
  RN50_CHECK(std::isfinite(c.max_bad_fraction) && c.max_bad_fraction >= 0 &&
                 c.max_bad_fraction <= 1,
             "--max-bad-fraction {}: must be in [0, 1]", c.max_bad_fraction);
  for (int cpu : c.worker_cpus)
    RN50_CHECK(cpu >= 0, "--worker-cpus {}: CPU ids must be >= 0", cpu);
  positive(c.prefetch, "--prefetch");
  positive(c.eval_interval, "--eval-interval");
  non_negative(c.save_interval, "--save-interval");
  positive(c.print_interval, "--print-interval");
  positive(c.benchmark_steps, "--benchmark-steps");
  non_negative(c.benchmark_warmup_steps, "--benchmark-warmup-steps");
  non_negative(c.synthetic_samples, "--synthetic-samples");
  positive(c.world_size, "world size");
  RN50_CHECK(c.dist_backend == "auto" || c.dist_backend == "single" || c.dist_backend == "mpi" ||
                 c.dist_backend == "nccl",
             "--dist-backend '{}': expected auto, single, mpi or nccl", c.dist_backend);
  RN50_CHECK(std::isfinite(c.bucket_size_mb) && c.bucket_size_mb > 0,
             "--bucket-size-mb {}: must be a number > 0", c.bucket_size_mb);
  RN50_CHECK(std::isfinite(c.timeout) && c.timeout >= 0,
             "--timeout {}: must be a number of seconds >= 0", c.timeout);
  positive(c.max_nonfinite_steps, "--max-nonfinite-steps");
  try {
    arch_from_name(c.arch);
  } catch (const Error& e) {
    RN50_FAIL("--arch '{}': {}", c.arch, e.what());
  }
  const DeviceChoice dev = resolve_device(c.device);
  RN50_CHECK(c.amp_dtype == "fp16" || c.amp_dtype == "bf16",
             "--amp-dtype '{}': expected fp16 or bf16", c.amp_dtype);
  RN50_CHECK(std::isfinite(c.scale_loss) && c.scale_loss > 0,
             "--scale-loss {}: must be a finite number > 0", c.scale_loss);
  RN50_CHECK(!c.amp || dev.backend == "cuda",
             "--amp: mixed precision runs on the CUDA backend only (--device {} resolves to the "
             "CPU backend, which computes in fp32); drop --amp or use --device cuda",
             c.device);
  if (c.data == DataKind::imagefolder)
    RN50_CHECK(!c.image_root.empty(),
               "no images to train or evaluate on: pass --image-root DIR, an ImageFolder root "
               "holding train/<class>/*.JPEG and val/<class>/* ({}), or --data synthetic for "
               "random images (benchmarks only)",
               kDataHelp);
  RN50_CHECK(!(c.benchmark && c.run_scope == RunScope::eval_only),
             "--benchmark times training steps: it cannot be combined with --run-scope eval_only");
  const std::string& le = c.last_epoch_of_checkpoint;
  RN50_CHECK(le == "auto" ||
                 (!le.empty() && le.size() <= 9 &&
                  le.find_first_not_of("0123456789") == std::string::npos),
             "--last-epoch-of-checkpoint '{}': expected 'auto' or an epoch number >= 0", le);
  RN50_CHECK(c.from_checkpoint.empty() || c.from_pretrained_params.empty(),
             "--from-checkpoint and --from-pretrained-params are exclusive (a checkpoint already "
             "holds the weights)");
}

nlohmann::ordered_json config_to_json(const TrainConfig& c) {
  nlohmann::ordered_json j;
  j["run_scope"] = run_scope_name(c.run_scope);
  j["benchmark"] = c.benchmark;
  j["benchmark_steps"] = c.benchmark_steps;
  j["benchmark_warmup_steps"] = c.benchmark_warmup_steps;
  j["epochs"] = c.epochs;
  j["batch_size"] = c.batch_size;
  j["lr"] = c.lr;
  j["warmup_epochs"] = c.warmup_epochs;
  j["momentum"] = c.momentum;
  j["weight_decay"] = c.weight_decay;
  j["label_smoothing"] = c.label_smoothing;
  j["arch"] = c.arch;
  j["num_of_class"] = c.num_classes;
  j["zero_init_residual"] = c.zero_init_residual;
  j["data_layout"] = layout_name(c.data_layout);
  j["device"] = c.device;
  j["amp"] = c.amp;
  j["amp_dtype"] = c.amp_dtype;
  j["scale_loss"] = c.scale_loss;
  j["use_dynamic_loss_scaling"] = c.use_dynamic_loss_scaling;
  j["tf32"] = !c.no_tf32;
  j["cuda_graphs"] = !c.no_cuda_graphs;
  j["data"] = data_kind_name(c.data);
  j["image_root"] = c.image_root;
  j["crop_size"] = c.crop_size;
  j["resize_short"] = c.resize_short;
  j["workers"] = c.workers;
  j["prefetch"] = c.prefetch;
  j["max_bad_fraction"] = c.max_bad_fraction;
  j["exact_decode"] = c.exact_decode;
  j["worker_cpus"] = c.worker_cpus;
  j["synthetic_samples"] = c.synthetic_samples;
  j["seed"] = c.seed;
  j["print_interval"] = c.print_interval;
  j["eval_interval"] = c.eval_interval;
  j["save_interval"] = c.save_interval;
  j["checkpoint_dir"] = c.checkpoint_dir;
  j["report_file"] = c.report_file;
  j["from_checkpoint"] = c.from_checkpoint;
  j["last_epoch_of_checkpoint"] = c.last_epoch_of_checkpoint;
  j["from_pretrained_params"] = c.from_pretrained_params;
  j["world_size"] = c.world_size;
  j["dist_backend"] = c.dist_backend;
  j["bucket_size_mb"] = c.bucket_size_mb;
  j["log_all_ranks"] = c.log_all_ranks;
  j["timeout"] = c.timeout;
  j["max_nonfinite_steps"] = c.max_nonfinite_steps;
  j["version"] = kRn50Version;
  return j;
}

}  // namespace rn50
