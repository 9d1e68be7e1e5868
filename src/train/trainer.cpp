// rn50: the training loop (`rn50 train`, `rn50 eval`). See include/rn50/train.h for the flags.
//
// One step: batch (host u8 NHWC) -> upload into an input slot (a side stream on CUDA, while
// the previous step runs) -> TrainStep (train/train_step.h: normalise, forward, loss, backward,
// SGD with this step's lr, AMP loss scaling; replayed as a CUDA graph on GPUs). The loss of each
// step and its top-1/top-5 hits (Backend::topk_hits, next to the logits) are written into
// device buffers and read back only every --print-interval steps, so the loop has no per-step
// host sync. AMP overflow skips are read from the device step state at the same boundaries and
// logged.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <tuple>

#include "core/check.h"
#include "core/environment.h"
#include "core/progress.h"
#include "core/report.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/dist.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "rn50/train.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/evaluator.h"
#include "train/flags.h"
#include "model/input_stage.h"
#include "model/sparsity.h"
#include "model/weights.h"
#include "train/lr_schedule.h"
#include "train/mixup.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using Clock = ThroughputMeter::Clock;
using json = nlohmann::ordered_json;

constexpr int64_t kImageNetTrainImages = 1281167;
constexpr int64_t kImageNetValImages = 50000;

// Progress goes to stdout from rank 0 only, or from every rank with --log-all-ranks (each line
// then prefixed "[rank R] "). Set once by run_train from the launcher's environment.
bool g_log = true;
std::string g_prefix;
/// The step progress line while training (in place on a terminal); out() ends it first.
ProgressLine* g_progress = nullptr;

/// Warnings and AMP notices to stderr, with the same rank gating as out() (every rank sees the
/// same configuration, so one copy is enough; data-loader warnings name each rank's own files
/// and are not gated).
void warn(const std::string& msg) {
  if (!g_log) return;
  std::cerr << g_prefix << msg;
  std::cerr.flush();
}

/// OpenMP threads of the CPU backend (oneDNN, reference loops) for this process.
void set_cpu_threads(int n) { omp_set_num_threads(n); }

template <class... A>
void out(fmt::format_string<A...> f, A&&... a) {
  if (!g_log) return;
  if (g_progress) g_progress->finish();
  std::fputs((g_prefix + fmt::format(f, std::forward<A>(a)...)).c_str(), stdout);
  std::fflush(stdout);
}

/// The val.* fields of a record from an evaluation pass.
void set_val(ReportRecord& r, const EvalResult& ev) {
  r.set("val.loss", ev.loss);
  r.set("val.top1", ev.top1);
  r.set("val.top5", ev.top5);
  r.set("val.ips", ev.ips);
  r.set("val.images", ev.images);
  r.set("val.bad_samples", ev.bad_samples);
}

class Trainer {
 public:
  /// Reports are written by rank 0 only.
  Trainer(const TrainConfig& cfg, const ProcessInfo& proc)
      : cfg_(cfg),
        proc_(proc),
        report_(proc.rank == 0 ? cfg.report_file : std::string(), ReportWriter::Mode::truncate,
                "--report-file",
                cfg.report_format == "dllogger" ? ReportWriter::Format::dllogger
                                                : ReportWriter::Format::rn50) {}
  /// The recorded graphs (in step_) hold references to NCCL's communicator: they go first, then
  /// the bucketer and the communicator (members declared last), then model and backend.
  ~Trainer() { step_.reset(); }
  /// Runs; on an error in a multi-process run, stops every rank (Communicator::abort).
  void run();
  /// With --benchmark: where run() puts the figures (may be null).
  void set_benchmark_result(TrainBenchmarkResult* r) { bench_result_ = r; }

 private:
  void run_impl();
  void setup_backend();
  void setup_data();
  void setup_model();
  void load_weights();
  /// --asp: computes the 2:4 masks (--prune-model) or checks that the checkpoint brought them,
  /// and hands them to the optimiser; refuses an --asp checkpoint resumed without --asp.
  void setup_sparsity();
  void write_config_line();
  void run_eval_only();
  /// rn50 eval --benchmark: the CPU inference engine timed at --batch-size.
  void run_eval_benchmark();
  /// The inference program of the model's current weights (BatchNorm folded).
  InferenceProgram folded_program();
  void run_training();
  void run_benchmark();
  /// One optimiser step on `b` with learning rate `lr`; its loss lands in loss_hist_[slot] and,
  /// with `metrics`, its top-1/top-5 hits in hits_hist_[2 slot, 2 slot + 2).
  void train_step(const Batch& b, double lr, int64_t slot, bool metrics);
  /// Reads the first `n` losses of loss_hist_ (and, with hits, the first n hit pairs of
  /// hits_hist_) back to the host.
  std::vector<float> read_losses(int64_t n, std::vector<float>* hits = nullptr);
  /// Reads the AMP step state (synchronises) and logs steps skipped for gradient overflow
  /// since the last call. Fills loss scale / skipped totals for the report.
  void check_amp_skips(int64_t at_step);
  CheckpointState make_state(int epoch) const;
  /// train.loss_scale and train.skipped_steps, when fp16 loss scaling is on.
  void set_loss_scale(ReportRecord& r) const {
    if (!loss_scaling_) return;
    r.set("train.loss_scale", loss_scale_);
    r.set("train.skipped_steps", skipped_steps_);
  }

  TrainConfig cfg_;
  ProcessInfo proc_;
  ReportWriter report_;
  int nonfinite_run_ = 0;  ///< consecutive steps with an inf/NaN loss
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ResNet> model_;
  std::unique_ptr<DataSource> train_, val_;
  std::vector<std::string> classes_;
  int num_classes_ = 0;
  int64_t steps_per_epoch_ = 0;
  LrSchedule sched_;
  Tensor loss_hist_, hits_hist_;
  DeviceChoice device_;
  std::unique_ptr<InputStage> input_;
  std::unique_ptr<SgdOptimizer> optimizer_;
  std::unique_ptr<TrainStep> step_;
  bool loss_scaling_ = false;
  float loss_scale_ = 1.f;
  int64_t skipped_steps_ = 0;
  int start_epoch_ = 0;
  int64_t global_step_ = 0;
  int resumed_epoch_ = -1;
  std::string resumed_from_;
  TrainBenchmarkResult* bench_result_ = nullptr;
  // Declared last so that they are destroyed first: pending NCCL reductions and bucket buffers
  // reference the backend (and its stream).
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradBucketer> bucketer_;
};

void Trainer::setup_data() {
  const bool need_train = cfg_.run_scope != RunScope::eval_only;
  const bool need_val =
      cfg_.run_scope == RunScope::eval_only || (cfg_.run_scope == RunScope::train_eval &&
                                                !cfg_.benchmark);
  LoaderOptions lo;
  lo.batch_size = cfg_.batch_size;
  lo.crop_size = cfg_.crop_size;
  lo.resize_short = cfg_.resize_short;
  lo.workers = cfg_.workers;
  lo.prefetch = cfg_.prefetch;
  lo.seed = cfg_.seed;
  lo.drop_last = true;
  lo.max_bad_fraction = cfg_.max_bad_fraction;
  lo.rank = proc_.rank;
  lo.world_size = proc_.world_size;
  lo.local_ranks = proc_.local_size;
  lo.exact_decode = cfg_.exact_decode;
  lo.rand_crop_scale = cfg_.rand_crop_scale;
  lo.rand_crop_ratio = cfg_.rand_crop_ratio;
  lo.worker_cpus = cfg_.worker_cpus;
  // Beside the report, else in the checkpoint directory, else in the working directory.
  lo.bad_files_path = !cfg_.report_file.empty()    ? cfg_.report_file + ".bad_files.txt"
                      : !cfg_.checkpoint_dir.empty() ? cfg_.checkpoint_dir + "/bad_files.txt"
                                                     : std::string("bad_files.txt");
  // Batches straight into memory the backend uploads from fastest (pinned on CUDA).
  Backend* be = backend_.get();
  lo.alloc_host = [be](std::vector<int64_t> shape, DType dt, Layout l) {
    return be->alloc_host(std::move(shape), dt, l);
  };
  if (cfg_.data == DataKind::synthetic) {
    num_classes_ = cfg_.num_classes > 0 ? cfg_.num_classes : 1000;
    int64_t n = cfg_.synthetic_samples;
    if (n == 0)
      n = cfg_.benchmark ? static_cast<int64_t>(cfg_.batch_size) *
                               (cfg_.benchmark_steps + cfg_.benchmark_warmup_steps)
                         : kImageNetTrainImages;
    if (need_train) train_ = make_synthetic_source(n, num_classes_, lo);
    if (need_val) {
      LoaderOptions vo = lo;
      vo.drop_last = false;
      vo.seed = cfg_.seed + 1;
      val_ = make_synthetic_source(std::min(n, kImageNetValImages), num_classes_, vo);
    }
  } else {
    const fs::path root(cfg_.image_root);
    RN50_CHECK(fs::is_directory(root),
               "--image-root '{}': no such directory; pass the folder that holds train/ and val/ "
               "({})",
               cfg_.image_root, kDataHelp);
    if (need_train) {
      const fs::path tr = root / "train";
      RN50_CHECK(fs::is_directory(tr), "--image-root '{}': no train/ folder ('{}' is missing)",
                 cfg_.image_root, tr.string());
      train_ = make_image_folder_source(tr.string(), Split::train, lo);
    }
    if (need_val) {
      const fs::path va = root / "val";
      RN50_CHECK(fs::is_directory(va), "--image-root '{}': no val/ folder ('{}' is missing)",
                 cfg_.image_root, va.string());
      LoaderOptions vo = lo;
      vo.drop_last = false;
      val_ = make_image_folder_source(va.string(), Split::val, vo);
    }
    DataSource& ref = train_ ? *train_ : *val_;
    const int folders = ref.num_classes();
    num_classes_ = cfg_.num_classes > 0 ? cfg_.num_classes : folders;
    RN50_CHECK(num_classes_ >= folders,
               "--num-of-class {}: '{}' has {} class folders (labels would be out of range)",
               cfg_.num_classes, cfg_.image_root, folders);
    if (train_ && val_)
      RN50_CHECK(train_->classes() == val_->classes(),
                 "--image-root '{}': train/ has {} class folders, val/ {}, and their names "
                 "differ: labels would not match",
                 cfg_.image_root, train_->num_classes(), val_->num_classes());
  }
  classes_ = train_ ? train_->classes() : val_->classes();
  if (train_) {
    steps_per_epoch_ = train_->batches_per_epoch();
    RN50_CHECK(steps_per_epoch_ > 0,
               "--batch-size {}: larger than the {} training samples (the last partial batch is "
               "dropped, so an epoch would have no steps)",
               cfg_.batch_size, train_->num_samples());
  }
  sched_ = LrSchedule::make(cfg_.lr, static_cast<int64_t>(cfg_.batch_size) * cfg_.world_size,
                            cfg_.warmup_epochs, cfg_.epochs, std::max<int64_t>(1, steps_per_epoch_));
  sched_.policy = cfg_.lr_scheduler;
  sched_.warmup_start_lr = cfg_.warmup_start_lr * static_cast<double>(cfg_.batch_size) *
                           cfg_.world_size / 256.0;
  sched_.decay_epochs = cfg_.lr_decay_epochs;
  sched_.decay_rate = cfg_.lr_decay_rate;
}

void Trainer::setup_backend() {
  device_ = resolve_device(cfg_.device);
  // One GPU per local rank: with several processes, "cuda"/"auto" means cuda:<local rank>.
  if (device_.backend == "cuda" && proc_.world_size > 1 && cfg_.device.find(':') == std::string::npos) {
    const int n = cuda_device_count();
    RN50_CHECK(proc_.local_rank < n, "local rank {} has no GPU: this node has {} GPU(s) and {} "
               "processes (one GPU per process)", proc_.local_rank, n, proc_.local_size);
    device_.index = proc_.local_rank;
    device_.name = "cuda:" + std::to_string(proc_.local_rank);
  }
  // Each local rank's threads (loader workers, OpenMP) on its own share of the cores.
  if (proc_.local_size > 1) {
    const std::vector<int> cores = cores_for_local_rank(proc_.local_rank, proc_.local_size);
    if (!cores.empty()) {
      set_cpu_threads(static_cast<int>(cores.size()));
      if (cfg_.enable_cpu_affinity) {
        const std::string where = bind_to_cores(cores);
        std::fprintf(stderr, "rank %d (local %d of %d): threads bound to %s\n", proc_.rank,
                     proc_.local_rank, proc_.local_size, where.c_str());
      } else {
        std::fprintf(stderr,
                     "rank %d (local %d of %d): %zu threads, not bound to cores "
                     "(--enable-cpu-affinity false)\n",
                     proc_.rank, proc_.local_rank, proc_.local_size, cores.size());
      }
    }
  }
  BackendOptions bo;
  bo.device_index = device_.index;
  bo.allow_tf32 = !cfg_.no_tf32;
  backend_ = make_backend(device_.backend, bo);
  comm_ = make_communicator(cfg_.dist_backend, *backend_);
  RN50_CHECK(comm_->world_size() == proc_.world_size,
             "communicator '{}' sees {} processes, the launcher {}", comm_->name(),
             comm_->world_size(), proc_.world_size);
  RN50_CHECK(!(comm_->name() == "mpi" && backend_->name() == "cuda"),
             "--dist-backend mpi reduces host tensors; GPU training needs --dist-backend nccl "
             "(or auto)");
  if (cfg_.timeout > 0 && proc_.world_size > 1) comm_->start_watchdog(cfg_.timeout);
}

void Trainer::setup_model() {
  ModelOptions mo;
  mo.num_classes = num_classes_;
  mo.layout = cfg_.data_layout;
  mo.zero_init_residual = cfg_.zero_init_residual;
  mo.input_channels = cfg_.input_channels;
  mo.qat = cfg_.qat;
  mo.compute_dtype = compute_dtype(cfg_);
  mo.pure_half = cfg_.use_pure_fp16;
  model_ = std::make_unique<ResNet>(*backend_, arch_from_name(cfg_.arch), mo);
  model_->init(cfg_.seed);
  loss_hist_ = backend_->alloc({cfg_.print_interval}, DType::f32);
  hits_hist_ = backend_->alloc({2 * static_cast<int64_t>(cfg_.print_interval)}, DType::f32);
  input_ = std::make_unique<InputStage>(*backend_, cfg_.data_layout, mo.compute_dtype,
                                        num_classes_, 2, normalization(cfg_),
                                        /*reversed_labels=*/cfg_.mixup > 0,
                                        cfg_.input_channels);
  SgdOptimizer::Options oo;
  oo.momentum = static_cast<float>(cfg_.momentum);
  oo.weight_decay = static_cast<float>(cfg_.weight_decay);
  oo.decay_all = cfg_.bn_weight_decay;
  optimizer_ = std::make_unique<SgdOptimizer>(*backend_, *model_, oo);
  StepOptions so;
  so.label_smoothing = static_cast<float>(cfg_.label_smoothing);
  so.mixup = cfg_.mixup > 0;
  loss_scaling_ = mo.compute_dtype == DType::f16;
  so.loss_scaling = loss_scaling_;
  so.initial_loss_scale = static_cast<float>(cfg_.scale_loss);
  so.scale.dynamic = cfg_.use_dynamic_loss_scaling;
  so.use_graphs = !cfg_.no_cuda_graphs;
  // Gradient allreduce with several processes, or when a communicator is asked for explicitly
  // (e.g. --dist-backend nccl at world size 1, to measure its overhead).
  if (proc_.world_size > 1 || comm_->name() != "single") {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int i : model_->grad_ready_order())
      ranges.emplace_back(model_->params()[i].offset, model_->params()[i].numel());
    bucketer_ = std::make_unique<GradBucketer>(
        *comm_, *backend_, model_->grad_slab(), std::move(ranges),
        static_cast<size_t>(cfg_.bucket_size_mb * 1024 * 1024));
    so.bucketer = bucketer_.get();
    so.loss_grad_scale = 1.f / static_cast<float>(proc_.world_size);
  }
  loss_scale_ = loss_scaling_ ? so.initial_loss_scale : 1.f;
  step_ = std::make_unique<TrainStep>(*backend_, *model_, *input_, *optimizer_, so);
}

void Trainer::check_amp_skips(int64_t at_step) {
  if (!loss_scaling_) return;
  const Tensor st = step_->read_state();
  const float* s = st.data_as<const float>();
  const auto skipped = static_cast<int64_t>(s[StepState::skipped_steps]);
  loss_scale_ = s[StepState::loss_scale];
  if (skipped > skipped_steps_)
    warn(fmt::format("amp: {} step(s) skipped for inf/NaN gradients before global step "
                             "{} ({} in total); loss scale now {:g}\n",
                             skipped - skipped_steps_, at_step, skipped, loss_scale_));
  skipped_steps_ = skipped;
}

void Trainer::load_weights() {
  if (!cfg_.from_pretrained_params.empty()) {
    load_pretrained_params(cfg_.from_pretrained_params, *model_);
    out("loaded pretrained parameters from {}\n", cfg_.from_pretrained_params);
  }
  if (!cfg_.from_checkpoint.empty()) {
    resumed_from_ = resolve_checkpoint_dir(cfg_.from_checkpoint, cfg_.last_epoch_of_checkpoint);
    CheckpointState st = read_checkpoint_state(resumed_from_);
    RN50_CHECK(st.arch.empty() || st.arch == cfg_.arch,
               "--from-checkpoint '{}' holds a {} model but --arch is {}", resumed_from_, st.arch,
               cfg_.arch);
    st = load_checkpoint(resumed_from_, *model_, *optimizer_);
    resumed_epoch_ = st.epoch;
    if (loss_scaling_ && st.loss_scale > 0) {  // continue the fp16 loss-scale schedule
      step_->set_loss_scale(static_cast<float>(st.loss_scale), static_cast<float>(st.skipped_steps));
      loss_scale_ = static_cast<float>(st.loss_scale);
      skipped_steps_ = st.skipped_steps;
    }
    start_epoch_ = st.epoch + 1;
    global_step_ = st.global_step;
    if (train_ && st.steps_per_epoch != steps_per_epoch_)
      warn(fmt::format(
          "warning: checkpoint '{}' was written with {} steps per epoch, this run has {}: the lr "
          "schedule continues from global step {}\n",
          resumed_from_, st.steps_per_epoch, steps_per_epoch_, st.global_step));
    if (!st.classes.empty() && st.classes != classes_)
      warn(fmt::format("warning: checkpoint '{}' was trained on different classes ({} "
                               "classes) than this data ({} classes)\n",
                               resumed_from_, st.classes.size(), classes_.size()));
    if (train_)
      out("resumed from {} (epoch {} done, global step {}, next lr {:.6g})\n", resumed_from_,
          st.epoch, st.global_step, sched_.at(global_step_));
    else
      out("loaded {} (epoch {})\n", resumed_from_, st.epoch);
  }
}

void Trainer::setup_sparsity() {
  const bool restored = optimizer_->mask().defined();
  if (!cfg_.asp) {
    RN50_CHECK(!restored,
               "--from-checkpoint '{}' holds 2:4 sparsity masks (an --asp run): add --asp to "
               "keep training it sparse",
               resumed_from_);
    return;
  }
  if (!cfg_.prune_model) {
    RN50_CHECK(restored,
               "--asp without --prune-model trains with the masks of an --asp checkpoint, and "
               "there is none: add --prune-model (with --from-pretrained-params or "
               "--from-checkpoint) to compute them");
    out("asp: holding the 2:4 masks restored from {}\n", resumed_from_);
    return;
  }
  const MaskAlgo algo = mask_algo_from_name(cfg_.mask_algo);
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : model_->state_dict()) weights.emplace(name, t);
  std::map<std::string, Tensor> masks;
  int64_t zeros = 0;
  for (const ParamInfo& p : model_->params()) {
    if (!asp_prunes(p)) continue;
    Tensor m = weight_mask(weights.at(p.name), algo, p.name);
    const int64_t kept = std::count(m.data_as<const uint8_t>(),
                                    m.data_as<const uint8_t>() + m.numel(), uint8_t{1});
    zeros += m.numel() - kept;
    out("asp: {:<28} {:>8} weights, density {:.1f}%\n", p.name, m.numel(),
        100.0 * static_cast<double>(kept) / static_cast<double>(m.numel()));
    masks.emplace(p.name, std::move(m));
  }
  optimizer_->set_param_masks(masks);  // zeroes the pruned weights now
  out("asp: {} pruned {} convs (stem, BatchNorm and fc dense): {} of {} parameters are zero "
      "({:.1f}%)\n",
      cfg_.mask_algo, masks.size(), zeros, model_->num_params(),
      100.0 * static_cast<double>(zeros) / static_cast<double>(model_->num_params()));
}

void Trainer::write_config_line() {
  ReportRecord r("config");
  r.set_flags(config_to_json(cfg_));
  r.set("num_of_class", num_classes_);  // resolved
  r.set("classes", static_cast<int64_t>(classes_.size()));
  r.set("global_batch_size", static_cast<int64_t>(cfg_.batch_size) * cfg_.world_size);
  r.set("rank", proc_.rank);
  r.set("launcher", proc_.launcher);
  r.set("communicator", comm_->name());
  r.set("base_lr", sched_.base_lr);
  r.set("steps_per_epoch", steps_per_epoch_);
  r.set("backend", backend_->name());
  r.set("resolved_device", device_.name);
  r.set("compute_dtype", dtype_name(model_->options().compute_dtype));
  r.set("train.samples", train_ ? train_->num_samples() : 0);
  r.set("val.samples", val_ ? val_->num_samples() : 0);
  r.set("params", model_->num_params());
  if (!resumed_from_.empty()) {
    r.set("resumed_from", resumed_from_);
    r.set("start_epoch", start_epoch_);
    r.set("start_step", global_step_);
  }
  report_.write(r);
}

void Trainer::run() {
  try {
    run_impl();
  } catch (const std::exception& e) {
    if (comm_ && comm_->world_size() > 1) comm_->abort(e.what());  // stops every rank
    throw;
  }
}

void Trainer::run_impl() {
  setup_backend();
  setup_data();
  setup_model();
  out("rn50 {} {}: {} on {} ({} backend, {}, {}), {} classes, batch {}{}\n", kRn50Version,
      cfg_.benchmark ? "benchmark" : run_scope_name(cfg_.run_scope), cfg_.arch, device_.name,
      backend_->name(), layout_name(cfg_.data_layout),
      cfg_.amp ? fmt::format("amp {}{}{}", cfg_.amp_dtype, cfg_.use_pure_fp16 ? " pure" : "",
                             loss_scaling_ ? fmt::format(" loss scale {:g}{}", loss_scale_,
                                                         cfg_.use_dynamic_loss_scaling
                                                             ? " dynamic"
                                                             : " static")
                                           : std::string())
               : std::string(cfg_.no_tf32 || backend_->name() != "cuda" ? "fp32" : "fp32/tf32"),
      num_classes_, cfg_.batch_size,
      train_ ? fmt::format(", {} train images, {} steps/epoch, base lr {:.6g}",
                           train_->num_samples(), steps_per_epoch_, sched_.base_lr)
             : std::string());
  if (train_ && cfg_.warmup_epochs >= cfg_.epochs && cfg_.warmup_epochs > 0)
    warn(fmt::format("warning: --warmup-epochs {} >= --epochs {}: the lr stays in the "
                             "linear warmup for the whole run\n",
                             cfg_.warmup_epochs, cfg_.epochs));
  if (cfg_.show_config)
    out("{}", config_table(cfg_, cfg_.run_scope == RunScope::eval_only ? kEvalCommand
                                                                        : kTrainCommand));
  load_weights();
  if (cfg_.run_scope != RunScope::eval_only) setup_sparsity();
  write_config_line();
  if (cfg_.run_scope == RunScope::eval_only)
    return cfg_.benchmark ? run_eval_benchmark() : run_eval_only();
  if (cfg_.benchmark) return run_benchmark();
  run_training();
}

InferenceProgram Trainer::folded_program() {
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : model_->state_dict()) sd.emplace(k, t);
  const NetworkDesc& d = model_->desc();
  if (d.input_channels == 3) return fold_network(d, sd, model_->options().bn_eps);
  // --image-shape 4,H,W: the inference graph takes RGB; dropping the zero channel's weights is
  // exact (model/weights.h, with_input_channels).
  sd["conv1.weight"] = with_input_channels(sd.at("conv1.weight"), 3);
  return fold_network(describe(d.arch, d.num_classes, 3), sd, model_->options().bn_eps);
}

void Trainer::run_eval_benchmark() {
  // The inference engine on this run's device in the run's precision: oneDNN on the CPU (fp32,
  // bf16 with --amp); on CUDA the GPU engine (--amp: fp16 or bf16; else tf32, or fp32 with
  // --no-tf32).
  EngineOptions eo;
  if (backend_->name() == "cuda") {
    eo.device = device_.name;
    eo.precision = cfg_.amp ? cfg_.amp_dtype : (cfg_.no_tf32 ? "fp32" : "tf32");
  } else if (cfg_.amp) {
    eo.precision = "bf16";
  }
  auto engine = make_inference_engine(folded_program(), eo);
  InferBenchConfig c;
  c.batch_sizes = {cfg_.batch_size};
  c.crop_size = cfg_.crop_size;
  c.steps = cfg_.benchmark_steps;
  c.warmup_steps = cfg_.benchmark_warmup_steps;
  c.seed = cfg_.seed;
  std::ostringstream table;
  time_engine(*engine, c, cfg_.arch, num_classes_, table, &report_);
  out("{}", table.str());
}

void Trainer::run_eval_only() {
  if (cfg_.from_checkpoint.empty() && cfg_.from_pretrained_params.empty())
    warn("warning: evaluating randomly initialised weights (pass --from-checkpoint or "
                 "--from-pretrained-params)\n");
  EvalResult r;
  if (backend_->name() == "onednn") {
    auto engine = make_inference_engine(folded_program());
    out("eval: {} inference engine (BatchNorm folded into the convolutions)\n",
        engine->precision());
    r = evaluate([&engine](const Tensor& x) { return engine->run(x); }, num_classes_,
                 Layout::NHWC, DType::f32, *backend_, *val_, cfg_.label_smoothing,
                 g_log ? cfg_.print_interval : 0, 0, comm_.get(), normalization(cfg_));
  } else {
    r = evaluate(*model_, *backend_, *val_, cfg_.label_smoothing, g_log ? cfg_.print_interval : 0,
                 0, comm_.get(), normalization(cfg_));
  }
  out("eval: loss {:.4f} top1 {:.2f}% top5 {:.2f}% ({} images, {:.1f} img/s, {} bad)\n", r.loss,
      r.top1, r.top5, r.images, r.ips, r.bad_samples);
  ReportRecord rec("eval");
  rec.set_json("epoch", resumed_epoch_ >= 0 ? json(resumed_epoch_) : json(nullptr));
  set_val(rec, r);
  report_.write(rec);
}

void Trainer::train_step(const Batch& b, double lr, int64_t slot, bool metrics) {
  Backend& be = *backend_;
  comm_->heartbeat();
  const int s = input_->upload(b);
  // Mixup's weight of this step, keyed by (seed, global step, rank): a resumed run draws the
  // same sequence.
  const double lam =
      cfg_.mixup > 0 ? mixup_lambda(cfg_.mixup, cfg_.seed, global_step_, proc_.rank) : 1.0;
  step_->run(s, lr, lam);
  if (metrics) {
    // The step's logits stay intact until the next forward (backward does not write them);
    // queued before release(s), so the slot's labels are still this batch's. Under mixup the
    // hits count against each sample's dominant label (DLE PyTorch: the argmax of the mixed
    // target), its own for lam >= 0.5, else its partner's.
    const Tensor& labels = lam >= 0.5 ? input_->labels(s) : input_->reversed_labels(s);
    Tensor hits = hits_hist_.slice0(2 * slot, 2 * slot + 2);
    be.topk_hits(step_->logits().slice0(0, b.size), labels.slice0(0, b.size), hits);
  }
  input_->release(s);
  Tensor dst = loss_hist_.slice0(slot, slot + 1);
  be.copy(step_->loss(), dst);
}

std::vector<float> Trainer::read_losses(int64_t n, std::vector<float>* hits) {
  Tensor h = Tensor::empty({n}, DType::f32);
  backend_->copy(loss_hist_.slice0(0, n), h);
  Tensor hh;
  if (hits) {
    hh = Tensor::empty({2 * n}, DType::f32);
    backend_->copy(hits_hist_.slice0(0, 2 * n), hh);
  }
  backend_->synchronize();
  if (hits) hits->assign(hh.data_as<float>(), hh.data_as<float>() + 2 * n);
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + n);
}

CheckpointState Trainer::make_state(int epoch) const {
  CheckpointState st;
  st.epoch = epoch;
  st.global_step = global_step_;
  st.next_lr = sched_.at(global_step_);
  st.steps_per_epoch = steps_per_epoch_;
  st.seed = cfg_.seed;
  st.arch = cfg_.arch;
  st.classes = classes_;
  st.config = config_to_json(cfg_);
  st.config["num_of_class"] = num_classes_;
  st.version = kRn50Version;
  std::tie(st.model_file, st.optimizer_file) = checkpoint_file_names(cfg_.model_prefix);
  if (loss_scaling_) {
    st.loss_scale = loss_scale_;
    st.skipped_steps = skipped_steps_;
  }
  return st;
}

void Trainer::run_training() {
  if (start_epoch_ >= cfg_.epochs) {
    out("nothing to do: the checkpoint already finished epoch {} of --epochs {}\n",
        start_epoch_ - 1, cfg_.epochs);
    return;
  }
  const int64_t total_steps = static_cast<int64_t>(cfg_.epochs) * steps_per_epoch_;
  // Step lines every --print-interval: in place on a terminal, plain lines in a log.
  ProgressLine progress(stdout, 0);
  g_progress = &progress;
  struct Reset {
    ~Reset() { g_progress = nullptr; }
  } reset;
  bool first_epoch = true;
  Batch b;
  for (int epoch = start_epoch_; epoch < cfg_.epochs; ++epoch) {
    // The first step of the run creates primitives and fills the prefetch queue: not timed.
    ThroughputMeter meter(first_epoch && steps_per_epoch_ > 1 ? 1 : 0);
    first_epoch = false;
    MetricSums sums;
    std::vector<int64_t> sizes;  // batch size of each step of the pending interval
    std::vector<double> lrs;
    double last_lr = 0;
    int64_t step_in_epoch = 0;
    const auto t_epoch = Clock::now();
    train_->start_epoch(epoch);
    meter.start();
    auto flush = [&](bool print) {
      if (sizes.empty()) return;
      std::vector<float> hits;
      std::vector<float> losses = read_losses(static_cast<int64_t>(sizes.size()), &hits);
      for (size_t i = 0; i < sizes.size(); ++i)
        sums.add_topk({static_cast<int64_t>(hits[2 * i]), static_cast<int64_t>(hits[2 * i + 1])},
                      sizes[i]);
      double interval_sum = 0;
      int64_t interval_n = 0;
      comm_->heartbeat();
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int64_t at = global_step_ - static_cast<int64_t>(sizes.size() - i);
        if (!std::isfinite(losses[i])) {
          ++nonfinite_run_;
          RN50_CHECK(nonfinite_run_ < cfg_.max_nonfinite_steps,
                     "training diverged: loss is {} for {} steps in a row, the last at global "
                     "step {} (epoch {}, lr {:.6g}; --max-nonfinite-steps {})",
                     losses[i], nonfinite_run_, at, epoch, lrs[i], cfg_.max_nonfinite_steps);
          warn(fmt::format("warning: loss is {} at global step {} (rank {})\n",
                           losses[i], at, proc_.rank));
          continue;
        }
        nonfinite_run_ = 0;
        sums.add_loss(losses[i], sizes[i]);
        interval_sum += static_cast<double>(losses[i]) * static_cast<double>(sizes[i]);
        interval_n += sizes[i];
      }
      if (proc_.world_size > 1) {  // the loss over the global batch
        std::vector<double> v{interval_sum, static_cast<double>(interval_n)};
        comm_->allreduce_sum_host(v);
        interval_sum = v[0];
        interval_n = static_cast<int64_t>(v[1]);
      }
      const float last = losses.back();
      check_amp_skips(global_step_);
      if (print) {
        const double el = seconds_between(t_epoch, Clock::now());
        const double per_step = el / static_cast<double>(step_in_epoch);
        const double eta = per_step * static_cast<double>(total_steps - global_step_);
        const double ips = meter.measured_steps()
                               ? meter.ips() * proc_.world_size
                               : static_cast<double>(interval_n) / el;
        if (g_log)
          progress.show(g_prefix + fmt::format("epoch {} ({}/{}) step {}/{} loss {:.4f} lr {:.6g} "
                                               "img/s {:.1f} eta {}",
                                               epoch, epoch + 1, cfg_.epochs, step_in_epoch,
                                               steps_per_epoch_, last, lrs.back(), ips,
                                               format_duration(eta)),
                        /*force=*/true);
        ReportRecord r("step");
        r.set("epoch", epoch);
        r.set("step", global_step_);
        r.set("iteration", step_in_epoch);
        r.set("train.loss", last);
        r.set("train.loss_avg", interval_n ? interval_sum / static_cast<double>(interval_n) : NAN);
        r.set("train.lr", lrs.back());
        r.set("train.ips", ips);
        set_loss_scale(r);
        report_.write(r);
      }
      sizes.clear();
      lrs.clear();
    };
    while (true) {
      const auto tw = Clock::now();
      if (!train_->next(b)) break;
      const auto td = Clock::now();
      const double lr = sched_.at(global_step_);
      train_step(b, lr, static_cast<int64_t>(sizes.size()), /*metrics=*/true);
      ++global_step_;
      ++step_in_epoch;
      sizes.push_back(b.size);
      lrs.push_back(lr);
      last_lr = lr;
      const bool boundary = static_cast<int64_t>(sizes.size()) == cfg_.print_interval ||
                            step_in_epoch == steps_per_epoch_;
      if (boundary) backend_->synchronize();
      meter.step(b.size, seconds_between(tw, td), seconds_between(td, Clock::now()));
      if (boundary) flush(true);
    }
    flush(true);
    RN50_CHECK(step_in_epoch > 0, "epoch {}: the training source yielded no batch", epoch);
    const int64_t bad = train_->bad_samples();

    const bool last_epoch = epoch == cfg_.epochs - 1;
    if (cfg_.save_interval > 0 && ((epoch + 1) % cfg_.save_interval == 0 || last_epoch)) {
      const std::string dir =
          (fs::path(cfg_.checkpoint_dir) / cfg_.arch / std::to_string(epoch)).string();
      // Rank 0 writes (every rank holds the same weights); the others wait for it, so that
      // no rank runs ahead of a checkpoint that could be resumed from.
      if (proc_.rank == 0) {
        save_checkpoint(dir, *model_, *optimizer_, make_state(epoch));
        out("saved checkpoint {}\n", dir);
      }
      comm_->heartbeat();
      comm_->barrier();
    }
    const bool do_eval = cfg_.run_scope == RunScope::train_eval &&
                         ((epoch + 1) % cfg_.eval_interval == 0 || last_epoch);
    EvalResult ev;
    if (do_eval)
      ev = evaluate(*model_, *backend_, *val_, cfg_.label_smoothing, 0, 0, comm_.get(),
                    normalization(cfg_));

    int64_t bad_all = bad;
    // Epoch metrics over every rank's samples.
    if (proc_.world_size > 1) allreduce_metric_sums(*comm_, sums, bad_all);
    // Images/s of the whole job: every rank runs the same steps in lockstep (allreduce).
    const double ips = meter.measured_steps()
                           ? meter.ips() * proc_.world_size
                           : static_cast<double>(sums.loss_samples) /
                                 seconds_between(t_epoch, Clock::now());
    std::string line = fmt::format(
        "epoch {} ({}/{}) done: train loss {:.4f} top1 {:.2f}% top5 {:.2f}% {:.1f} img/s data "
        "{:.3f} s/step compute {:.3f} s/step bad samples {}",
        epoch, epoch + 1, cfg_.epochs, sums.loss(), sums.top1_pct(), sums.top5_pct(), ips,
        meter.mean_data_time(), meter.mean_compute_time(), bad_all);
    if (do_eval)
      line += fmt::format(" | val loss {:.4f} top1 {:.2f}% top5 {:.2f}% ({} images, {:.1f} img/s)",
                          ev.loss, ev.top1, ev.top5, ev.images, ev.ips);
    out("{}\n", line);
    ReportRecord r("epoch");
    r.set("epoch", epoch);
    r.set("step", global_step_);
    r.set("train.loss", sums.loss());
    r.set("train.top1", sums.top1_pct());
    r.set("train.top5", sums.top5_pct());
    r.set("train.lr", last_lr);
    r.set("train.ips", ips);
    r.set("train.data_time", meter.mean_data_time());
    r.set("train.compute_time", meter.mean_compute_time());
    r.set("train.bad_samples", bad_all);
    set_loss_scale(r);
    if (do_eval) set_val(r, ev);
    report_.write(r);
  }
  if (!cfg_.inference_dir.empty() && proc_.rank == 0) {
    InferenceModel m;
    m.program = folded_program();
    if (cfg_.qat) {  // the learnt ranges: --precision int8 runs it on the training grid
      std::map<std::string, Tensor> sd;
      for (auto& [k, t] : model_->state_dict()) sd.emplace(k, t);
      apply_qat_ranges(m.program, model_->desc(), sd, "the trained model");
      m.info.calibration.method = "qat";
    }
    if (static_cast<int>(classes_.size()) == num_classes_) m.info.classes = classes_;
    m.info.resize_short = cfg_.resize_short;
    m.info.crop_size = cfg_.crop_size;
    const Normalization norm = normalization(cfg_);
    m.info.mean.assign(norm.mean.begin(), norm.mean.end());
    m.info.std.assign(norm.std.begin(), norm.std.end());
    save_inference_model(m, cfg_.inference_dir);
    const bool onnx = onnx_export_available();
    if (onnx) save_onnx_model(m, (fs::path(cfg_.inference_dir) / kOnnxFile).string(), cfg_.qat);
    out("wrote the inference model to {} (BatchNorm folded; rn50 predict --model, rn50 bench "
        "infer --model){}{}\n",
        cfg_.inference_dir, onnx ? (cfg_.qat ? " and a QDQ model.onnx" : " and model.onnx") : "",
        cfg_.qat ? "; with the QAT ranges: --precision int8 needs no calibration" : "");
  }
}

void Trainer::run_benchmark() {
  const int64_t warm = cfg_.benchmark_warmup_steps, steps = cfg_.benchmark_steps;
  ThroughputMeter meter(warm);
  MetricSums sums;
  int epoch = start_epoch_;
  train_->start_epoch(epoch);
  meter.start();
  Batch b;
  float last_loss = 0;
  double wait_at_warm = 0;
  for (int64_t i = 0; i < warm + steps; ++i) {
    if (i == warm) wait_at_warm = step_->comm_wait_seconds();
    const auto tw = Clock::now();
    if (!train_->next(b)) {
      train_->start_epoch(++epoch);
      RN50_CHECK(train_->next(b), "--benchmark: the training source yielded no batch");
    }
    const auto td = Clock::now();
    const double lr = sched_.at(global_step_);
    train_step(b, lr, 0, /*metrics=*/false);
    ++global_step_;
    const bool boundary = (i + 1) % cfg_.print_interval == 0 || i + 1 == warm + steps ||
                          i + 1 == warm;
    if (boundary) backend_->synchronize();
    meter.step(b.size, seconds_between(tw, td), seconds_between(td, Clock::now()));
    if (boundary) {
      last_loss = read_losses(1)[0];
      check_amp_skips(global_step_);
      out("benchmark step {}/{}{} loss {:.4f} lr {:.6g}{}\n", i + 1, warm + steps,
          i < warm ? " (warmup)" : "", last_loss, lr,
          meter.measured_steps() ? fmt::format(" img/s {:.1f}", meter.ips() * proc_.world_size)
                                 : std::string());
    }
  }
  const double job_ips = meter.ips() * proc_.world_size;
  out("benchmark: train.ips {:.2f} img/s over {} steps of batch {} x {} process(es) ({:.2f} s), "
      "data {:.4f} s/step compute {:.4f} s/step\n",
      job_ips, meter.measured_steps(), cfg_.batch_size, proc_.world_size, meter.measured_seconds(),
      meter.mean_data_time(), meter.mean_compute_time());
  ReportRecord rec("benchmark");
  rec.set("train.ips", job_ips);
  rec.set("train.ips_per_rank", meter.ips());
  rec.set("world_size", proc_.world_size);
  rec.set("train.data_time", meter.mean_data_time());
  rec.set("train.compute_time", meter.mean_compute_time());
  rec.set("train.loss", last_loss);
  if (bucketer_ && meter.measured_steps() > 0) {
    // Communication per step: the gradient slab's allreduce timed on its own (blocking), and
    // the part of it the steps actually waited for after backward (the rest was hidden).
    const double exposed =
        (step_->comm_wait_seconds() - wait_at_warm) / static_cast<double>(meter.measured_steps());
    Tensor slab = backend_->alloc({model_->num_params()}, DType::f32);
    backend_->copy(model_->grad_slab(), slab);
    comm_->allreduce_sum(slab);  // warm-up
    backend_->synchronize();
    const int reps = 5;
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) comm_->allreduce_sum(slab);
    backend_->synchronize();
    const double full = seconds_between(t0, Clock::now()) / reps;
    rec.set("allreduce_seconds_per_step", full);
    rec.set("buckets", bucketer_->num_buckets());
    if (comm_->name() == "nccl") {
      // NCCL waits happen on the device: the exposed share shows in the step time, compare
      // with --dist-backend single at world size 1.
      out("benchmark: gradient allreduce {:.4f} s per step on its own ({} buckets of <= {} "
          "MiB, NCCL: overlap shows in the step time)\n",
          full, bucketer_->num_buckets(), cfg_.bucket_size_mb);
    } else {
      const double hidden = full > 0 ? std::clamp(1.0 - exposed / full, 0.0, 1.0) : 0.0;
      rec.set("allreduce_exposed_seconds_per_step", exposed);
      rec.set("allreduce_hidden_share", hidden);
      out("benchmark: gradient allreduce {:.4f} s per step on its own ({} buckets of <= {} "
          "MiB), {:.4f} s of it exposed after backward: {:.0f}% hidden under backward\n",
          full, bucketer_->num_buckets(), cfg_.bucket_size_mb, exposed, 100 * hidden);
    }
  }
  rec.set("steps", meter.measured_steps());
  rec.set("warmup_steps", warm);
  rec.set("batch_size", cfg_.batch_size);
  rec.set("images", meter.measured_images());
  rec.set("seconds", meter.measured_seconds());
  rec.set("arch", cfg_.arch);
  rec.set("crop_size", cfg_.crop_size);
  rec.set("data_layout", layout_name(cfg_.data_layout));
  rec.set("backend", backend_->name());
  rec.set("device", device_.name);
  const std::string precision =
      cfg_.amp ? (cfg_.use_pure_fp16 ? "pure_fp16" : "amp_" + cfg_.amp_dtype)
               : std::string(cfg_.no_tf32 || backend_->name() != "cuda" ? "fp32" : "tf32");
  rec.set("precision", precision);
  rec.set("graph_replayed_steps", step_->replayed_steps());
  const int64_t mem = backend_->device_memory_used_bytes();
  if (mem >= 0) {
    rec.set("gpu_memory_used_bytes", mem);
    out("benchmark: GPU memory in use {:.2f} GiB (device total - free, CUDA context "
        "included)\n", static_cast<double>(mem) / (1 << 30));
  }
  set_loss_scale(rec);
  report_.write(rec);
  if (bench_result_) {
    TrainBenchmarkResult& r = *bench_result_;
    r.ips = job_ips;
    r.ips_per_rank = meter.ips();
    r.world_size = proc_.world_size;
    r.step_seconds = meter.measured_step_seconds();
    r.data_seconds = meter.measured_data_seconds();
    r.compute_seconds = meter.measured_compute_seconds();
    r.images = meter.measured_images();
    r.gpu_memory_used_bytes = mem;
    r.backend = backend_->name();
    r.device = device_.name;
    r.precision = precision;
    r.communicator = comm_->name();
    r.last_loss = last_loss;
    r.environment = backend_->environment();
    for (auto& kv : communicator_libraries()) r.environment.push_back(kv);
  }
}

}  // namespace

int run_train(const TrainConfig& config) {
  try {
    TrainConfig cfg = config;
    const ProcessInfo proc = ProcessInfo::from_environment();
    cfg.world_size = proc.world_size;
    g_log = proc.rank == 0 || cfg.log_all_ranks;
    g_prefix = proc.world_size > 1 && cfg.log_all_ranks ? fmt::format("[rank {}] ", proc.rank)
                                                        : std::string();
    validate(cfg);
    Trainer t(cfg, proc);
    t.run();
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "error: " << error_text(e) << "\n";
  }
  return 1;
}

TrainBenchmarkResult benchmark_train(TrainConfig cfg, bool verbose) {
  cfg.benchmark = true;
  const ProcessInfo proc = ProcessInfo::from_environment();
  cfg.world_size = proc.world_size;
  struct Restore {  // the caller's logging, on return or on an error
    bool log = g_log;
    ~Restore() { g_log = log; }
  } restore;
  g_log = verbose && proc.rank == 0;
  g_prefix.clear();
  TrainBenchmarkResult r;
  validate(cfg);
  reset_peak_rss();
  Trainer t(cfg, proc);
  t.set_benchmark_result(&r);
  t.run();
  r.peak_host_rss_bytes = peak_rss_bytes();
  return r;
}

int run_eval(TrainConfig cfg) {
  cfg.run_scope = RunScope::eval_only;
  return run_train(cfg);
}

}  // namespace rn50
