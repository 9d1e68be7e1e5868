// rn50: building a Session (train/session.h) from the configuration, and the training step
// the drivers share.
#include "train/session.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "core/check.h"
#include "rn50/profile.h"
#include "model/sparsity.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "config/config.h"
#include "config/flags.h"
#include "data/sample_index.h"
#include "data/stores.h"
#include "train/mixup.h"

namespace rn50 {

namespace fs = std::filesystem;

namespace {
constexpr int64_t kImageNetTrainImages = 1281167;
constexpr int64_t kImageNetValImages = 50000;
/// set_session_backend_wrapper's function (tests only; null in every program).
SessionBackendWrapper g_backend_wrapper;
}  // namespace

void set_session_backend_wrapper(SessionBackendWrapper wrapper) {
  g_backend_wrapper = std::move(wrapper);
}

Session::Session(const Config& c, const ProcessInfo& p, Logger& l)
    : cfg(c),
      proc(p),
      log(l),
      report(p.rank == 0 ? c.report_file : std::string(), ReportWriter::Mode::truncate,
             "--report-file",
             c.report_format == "dllogger" ? ReportWriter::Format::dllogger
                                           : ReportWriter::Format::rn50) {
  setup_backend();
  setup_data();
  setup_model();
  log.out("rn50 {} {}: {} on {} ({} backend, {}, {}), {} classes, batch {}{}\n", kRn50Version,
          cfg.benchmark ? "benchmark" : run_scope_name(cfg.run_scope), cfg.arch, device.name,
          backend->name(), layout_name(cfg.data_layout),
          describe_precision(precision, loss_scale_, cfg.use_dynamic_loss_scaling), num_classes,
          cfg.batch_size,
          train ? fmt::format(", {} train images, {} steps/epoch, base lr {:.6g}",
                              train->num_samples(), steps_per_epoch, sched.base_lr)
                : std::string());
  if (train && cfg.warmup_epochs >= cfg.epochs && cfg.warmup_epochs > 0)
    log.warn(fmt::format("warning: --warmup-epochs {} >= --epochs {}: the lr stays in the "
                         "linear warmup for the whole run\n",
                         cfg.warmup_epochs, cfg.epochs));
  if (cfg.show_config)
    log.out("{}", config_table(cfg, cfg.run_scope == RunScope::eval_only ? kEval : kTrain));
  load_weights();
  if (cfg.run_scope != RunScope::eval_only) setup_sparsity();
  write_config_line();
}

Session::~Session() { step_.reset(); }

void Session::setup_backend() {
  device = resolve_device(cfg.device);
  // One GPU per local rank: with several processes, "cuda"/"auto" means cuda:<local rank>.
  if (device.backend == "cuda" && proc.world_size > 1 &&
      cfg.device.find(':') == std::string::npos) {
    const int n = cuda_device_count();
    RN50_CHECK(proc.local_rank < n,
               "local rank {} has no GPU: this node has {} GPU(s) and {} processes (one GPU per "
               "process)",
               proc.local_rank, n, proc.local_size);
    device.index = proc.local_rank;
    device.name = "cuda:" + std::to_string(proc.local_rank);
  }
  precision = precision_of(cfg, device.backend);
  // Each local rank's threads (loader workers, OpenMP) on its own share of the cores.
  if (proc.local_size > 1) {
    const std::vector<int> cores = cores_for_local_rank(proc.local_rank, proc.local_size);
    if (!cores.empty()) {
      omp_set_num_threads(static_cast<int>(cores.size()));
      if (cfg.enable_cpu_affinity) {
        const std::string where = bind_to_cores(cores);
        std::fprintf(stderr, "rank %d (local %d of %d): threads bound to %s\n", proc.rank,
                     proc.local_rank, proc.local_size, where.c_str());
      } else {
        std::fprintf(stderr,
                     "rank %d (local %d of %d): %zu threads, not bound to cores "
                     "(--enable-cpu-affinity false)\n",
                     proc.rank, proc.local_rank, proc.local_size, cores.size());
      }
    }
  }
  BackendOptions bo;
  bo.device_index = device.index;
  bo.allow_tf32 = precision != Precision::fp32;
  backend = make_backend(device.backend, bo);
  // --profile: every op through the profiling backend, timed whenever the benchmark's profiler
  // is active (rn50/profile.h).
  if (cfg.profile) backend = make_profiling_backend(std::move(backend));
  if (g_backend_wrapper) backend = g_backend_wrapper(std::move(backend));  // tests only
  comm_ = make_communicator(cfg.dist_backend, *backend);
  RN50_CHECK(comm_->world_size() == proc.world_size,
             "communicator '{}' sees {} processes, the launcher {}", comm_->name(),
             comm_->world_size(), proc.world_size);
  RN50_CHECK(!(comm_->name() == "mpi" && backend->name() == "cuda"),
             "--dist-backend mpi reduces host tensors; GPU training needs --dist-backend nccl "
             "(or auto)");
  if (cfg.timeout > 0 && proc.world_size > 1) comm_->start_watchdog(cfg.timeout);
}

void Session::setup_data() {
  const bool need_train = cfg.run_scope != RunScope::eval_only;
  const bool need_val = cfg.run_scope == RunScope::eval_only ||
                        (cfg.run_scope == RunScope::train_eval && !cfg.benchmark);
  LoaderOptions lo = loader_options(cfg, proc);
  // Batches straight into memory the backend uploads from fastest (pinned on CUDA).
  Backend* be = backend.get();
  lo.alloc_host = [be](std::vector<int64_t> shape, DType dt, Layout l) {
    return be->alloc_host(std::move(shape), dt, l);
  };
  if (cfg.data == DataKind::synthetic) {
    num_classes = cfg.num_classes > 0 ? cfg.num_classes : 1000;
    int64_t n = cfg.synthetic_samples;
    if (n == 0)
      n = cfg.benchmark ? static_cast<int64_t>(cfg.batch_size) *
                              (cfg.benchmark_steps + cfg.benchmark_warmup_steps)
                        : kImageNetTrainImages;
    if (need_train) train = make_synthetic_source(n, num_classes, lo);
    if (need_val) {
      LoaderOptions vo = lo;
      vo.drop_last = false;
      vo.seed = cfg.seed + 1;
      val = make_synthetic_source(std::min(n, kImageNetValImages), num_classes, vo);
    }
  } else {
    const StoreOptions store = store_options(cfg);
    const DataFormat format = data::detect_format(store);
    const bool split_folders =
        format == DataFormat::imagefolder || format == DataFormat::webdataset;
    RN50_CHECK(cfg.image_root.empty() || fs::is_directory(cfg.image_root),
               "--image-root '{}': no such directory; pass the folder that holds train/ and val/ "
               "({})",
               cfg.image_root, kDataHelp);
    auto open = [&](Split split, const LoaderOptions& o) {
      const char* name = split == Split::train ? "train" : "val";
      if (split_folders)
        RN50_CHECK(data::has_split(store, split),
                   "--image-root '{}': no {}/ folder ('{}/{}' is missing)", cfg.image_root, name,
                   cfg.image_root, name);
      else if (format == DataFormat::filelist)
        RN50_CHECK(data::has_split(store, split), "--data-format filelist: give --{}-list FILE",
                   name);
      else
        RN50_CHECK(data::has_split(store, split),
                   "--image-root '{}': no TFRecord shards of the {} split ({}-NNNNN-of-NNNNN)",
                   cfg.image_root, name, split == Split::train ? "train" : "validation");
      std::string what;
      auto samples = data::open_split(store, split, &what);
      return data::make_sample_source(std::move(samples), split, o, what);
    };
    if (need_train) train = open(Split::train, lo);
    if (need_val) {
      LoaderOptions vo = lo;
      vo.drop_last = false;
      val = open(Split::val, vo);
    }
    DataSource& ref = train ? *train : *val;
    const int folders = ref.num_classes();
    num_classes = cfg.num_classes > 0 ? cfg.num_classes : folders;
    RN50_CHECK(num_classes >= folders,
               "--num-of-class {}: '{}' has {} class folders (labels would be out of range)",
               cfg.num_classes, cfg.image_root, folders);
    if (train && val)
      RN50_CHECK(train->classes() == val->classes(),
                 "--image-root '{}' ({}): the train split has {} classes, the val split {}, and "
                 "their names differ: labels would not match",
                 cfg.image_root, data_format_name(format), train->num_classes(),
                 val->num_classes());
  }
  classes = train ? train->classes() : val->classes();
  if (train) {
    steps_per_epoch = train->batches_per_epoch();
    RN50_CHECK(steps_per_epoch > 0,
               "--batch-size {}: larger than the {} training samples (the last partial batch is "
               "dropped, so an epoch would have no steps)",
               cfg.batch_size, train->num_samples());
  }
  sched = lr_schedule(cfg, std::max<int64_t>(1, steps_per_epoch));
}

void Session::setup_model() {
  ModelOptions mo;
  mo.num_classes = num_classes;
  mo.layout = cfg.data_layout;
  mo.zero_init_residual = cfg.zero_init_residual;
  mo.input_channels = cfg.input_channels;
  mo.qat = cfg.qat;
  mo.compute_dtype = compute_dtype(precision);
  mo.pure_half = precision == Precision::pure_fp16;
  model = std::make_unique<ResNet>(*backend, arch_from_name(cfg.arch), mo);
  model->init(cfg.seed);
  loss_hist_ = backend->alloc({cfg.print_interval}, DType::f32);
  hits_hist_ = backend->alloc({2 * static_cast<int64_t>(cfg.print_interval)}, DType::f32);
  input = std::make_unique<InputStage>(*backend, cfg.data_layout, mo.compute_dtype, num_classes,
                                       2, normalization(cfg),
                                       /*reversed_labels=*/cfg.mixup > 0, cfg.input_channels);
  SgdOptimizer::Options oo;
  oo.momentum = static_cast<float>(cfg.momentum);
  oo.weight_decay = static_cast<float>(cfg.weight_decay);
  oo.decay_all = cfg.bn_weight_decay;
  optimizer = std::make_unique<SgdOptimizer>(*backend, *model, oo);
  StepOptions so;
  so.label_smoothing = static_cast<float>(cfg.label_smoothing);
  so.mixup = cfg.mixup > 0;
  so.loss_scaling = loss_scaling();
  so.initial_loss_scale = static_cast<float>(cfg.scale_loss);
  so.scale.dynamic = cfg.use_dynamic_loss_scaling;
  so.use_graphs = !cfg.no_cuda_graphs;
  // Gradient allreduce with several processes, or when a communicator is asked for explicitly
  // (e.g. --dist-backend nccl at world size 1, to measure its overhead).
  if (proc.world_size > 1 || comm_->name() != "single") {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int i : model->grad_ready_order())
      ranges.emplace_back(model->params()[i].offset, model->params()[i].numel());
    bucketer_ = std::make_unique<GradBucketer>(
        *comm_, *backend, model->grad_slab(), std::move(ranges),
        static_cast<size_t>(cfg.bucket_size_mb * 1024 * 1024));
    so.bucketer = bucketer_.get();
    so.loss_grad_scale = 1.f / static_cast<float>(proc.world_size);
  }
  loss_scale_ = loss_scaling() ? so.initial_loss_scale : 1.f;
  step_ = std::make_unique<TrainStep>(*backend, *model, *input, *optimizer, so);
}

void Session::load_weights() {
  if (!cfg.from_pretrained_params.empty()) {
    const std::string file = weights_file(cfg.from_pretrained_params, "--from-pretrained-params");
    // Evaluating a fresh classifier would measure nothing: only training re-initialises fc.
    const std::string note =
        load_pretrained_params(file, *model, /*strict_classes=*/cfg.strict_pretrained || !train);
    log.out("loaded pretrained parameters from {}{}\n", file,
            note.empty() ? std::string() : "; " + note);
  }
  if (cfg.from_checkpoint.empty()) return;
  // A training run with --last-epoch-of-checkpoint auto is one command line for the first start
  // and every restart (a Slurm requeue, a preemption): no complete checkpoint yet means epoch 0.
  // The run's own --checkpoint-dir may not exist yet (killed before anything was written);
  // another missing folder is a mistake and refused.
  const bool auto_epoch =
      cfg.last_epoch_of_checkpoint == "auto" || cfg.last_epoch_of_checkpoint.empty();
  auto canonical = [](const std::string& dir) {  // "out/" and "./out" name "out" too
    fs::path p = fs::weakly_canonical(dir);
    return p.has_filename() ? p : p.parent_path();
  };
  auto own_dir = [&](const std::string& dir) {
    const fs::path d = canonical(dir), own = canonical(cfg.checkpoint_dir);
    return d == own || d == own / cfg.arch;
  };
  if (train && auto_epoch && !fs::exists(cfg.from_checkpoint) && own_dir(cfg.from_checkpoint)) {
    log.out("--from-checkpoint '{}' does not exist yet (no checkpoint written): starting from "
            "epoch 0\n",
            cfg.from_checkpoint);
    return;
  }
  resumed_from = resolve_checkpoint_dir(cfg.from_checkpoint, cfg.last_epoch_of_checkpoint,
                                        cfg.arch, /*none_ok=*/train != nullptr);
  if (resumed_from.empty()) {
    log.out("--from-checkpoint '{}' holds no complete checkpoint yet (--last-epoch-of-checkpoint "
            "auto): starting from epoch 0\n",
            cfg.from_checkpoint);
    return;
  }
  CheckpointState st = read_checkpoint_state(resumed_from);
  RN50_CHECK(st.arch.empty() || st.arch == cfg.arch,
             "--from-checkpoint '{}' holds a {} model but --arch is {}", resumed_from, st.arch,
             cfg.arch);
  st = load_checkpoint(resumed_from, *model, *optimizer);
  resumed_epoch = st.epoch;
  if (loss_scaling() && st.loss_scale > 0) {  // continue the fp16 loss-scale schedule
    step_->set_loss_scale(static_cast<float>(st.loss_scale), static_cast<float>(st.skipped_steps));
    loss_scale_ = static_cast<float>(st.loss_scale);
    skipped_steps_ = st.skipped_steps;
  }
  start_epoch = st.epoch + 1;
  global_step = st.global_step;
  if (train && st.steps_per_epoch != steps_per_epoch)
    log.warn(fmt::format(
        "warning: checkpoint '{}' was written with {} steps per epoch, this run has {}: the lr "
        "schedule continues from global step {}\n",
        resumed_from, st.steps_per_epoch, steps_per_epoch, st.global_step));
  if (!st.classes.empty() && st.classes != classes)
    log.warn(fmt::format("warning: checkpoint '{}' was trained on different classes ({} "
                         "classes) than this data ({} classes)\n",
                         resumed_from, st.classes.size(), classes.size()));
  if (train)
    log.out("resumed from {} (epoch {} done, global step {}, next lr {:.6g})\n", resumed_from,
            st.epoch, st.global_step, sched.at(global_step));
  else
    log.out("loaded {} (epoch {})\n", resumed_from, st.epoch);
}

void Session::setup_sparsity() {
  const bool restored = optimizer->mask().defined();
  if (!cfg.asp) {
    RN50_CHECK(!restored,
               "--from-checkpoint '{}' holds 2:4 sparsity masks (an --asp run): add --asp to "
               "keep training it sparse",
               resumed_from);
    return;
  }
  if (!cfg.prune_model) {
    RN50_CHECK(restored,
               "--asp without --prune-model trains with the masks of an --asp checkpoint, and "
               "there is none: add --prune-model (with --from-pretrained-params or "
               "--from-checkpoint) to compute them");
    log.out("asp: holding the 2:4 masks restored from {}\n", resumed_from);
    return;
  }
  const MaskAlgo algo = mask_algo_from_name(cfg.mask_algo);
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : model->state_dict()) weights.emplace(name, t);
  std::map<std::string, Tensor> masks;
  int64_t zeros = 0;
  for (const ParamInfo& p : model->params()) {
    if (!asp_prunes(p)) continue;
    Tensor m = weight_mask(weights.at(p.name), algo, p.name);
    const int64_t kept = std::count(m.data_as<const uint8_t>(),
                                    m.data_as<const uint8_t>() + m.numel(), uint8_t{1});
    zeros += m.numel() - kept;
    log.out("asp: {:<28} {:>8} weights, density {:.1f}%\n", p.name, m.numel(),
            100.0 * static_cast<double>(kept) / static_cast<double>(m.numel()));
    masks.emplace(p.name, std::move(m));
  }
  optimizer->set_param_masks(masks);  // zeroes the pruned weights now
  log.out("asp: {} pruned {} convs (stem, BatchNorm and fc dense): {} of {} parameters are zero "
          "({:.1f}%)\n",
          cfg.mask_algo, masks.size(), zeros, model->num_params(),
          100.0 * static_cast<double>(zeros) / static_cast<double>(model->num_params()));
}

void Session::write_config_line() {
  ReportRecord r("config");
  r.set_flags(config_to_json(cfg));
  r.set("num_of_class", num_classes);  // resolved
  r.set("classes", static_cast<int64_t>(classes.size()));
  r.set("global_batch_size", static_cast<int64_t>(cfg.batch_size) * cfg.world_size);
  r.set("rank", proc.rank);
  r.set("launcher", proc.launcher);
  r.set("communicator", comm_->name());
  r.set("base_lr", sched.base_lr);
  r.set("steps_per_epoch", steps_per_epoch);
  r.set("backend", backend->name());
  r.set("resolved_device", device.name);
  r.set("precision", std::string(precision_name(precision)));
  r.set("compute_dtype", dtype_name(model->options().compute_dtype));
  r.set("train.samples", train ? train->num_samples() : 0);
  r.set("val.samples", val ? val->num_samples() : 0);
  r.set("params", model->num_params());
  if (!resumed_from.empty()) {
    r.set("resumed_from", resumed_from);
    r.set("start_epoch", start_epoch);
    r.set("start_step", global_step);
  }
  report.write(r);
}

void Session::run_step(const Batch& b, double lr, int64_t slot, bool metrics) {
  comm_->heartbeat();
  const int s = input->upload(b);
  // Mixup's weight of this step, keyed by (seed, global step, rank): a resumed run draws the
  // same sequence.
  const double lam =
      cfg.mixup > 0 ? mixup_lambda(cfg.mixup, cfg.seed, global_step, proc.rank) : 1.0;
  step_->run(s, lr, lam);
  if (metrics) {
    // The step's logits stay intact until the next forward (backward does not write them);
    // queued before release(s), so the slot's labels are still this batch's. Under mixup the
    // hits count against each sample's dominant label (DLE PyTorch: the argmax of the mixed
    // target), its own for lam >= 0.5, else its partner's.
    const Tensor& labels = lam >= 0.5 ? input->labels(s) : input->reversed_labels(s);
    Tensor hits = hits_hist_.slice0(2 * slot, 2 * slot + 2);
    backend->topk_hits(step_->logits().slice0(0, b.size), labels.slice0(0, b.size), hits);
  }
  input->release(s);
  Tensor dst = loss_hist_.slice0(slot, slot + 1);
  backend->copy(step_->loss(), dst);
}

std::vector<float> Session::read_losses(int64_t n, std::vector<float>* hits) {
  Tensor h = Tensor::empty({n}, DType::f32);
  backend->copy(loss_hist_.slice0(0, n), h);
  Tensor hh;
  if (hits) {
    hh = Tensor::empty({2 * n}, DType::f32);
    backend->copy(hits_hist_.slice0(0, 2 * n), hh);
  }
  backend->synchronize();
  if (hits) hits->assign(hh.data_as<float>(), hh.data_as<float>() + 2 * n);
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + n);
}

void Session::check_amp_skips(int64_t at_step) {
  if (!loss_scaling()) return;
  const Tensor st = step_->read_state();
  const float* s = st.data_as<const float>();
  const auto skipped = static_cast<int64_t>(s[StepState::skipped_steps]);
  loss_scale_ = s[StepState::loss_scale];
  if (skipped > skipped_steps_)
    log.warn(fmt::format("amp: {} step(s) skipped for inf/NaN gradients before global step {} "
                         "({} in total); loss scale now {:g}\n",
                         skipped - skipped_steps_, at_step, skipped, loss_scale_));
  skipped_steps_ = skipped;
}

void Session::set_loss_scale_fields(ReportRecord& r) const {
  if (!loss_scaling()) return;
  r.set("train.loss_scale", loss_scale_);
  r.set("train.skipped_steps", skipped_steps_);
}

CheckpointState Session::checkpoint_state(int epoch) const {
  CheckpointState st;
  st.epoch = epoch;
  st.global_step = global_step;
  st.next_lr = sched.at(global_step);
  st.steps_per_epoch = steps_per_epoch;
  st.seed = cfg.seed;
  st.arch = cfg.arch;
  st.classes = classes;
  st.config = config_to_json(cfg);
  st.config["num_of_class"] = num_classes;
  st.version = kRn50Version;
  std::tie(st.model_file, st.optimizer_file) = checkpoint_file_names(cfg.model_prefix);
  if (loss_scaling()) {
    st.loss_scale = loss_scale_;
    st.skipped_steps = skipped_steps_;
  }
  return st;
}

}  // namespace rn50
