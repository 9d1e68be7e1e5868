// rn50: the configuration of every command — one Config holding every flag's value — and what
// is defined on it: the run scope and data kinds, the input normalisation, validation.
//
// Recipe: NVIDIA DeepLearningExamples (DLE) ResNet-50 v1.5 — SGD momentum 0.875, lr 0.256 per
// 256 images with linear warmup then cosine decay updated every step, weight decay 1/32768 on
// conv and fc weights only, label smoothing 0.1, 90 epochs of batch 256.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "rn50/data.h"
#include "rn50/tensor.h"

namespace rn50 {

/// Version string written into reports and checkpoints.
inline constexpr const char* kRn50Version = "0.1.0";

/// What a `train` invocation does (DLE PaddlePaddle --run-scope).
enum class RunScope { train_eval, train_only, eval_only };
/// "train_eval" / "train_only" / "eval_only".
const char* run_scope_name(RunScope s);
/// Parses a run scope name; throws rn50::Error naming --run-scope and the value otherwise.
RunScope parse_run_scope(const std::string& s);

/// Where batches come from: an ImageFolder tree (<image-root>/train, <image-root>/val) or
/// random uint8 images (benchmarks, smoke tests).
enum class DataKind { imagefolder, synthetic };
const char* data_kind_name(DataKind k);
/// Parses "imagefolder" / "synthetic"; throws rn50::Error naming --data and the value otherwise.
DataKind parse_data_kind(const std::string& s);

/// Every flag of every rn50 command, one field each: the training and evaluation flags (also
/// the base of `bench train`, the loader flags of `bench loader`, the model and data flags of
/// predict, export and bench infer), then the flags of the other commands. The flag table
/// (src/config/flags.h) declares each flag once, with the commands that take it. Field <-> flag:
/// underscores become dashes (num_classes is --num-of-class). Defaults are DLE's RN50 v1.5
/// recipe unless noted; a command's own defaults come from default_config().
struct Config {
  // ---- what to run ----
  /// --run-scope: train_eval (train, evaluate every eval_interval epochs), train_only, eval_only
  /// (one pass over <image-root>/val). Default train_eval (DLE Paddle).
  RunScope run_scope = RunScope::train_eval;
  /// --benchmark: time benchmark_warmup_steps + benchmark_steps training steps, report train.ips
  /// (images / wall seconds of the measured steps); no evaluation, no checkpoints (DLE Paddle).
  /// With run_scope eval_only (`rn50 eval --benchmark`, DLE's inference benchmark): time
  /// benchmark_steps calls of the CPU inference engine on batch_size random images after the
  /// warm-up calls, report infer.ips and latency avg/p50/p90/p95/p99 (an infer_benchmark line).
  bool benchmark = false;
  /// --benchmark-steps: measured steps (DLE Paddle default 100; 50 here: CPU runs are slow).
  int benchmark_steps = 50;
  /// --benchmark-warmup-steps: untimed steps before measuring (DLE Paddle 100; 10 here).
  int benchmark_warmup_steps = 10;
  /// --profile: with --benchmark (rn50 train) and in rn50 bench infer: time every op of the
  /// measured steps (forward, backward-data, backward-weights apart; reorders and copies as ops
  /// of their own; rn50/profile.h), print the per-op table and write a "profile" report record.
  /// Each op is timed on its own (the backend synchronised after it; no CUDA graph), so the
  /// figures of a profiled run are of that run.
  bool profile = false;
  /// --include-upload (rn50 bench infer on a GPU): time the input's upload and the logits' copy
  /// back with each call; default false: the input stays on the device (InferBenchConfig).
  bool include_upload = false;
  /// --peak-file: a file holding "peak" records (`rn50 bench peak --report-file FILE`); the
  /// benchmark records then carry the share of the measured peak of their precision
  /// (rn50/roofline.h). Empty = no share (GFLOP/image and achieved GFLOP/s are recorded anyway).
  std::string peak_file;

  // ---- optimisation (DLE RN50 v1.5) ----
  /// --epochs: number of epochs (DLE 90).
  int epochs = 90;
  /// --batch-size: images per step per process (DLE 256). Global batch = batch_size * world_size.
  int batch_size = 256;
  /// --lr: learning rate per 256 images (DLE 0.256); base lr = lr * global_batch / 256.
  double lr = 0.256;
  /// --warmup-epochs: epochs of linear warmup, may be fractional (DLE 5).
  double warmup_epochs = 5;
  /// --warmup-start-lr: the lr linear warmup starts from (0: DLE PyTorch's base*(step+1)/warm).
  double warmup_start_lr = 0;
  /// --lr-scheduler: cosine (DLE default) | step | linear | constant (train/lr_schedule.h).
  std::string lr_scheduler = "cosine";
  /// --lr-decay-epochs: step schedule: epochs at which the lr is multiplied by lr_decay_rate.
  std::vector<double> lr_decay_epochs{30, 60, 80};
  /// --lr-decay-rate: step schedule factor (DLE 0.1).
  double lr_decay_rate = 0.1;
  /// --bn-weight-decay: apply weight decay to every parameter, BatchNorm gamma/beta and biases
  /// included (DLE flag; default off: conv and fc weights only).
  bool bn_weight_decay = false;
  /// --momentum: SGD momentum (DLE 0.875).
  double momentum = 0.875;
  /// --weight-decay: L2 on conv and fc weights only (DLE 3.0517578125e-05 = 1/32768).
  double weight_decay = 3.0517578125e-05;
  /// --label-smoothing: epsilon of the smoothed target (DLE 0.1).
  double label_smoothing = 0.1;
  /// --asp: 2:4 structured sparse training (DLE Paddle, NVIDIA ASP): the masks (from
  /// --prune-model, or restored from an --asp checkpoint) hold the pruned conv weights at exactly
  /// zero through every step (src/model/sparsity.h).
  bool asp = false;
  /// --qat: quantization-aware training (DLE Paddle's QAT): 8-bit fake quantization of every
  /// conv's and the fc's weights (per output channel) and inputs (per tensor, moving-average
  /// ranges), straight-through backward; evaluation runs the fake-quantized graph too. The
  /// ranges are saved in the checkpoint; `rn50 export --precision int8` takes them as the INT8
  /// engine's scales. Start from trained weights (--from-pretrained-params) at a small --lr.
  bool qat = false;
  /// --prune-model: compute the 2:4 masks from the starting weights (--from-pretrained-params /
  /// --from-checkpoint) with --mask-algo; needs --asp.
  bool prune_model = false;
  /// --mask-algo: mask_1d (default, DLE's) | mask_2d_greedy | mask_2d_best.
  std::string mask_algo = "mask_1d";
  /// --mixup: alpha of mixup's Beta(alpha, alpha) weight (DLE PyTorch --mixup; 0.2 in its
  /// 250-epoch configuration); 0 (default) = off. Each sample is mixed with the batch's sample in
  /// reversed order (train/mixup.h); training top-1/top-5 count against the dominant label.
  double mixup = 0;

  // ---- model ----
  /// --arch: resnet18/34/50/101/152 (default resnet50).
  std::string arch = "resnet50";
  /// --num-of-class: classes of the fc layer; 0 = the number of class folders of
  /// <image-root>/train (<image-root>/val for eval_only), 1000 for synthetic data.
  int num_classes = 0;
  /// --zero-init-residual: gamma = 0 for the last BN of each residual branch (DLE flag; DLE's
  /// PyTorch default for RN50 is off, as here).
  bool zero_init_residual = false;
  /// --data-layout: activation memory layout NCHW or NHWC (default NHWC, "channels last").
  Layout data_layout = Layout::NHWC;
  /// --device: "auto" (default: cuda:0 when a GPU is usable, else cpu), "cpu" (oneDNN
  /// backend) or "cuda[:N]" (CUDA backend on GPU N).
  std::string device = "auto";

  // ---- precision (CUDA) ----
  /// --amp: mixed precision (DLE --amp): convolutions, fc and activations in --amp-dtype with
  /// f32 master weights, BN parameters, loss and optimiser. CUDA (fp16, bf16) or the CPU (bf16
  /// through oneDNN, on CPUs with AVX-512).
  bool amp = false;
  /// --amp-dtype: fp16 (default; with loss scaling; CUDA only) or bf16 (no loss scaling).
  std::string amp_dtype = "fp16";
  /// --use-pure-fp16 (DLE Paddle's O2; with --amp fp16, one process): the conv/fc weights,
  /// gradients and momentum exist only in fp16 (ModelOptions::pure_half); BN parameters,
  /// statistics and the loss stay f32. Saves 10 bytes per parameter (255 MB for ResNet-50);
  /// risk: an update smaller than half an fp16 ulp of its weight is lost.
  bool use_pure_fp16 = false;
  /// --scale-loss: the (initial) loss scale under --amp fp16 (DLE Paddle flag; 128 as in DLE's
  /// AMP launch scripts).
  double scale_loss = 128.0;
  /// --use-dynamic-loss-scaling[=true|false]: grow/back off the loss scale (torch GradScaler:
  /// x2 after 2000 finite steps, x0.5 on overflow). Default true. A step whose gradients hold
  /// inf/NaN is skipped either way (and logged).
  bool use_dynamic_loss_scaling = true;
  /// --no-tf32: f32 convolutions and GEMMs without TF32 tensor cores (default: TF32 allowed).
  bool no_tf32 = false;
  /// --no-cuda-graphs: run each CUDA step op by op instead of replaying a recorded graph.
  bool no_cuda_graphs = false;

  // ---- data ----
  /// --data: imagefolder (default) or synthetic.
  DataKind data = DataKind::imagefolder;
  /// --image-root: ImageFolder root holding train/ and val/ (required for --data imagefolder).
  std::string image_root;
  /// --data-format: how the images at --image-root are stored: auto (default: detected),
  /// imagefolder, filelist (--train-list/--val-list, PaddleClas), tfrecord (the standard
  /// ImageNet conversion's shards, DLE TensorFlow; DALI index files in --data-idx-dir) or
  /// webdataset (tar shards in <image-root>/train and /val, or --train-shards/--val-shards).
  std::string data_format = "auto";
  /// --train-list / --val-list: PaddleClas file lists, "relative/path label" per line.
  std::string train_list, val_list;
  /// --train-shards / --val-shards: WebDataset shards: a folder, a brace pattern
  /// (imagenet-train-{000000..001281}.tar) or one file.
  std::string train_shards, val_shards;
  /// --data-idx-dir: DALI index files (<shard>.idx) of TFRecord shards; built when missing.
  std::string data_idx_dir;
  /// --label-offset: subtracted from TFRecord labels (the conversion's 1..1000; DLE 1).
  int label_offset = 1;
  /// --shuffle-buffer: samples in the buffer that shuffles the shard stream of TFRecord and
  /// WebDataset training (shards are shuffled per epoch too).
  int64_t shuffle_buffer = 1024;
  /// --crop-size: train RandomResizedCrop size and val center-crop size, pixels (DLE 224).
  int crop_size = 224;
  /// --image-shape C,H,W (DLE Paddle/MXNet): C = input channels, 3 or 4 (a zero fourth channel
  /// with NHWC, as DLE's DALI pipelines pad for tensor-core alignment); H = W = --crop-size.
  int input_channels = 3;
  /// H of the last --image-shape parsed (0: none), to refuse a conflicting --crop-size on the
  /// command line.
  int image_shape_hw = 0;
  /// --normalize-mean: per-channel RGB mean subtracted from pixel / 255 (DLE flag; ImageNet's).
  std::array<double, 3> normalize_mean{0.485, 0.456, 0.406};
  /// --normalize-std: per-channel RGB std the centred value is divided by (DLE; ImageNet's).
  std::array<double, 3> normalize_std{0.229, 0.224, 0.225};
  /// --resize-short: val shorter-side resize before the center crop, pixels (DLE 256).
  int resize_short = 256;
  /// --rand-crop-scale: RandomResizedCrop area fraction range LO,HI (DLE 0.08,1).
  std::array<double, 2> rand_crop_scale{0.08, 1.0};
  /// --rand-crop-ratio: RandomResizedCrop aspect ratio range LO,HI (DLE 3/4,4/3).
  std::array<double, 2> rand_crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  /// --workers: decode threads; 0 = the cores this process may use divided by the processes
  /// on this machine.
  int workers = 0;
  /// --max-bad-fraction: abort when undecodable files exceed this fraction of an epoch's
  /// samples (default 0.001); below it each is skipped, logged and counted (train.bad_samples).
  /// On abort the list goes to <report-file>.bad_files.txt, else <checkpoint-dir>/bad_files.txt,
  /// else ./bad_files.txt.
  double max_bad_fraction = 0.001;
  /// --exact-decode: decode whole images and resample exactly as PIL/torchvision (default: the
  /// fast DALI-style DCT-scaled region decoding).
  bool exact_decode = false;
  /// --worker-cpus: pin decode worker i to CPU list[i % n] (logged); empty = no pinning.
  std::vector<int> worker_cpus;
  /// --prefetch: batches queued ahead per worker (default 2).
  int prefetch = 2;
  /// --synthetic-samples: samples per epoch of --data synthetic (rn50 extension); 0 = automatic:
  /// batch * (benchmark warmup + steps) for --benchmark, else 1281167 (ImageNet-1k train).
  /// Synthetic val uses min(50000, that number).
  int64_t synthetic_samples = 0;
  /// --seed: seed of the weight init and of the data order/augmentation (a function of
  /// (seed, epoch)). Default 0 (DLE PyTorch has none; 0 matches shared/peers/torch_reference.py).
  uint64_t seed = 0;

  // ---- logging, evaluation, checkpoints ----
  /// --print-interval: steps between progress lines / "step" report lines (DLE Paddle 10).
  int print_interval = 10;
  /// --eval-interval: evaluate every N epochs (and after the last epoch). Default 1.
  int eval_interval = 1;
  /// --save-interval: checkpoint every N epochs (and after the last epoch); 0 = never. Default 1.
  int save_interval = 1;
  /// --checkpoint-dir: checkpoints go to <checkpoint-dir>/<arch>/<epoch>/ (default ./output).
  std::string checkpoint_dir = "./output";
  /// --model-prefix: file name prefix of the checkpoint files (DLE Paddle flag): P gives
  /// P.safetensors and P.optimizer.safetensors; the default "model" keeps model.safetensors and
  /// optimizer.safetensors. state.json records the names, so resuming needs no flag.
  std::string model_prefix = "model";
  /// --inference-dir: after the last epoch, write the trained model for inference there (rn50
  /// export's format: model.json + model.safetensors, BatchNorm folded; DLE flag). Empty = none.
  std::string inference_dir;
  /// --report-file: JSON-lines report (config, step, epoch, eval, benchmark lines); empty = none.
  std::string report_file;
  /// --report-format: "rn50" (default: one report record per line, docs/report-schema.md) or
  /// "dllogger" (DLE's DLLogger JSON lines, "DLLL {...}", read by DLE's parsing scripts and by
  /// rn50 report; core/dllogger.h gives the mapping).
  std::string report_format = "rn50";
  /// --from-checkpoint: resume from a directory of epoch folders (<checkpoint-dir>/<arch>) or
  /// directly from one epoch folder (holding state.json).
  std::string from_checkpoint;
  /// --last-epoch-of-checkpoint: epoch folder to resume from: an integer, or "auto" (default) =
  /// the largest integer-named sub-folder holding state.json (DLE Paddle flag); in training,
  /// "auto" with no complete checkpoint yet starts from epoch 0 (a requeued job's first start).
  std::string last_epoch_of_checkpoint = "auto";
  /// --from-pretrained-params: safetensors file with torchvision state_dict keys to initialise
  /// the model from (num_batches_tracked entries ignored); a folder or a DLE path prefix too.
  std::string from_pretrained_params;
  /// --strict-pretrained: refuse --from-pretrained-params weights whose classifier has another
  /// class count instead of re-initialising fc (the default for fine-tuning).
  bool strict_pretrained = false;

  // ---- data parallelism (launch with mpirun / srun; see docs/distributed.md) ----
  /// Processes taking part: set from the launcher's environment (OpenMPI / Slurm), not a flag.
  int world_size = 1;
  /// --dist-backend: auto (nccl on GPUs, mpi on CPUs when world size > 1, else single), single,
  /// mpi or nccl.
  std::string dist_backend = "auto";
  /// --bucket-size-mb: gradient allreduce bucket size, MiB (default 25, as torch DDP).
  double bucket_size_mb = 25;
  /// --log-all-ranks: every rank prints its progress (prefixed "[rank R]"); default rank 0 only.
  bool log_all_ranks = false;
  /// --enable-cpu-affinity true|false: with several processes on a node, bind each to its own
  /// contiguous share of the allowed cores (threads and loader workers stay there; default
  /// true, DLE Paddle's flag). false: no binding; OpenMP threads still split the cores. One
  /// process is never bound.
  bool enable_cpu_affinity = true;
  /// --timeout: seconds without progress after which a rank stops the whole job (a collective
  /// stuck on a dead or hung rank); 0 = never (default 1800).
  double timeout = 1800;
  /// --max-nonfinite-steps: consecutive steps with an inf/NaN loss tolerated before the run
  /// stops with an error (default 3; AMP overflow steps are skipped, not counted here).
  int max_nonfinite_steps = 3;

  // ---- what to run: more ----
  /// --optimizer: "momentum" (DLE Paddle's Momentum: SGD with momentum, the only optimizer of
  /// the RN50 v1.5 recipe; others are refused with the reason).
  std::string optimizer = "momentum";

  // ---- inference and deployment (predict, export, bench infer) ----
  /// --model: an rn50 inference model folder (rn50 export --output), instead of weights.
  std::string model_dir;
  /// --precision: predict and bench infer: the engine's (CPU fp32, bf16 or int8; GPU fp32,
  /// tf32, fp16 or bf16); empty = the precision a --model folder was exported for, else fp32.
  /// export: fp32, or int8 (activation ranges for the INT8 engine). Any case (DLE's FP32).
  std::string precision;
  /// --batch-sizes: bench train's batch sizes per process, bench infer's batch sizes.
  std::vector<int> batch_sizes{256};
  /// --predictions-file (bench infer with ImageFolder data): "path<TAB>label<TAB>top1" lines.
  std::string predictions_file;
  /// --output: export: the model folder to write; check-data: the class list file (else
  /// stdout); report: the tables file (else stdout).
  std::string output;
  /// export --format: rn50 (model.json + model.safetensors) and/or onnx (model.onnx); empty =
  /// both (rn50 alone in a build without ONNX).
  std::vector<std::string> export_formats;
  /// export --calib-images: int8 calibration images, evenly spaced over the sorted train/ list.
  int calib_images = 500;
  /// export --calib-method: max | percentile (of |x| per tensor).
  std::string calib_method = "percentile";
  /// export --calib-percentile: the percentile of --calib-method percentile.
  double calib_percentile = 99.99;
  /// predict --classes: TSV "index<TAB>synset<TAB>name" with a header line (imagenet1k_classes).
  std::string classes_tsv;
  /// predict --json: one JSON object per image instead of text.
  bool json = false;
  /// predict --top-k: classes printed per image.
  int top_k = 5;
  /// predict: the image files (positional).
  std::vector<std::string> images;

  // ---- data tools (check-data, bench loader) ----
  /// check-data --header-only: read each file's header instead of decoding it.
  bool header_only = false;
  /// bench loader --split: train (RandomResizedCrop + flip) or val (resize + center crop).
  std::string split = "train";
  /// bench loader --batches: timed batches; 0 = the rest of one epoch.
  int64_t batches = 0;
  /// bench loader --warmup-batches: untimed batches first.
  int64_t warmup_batches = 2;

  // ---- bench train ----
  /// --precisions: the sweep's precisions (rn50/precision.h names, '-' or '_', any case);
  /// empty = fp32, tf32, amp_fp16, amp_bf16 on CUDA, fp32 on the CPU.
  std::vector<std::string> precisions;
  /// --repeats: runs per (precision, batch size) point (DLPerf: 5 to 7).
  int repeats = 5;
  /// --verbose: print every run's progress lines too.
  bool verbose = false;

  // ---- convert-data, convert-weights ----
  /// convert-data --format: webdataset (tar shards) or tfrecord (TFRecord shards + DALI index).
  std::string shard_format = "webdataset";
  /// convert-data --shard-size: samples per shard.
  int shard_size = 1024;
  /// convert-weights: the weights file to convert (positional).
  std::string weights_source;
  /// convert-weights --from: auto (by the file's contents) | torchvision | dle-pytorch | paddle.
  std::string weights_from = "auto";
  /// convert-weights --ema: a DLE PyTorch checkpoint's state_dict_ema instead of its state_dict.
  bool weights_ema = false;

  // ---- serve (rn50/serve.h, ServeOptions: the meaning of each) ----
  /// serve --model: exported model folders, each served under its folder's name.
  std::vector<std::string> serve_models;
  /// serve --model-repository: a folder of exported model folders.
  std::string model_repository;
  std::string host = "127.0.0.1";        ///< serve --host
  int port = 8000;                       ///< serve --port (0: any free port)
  int max_batch_size = 32;               ///< serve --max-batch-size
  int64_t max_queue_delay_us = 2000;     ///< serve --max-queue-delay-us
  int instances = 1;                     ///< serve --instances
  int max_queue_size = 256;              ///< serve --max-queue-size (0: unbounded)
  int64_t request_timeout_ms = 0;        ///< serve --request-timeout-ms (0: none)
  int64_t max_request_bytes = int64_t(64) << 20;  ///< serve --max-request-bytes
  int decode_threads = 0;                ///< serve --decode-threads (0: the cores)
  bool log_requests = false;             ///< serve --log-requests

  // ---- report ----
  /// report: the result files (positional): bench train sweeps, report files, bench infer lines.
  std::vector<std::string> results;
  /// report --format: md, csv or json.
  std::string table_format = "md";
  /// report --plot: folder for PNG and SVG plots (python3 with matplotlib).
  std::string plot;
  /// report --reference: add DLE's published ResNet-50 v1.5 training rows.
  bool reference = false;

  // ---- the command line ----
  /// --show-config: print the resolved configuration (every flag, its value, set or default)
  /// before running.
  bool show_config = false;
  /// The flags given on the command line ("--lr", ...), filled by the CLI (src/config/flags.h).
  /// validate() refuses a given flag that has no effect in the configuration (e.g. --scale-loss
  /// without fp16 --amp); configurations built in code leave it empty.
  std::set<std::string> given;
  /// The flags set by --config FILE (shown as "config" by --show-config; not refused when they
  /// have no effect, since a file holds a whole configuration).
  std::set<std::string> from_config;
};

/// The input normalisation of cfg (--normalize-mean / --normalize-std) as the model input uses it.
Normalization normalization(const Config& cfg);

/// Checks `cfg` for `rn50 train` / `rn50 eval` and throws rn50::Error naming the flag and the bad
/// value (e.g. "--epochs -1: must be >= 1"), or naming a flag of cfg.given that has no effect in
/// this configuration and why (e.g. "--no-tf32: TF32 exists on CUDA GPUs only ...").
void validate(const Config& cfg);

}  // namespace rn50
