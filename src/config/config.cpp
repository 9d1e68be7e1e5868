#include "config/config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "config/flag_kinds.h"
#include "config/flags.h"

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
  const std::string l = flag_kinds::lower(s);
  if (l == "train_eval") return RunScope::train_eval;
  if (l == "train_only") return RunScope::train_only;
  if (l == "eval_only") return RunScope::eval_only;
  RN50_FAIL("--run-scope '{}': expected train_eval, train_only or eval_only", s);
}

const char* data_kind_name(DataKind k) {
  return k == DataKind::imagefolder ? "imagefolder" : "synthetic";
}

DataKind parse_data_kind(const std::string& s) {
  const std::string l = flag_kinds::lower(s);
  if (l == "imagefolder") return DataKind::imagefolder;
  if (l == "synthetic") return DataKind::synthetic;
  RN50_FAIL("--data '{}': expected imagefolder or synthetic{}", s,
            s.find('/') != std::string::npos ? " (a dataset folder goes to --image-root)" : "");
}

namespace {
void positive_world_size(int world) {
  RN50_CHECK(world >= 1, "world size {}: must be >= 1 (from the launcher's environment)", world);
}
}  // namespace

Normalization normalization(const Config& cfg) {
  Normalization n;
  for (int c = 0; c < 3; ++c) {
    n.mean[c] = static_cast<float>(cfg.normalize_mean[c]);
    n.std[c] = static_cast<float>(cfg.normalize_std[c]);
  }
  return n;
}

Precision precision_of(const Config& cfg, const std::string& backend) {
  if (cfg.use_pure_fp16) return Precision::pure_fp16;
  if (cfg.amp) return cfg.amp_dtype == "bf16" ? Precision::amp_bf16 : Precision::amp_fp16;
  return backend == "cuda" && !cfg.no_tf32 ? Precision::tf32 : Precision::fp32;
}

Config with_precision(Config cfg, Precision precision, const std::string& backend) {
  cfg.amp = precision == Precision::amp_fp16 || precision == Precision::amp_bf16 ||
            precision == Precision::pure_fp16;
  cfg.amp_dtype = precision == Precision::amp_bf16 ? "bf16" : "fp16";
  cfg.use_pure_fp16 = precision == Precision::pure_fp16;
  cfg.no_tf32 = backend == "cuda" && precision == Precision::fp32;
  return cfg;
}

StoreOptions store_options(const Config& cfg) {
  StoreOptions s;
  s.format = parse_data_format(cfg.data_format);
  s.root = cfg.image_root;
  s.train_list = cfg.train_list;
  s.val_list = cfg.val_list;
  s.train_shards = cfg.train_shards;
  s.val_shards = cfg.val_shards;
  s.idx_dir = cfg.data_idx_dir;
  s.label_offset = cfg.label_offset;
  s.num_classes = cfg.num_classes;
  return s;
}

LoaderOptions loader_options(const Config& cfg, const ProcessInfo& proc) {
  LoaderOptions lo;
  lo.batch_size = cfg.batch_size;
  lo.crop_size = cfg.crop_size;
  lo.resize_short = cfg.resize_short;
  lo.workers = cfg.workers;
  lo.prefetch = cfg.prefetch;
  lo.seed = cfg.seed;
  lo.drop_last = true;
  lo.max_bad_fraction = cfg.max_bad_fraction;
  lo.rank = proc.rank;
  lo.world_size = proc.world_size;
  lo.local_ranks = proc.local_size;
  lo.exact_decode = cfg.exact_decode;
  lo.rand_crop_scale = cfg.rand_crop_scale;
  lo.rand_crop_ratio = cfg.rand_crop_ratio;
  lo.worker_cpus = cfg.worker_cpus;
  lo.shuffle_buffer = cfg.shuffle_buffer;
  lo.bad_files_path = !cfg.report_file.empty()      ? cfg.report_file + ".bad_files.txt"
                      : !cfg.checkpoint_dir.empty() ? cfg.checkpoint_dir + "/bad_files.txt"
                                                    : std::string("bad_files.txt");
  return lo;
}


void validate(const Config& c) {
  // Each flag's own value (range, choice, syntax): the checks of the flag table.
  check_flags(c, kTrainAndEval);
  positive_world_size(c.world_size);
  // Pure fp16 (Paddle O2: f16 conv/fc weights, gradients and momentum), checked before the
  // device so that its own reasons come first.
  RN50_CHECK(!c.use_pure_fp16 || (c.amp && c.amp_dtype == "fp16"),
             "--use-pure-fp16 keeps the fp16 weights of fp16 mixed precision as the only copy: "
             "add --amp (with --amp-dtype fp16; there is no pure bf16: bf16 weights would drop "
             "every update smaller than 2^-9 of a weight)");
  RN50_CHECK(!c.use_pure_fp16 || !c.qat,
             "--use-pure-fp16 with --qat is not built: QAT fake-quantizes f32 master weights, "
             "which pure fp16 does not keep; drop --use-pure-fp16 (--amp keeps f32 master "
             "weights)");
  RN50_CHECK(!c.use_pure_fp16 ||
                 (c.world_size == 1 && c.dist_backend != "mpi" && c.dist_backend != "nccl"),
             "--use-pure-fp16 with data-parallel training is not built yet: the gradient "
             "allreduce reduces the f32 gradient slab, and pure fp16 keeps the conv/fc "
             "gradients in fp16; train with --amp (f32 master weights) on several processes");
  const DeviceChoice dev = resolve_device(c.device);
  // CPU AMP is bf16 (oneDNN); fp16 compute with loss scaling is the CUDA backend's.
  RN50_CHECK(!c.amp || dev.backend == "cuda" || c.amp_dtype == "bf16",
             "--amp with --amp-dtype {}: fp16 mixed precision runs on the CUDA backend only "
             "(--device {} resolves to the CPU); on the CPU use --amp --amp-dtype bf16, or "
             "--device cuda",
             c.amp_dtype, c.device);
  RN50_CHECK(!c.amp || dev.backend == "cuda" ||
                 make_backend(dev.backend)->supports(Op::conv2d, DType::bf16, Layout::NHWC),
             "--amp --amp-dtype bf16 on the CPU: oneDNN has no bf16 kernels for this CPU (it "
             "needs AVX-512); drop --amp to train in fp32");
  if (c.data == DataKind::imagefolder)
    RN50_CHECK(!c.image_root.empty() || !c.train_list.empty() || !c.val_list.empty() ||
                   !c.train_shards.empty() || !c.val_shards.empty(),
               "no images to train or evaluate on: pass --image-root DIR, an ImageFolder root "
               "holding train/<class>/*.JPEG and val/<class>/* ({}), or --data synthetic for "
               "random images (benchmarks only)",
               kDataHelp);
  RN50_CHECK(c.from_checkpoint.empty() || c.from_pretrained_params.empty(),
             "--from-checkpoint and --from-pretrained-params are exclusive (a checkpoint already "
             "holds the weights)");

  RN50_CHECK(!c.given.count("--image-shape") || c.image_shape_hw == c.crop_size,
             "--image-shape {},{},{} and --crop-size {} disagree: give one of them (--image-shape "
             "H,W is the crop size)",
             c.input_channels, c.image_shape_hw, c.image_shape_hw, c.crop_size);
  RN50_CHECK(c.input_channels == 3 || c.data_layout == Layout::NHWC,
             "--image-shape {},...: the zero fourth channel is DLE's NHWC padding (channels a "
             "multiple of 4 for tensor cores); use --data-layout NHWC or --image-shape 3,H,W",
             c.input_channels);

  // Flags given on the command line that would have no effect here: refused, with the reason.
  auto given = [&](const char* flag) { return c.given.count(flag) > 0; };
  auto refuse = [&](const char* flag, bool no_effect, const std::string& why) {
    RN50_CHECK(!(given(flag) && no_effect), "{} has no effect here: {}", flag, why);
  };
  const bool fp16_amp = c.amp && c.amp_dtype == "fp16";
  const bool cuda = dev.backend == "cuda";
  const bool training = c.run_scope != RunScope::eval_only;
  const bool synthetic = c.data == DataKind::synthetic;
  refuse("--amp-dtype", !c.amp, "it chooses the precision of --amp; add --amp");
  refuse("--scale-loss", !fp16_amp,
         "it is the initial loss scale of fp16 mixed precision; add --amp (with --amp-dtype "
         "fp16)");
  refuse("--use-dynamic-loss-scaling", !fp16_amp,
         "loss scaling exists in fp16 mixed precision only; add --amp (with --amp-dtype fp16)");
  refuse("--no-tf32", !cuda,
         fmt::format("TF32 exists on CUDA GPUs only and --device {} runs on the CPU in fp32",
                     c.device));
  refuse("--no-cuda-graphs", !cuda,
         fmt::format("CUDA graphs exist on CUDA GPUs only and --device {} runs on the CPU",
                     c.device));
  refuse("--prune-model", !c.asp, "it computes the masks of --asp sparse training; add --asp");
  refuse("--mask-algo", !c.prune_model, "it chooses how --prune-model computes masks; add "
         "--prune-model");
  refuse("--asp", c.run_scope == RunScope::eval_only,
         "evaluation does not train; the pruned weights are already zero in the checkpoint");
  RN50_CHECK(!c.prune_model || !c.from_pretrained_params.empty() || !c.from_checkpoint.empty(),
             "--prune-model prunes trained weights: give --from-pretrained-params FILE or "
             "--from-checkpoint DIR (pruning a random initialisation is pointless)");
  refuse("--lr-decay-epochs", c.lr_scheduler != "step",
         "it sets the step schedule's decay epochs; add --lr-scheduler step");
  refuse("--lr-decay-rate", c.lr_scheduler != "step",
         "it sets the step schedule's decay factor; add --lr-scheduler step");
  refuse("--warmup-start-lr", c.warmup_epochs <= 0, "there is no warmup (--warmup-epochs 0)");
  refuse("--image-root", synthetic, "--data synthetic reads no images; drop one of the two");
  refuse("--exact-decode", synthetic, "--data synthetic decodes no images");
  refuse("--rand-crop-scale", synthetic, "--data synthetic crops no images");
  refuse("--rand-crop-ratio", synthetic, "--data synthetic crops no images");
  refuse("--max-bad-fraction", synthetic, "--data synthetic reads no files");
  refuse("--synthetic-samples", !synthetic, "it sizes --data synthetic; add --data synthetic");
  const DataFormat format = synthetic ? DataFormat::imagefolder
                                            : data::detect_format(store_options(c));
  const bool shards =
      format == DataFormat::tfrecord || format == DataFormat::webdataset;
  refuse("--data-format", synthetic, "--data synthetic reads no files");
  refuse("--shuffle-buffer", !shards || !training,
         "it shuffles the shard stream of TFRecord and WebDataset training");
  refuse("--data-idx-dir", format != DataFormat::tfrecord,
         "it holds the index files of TFRecord shards");
  refuse("--label-offset", format != DataFormat::tfrecord,
         "it shifts TFRecord labels (other stores hold 0-based labels)");
  refuse("--train-shards", format != DataFormat::webdataset,
         "it names WebDataset shards; add --data-format webdataset");
  refuse("--val-shards", format != DataFormat::webdataset,
         "it names WebDataset shards; add --data-format webdataset");
  refuse("--benchmark-steps", !c.benchmark, "it counts --benchmark steps; add --benchmark");
  refuse("--benchmark-warmup-steps", !c.benchmark,
         "it counts --benchmark steps; add --benchmark");
  refuse("--profile", !c.benchmark, "it profiles the --benchmark steps; add --benchmark");
  refuse("--peak-file", !c.benchmark,
         "a share of the peak is a benchmark's figure; add --benchmark");
  refuse("--eval-interval", c.benchmark || c.run_scope != RunScope::train_eval,
         "nothing is evaluated during training with --benchmark or --run-scope train_only");
  refuse("--save-interval", c.benchmark || !training,
         "--benchmark and evaluation write no checkpoints");
  refuse("--checkpoint-dir", c.benchmark || !training,
         "--benchmark and evaluation write no checkpoints");
  refuse("--model-prefix", c.benchmark || !training || c.save_interval == 0,
         "it names checkpoint files, and this run writes none (--benchmark, evaluation or "
         "--save-interval 0)");
  refuse("--inference-dir", c.benchmark || !training,
         "only a training run writes an inference model at its end; use rn50 export on a "
         "checkpoint");
  refuse("--report-format", c.report_file.empty(),
         "it sets the format of --report-file; add --report-file FILE");
  refuse("--last-epoch-of-checkpoint", c.from_checkpoint.empty(),
         "it picks the epoch folder of --from-checkpoint; add --from-checkpoint");
  refuse("--strict-pretrained", c.from_pretrained_params.empty(),
         "it checks the class count of --from-pretrained-params weights; add "
         "--from-pretrained-params");
  refuse("--zero-init-residual", !c.from_checkpoint.empty() || !c.from_pretrained_params.empty(),
         "the weights come from --from-checkpoint / --from-pretrained-params, not from the "
         "initialisation");
  const bool one_process = c.world_size == 1;
  refuse("--bucket-size-mb", one_process && c.dist_backend != "mpi" && c.dist_backend != "nccl",
         "a single process allreduces no gradients (launch several with mpirun or srun)");
  refuse("--timeout", one_process,
         "it stops a job whose ranks stop making progress; a single process has none to wait "
         "for");
  refuse("--log-all-ranks", one_process, "a single process is rank 0 and prints anyway");
}

}  // namespace rn50
