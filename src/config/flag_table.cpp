// rn50: the flag table (config/flags.h) — one entry per flag of every command. The commands
// that take a flag are its bit mask: T train, E eval, BT bench train, BI bench infer, BL bench
// loader, BP bench peak, P predict, X export, CD check-data, R report, S serve, CVD convert-data, CVW
// convert-weights.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "config/flag_kinds.h"
#include "rn50/backend.h"
#include "rn50/graph.h"

namespace rn50 {

namespace {

using namespace flag_kinds;
using C = Config;
constexpr unsigned T = kTrain, E = kEval, BT = kBenchTrain, BI = kBenchInfer, BL = kBenchLoader,
                   BP = kBenchPeak, P = kPredict, X = kExport, CD = kCheckData, R = kReport,
                   S = kServe, CVD = kConvertData, CVW = kConvertWeights;
constexpr unsigned TE = T | E;

/// What to run, the recipe and the model.
void add_run_and_recipe(std::vector<FlagSpec>& t) {
  t.push_back(enumeration<RunScope>(
      "--run-scope", &C::run_scope, "train_eval|train_only|eval_only", parse_run_scope,
      [](RunScope s) { return std::string(run_scope_name(s)); },
      "train and evaluate every --eval-interval epochs, train only, or evaluate only", T));
  t.push_back(switch_("--benchmark", &C::benchmark,
                      "rn50 train: time training steps (train.ips), no evaluation, no "
                      "checkpoints; rn50 eval: time the inference engine on --batch-size "
                      "images (infer.ips, latency percentiles)",
                      TE));
  t.push_back(integer("--benchmark-steps", &C::benchmark_steps,
                      "measured benchmark steps (bench infer: timed calls per batch size; bench "
                      "peak: timed calls per op and precision)",
                      TE | BT | BI | BP, at_least(1)));
  t.push_back(integer("--benchmark-warmup-steps", &C::benchmark_warmup_steps,
                      "untimed benchmark steps (calls) before measuring", TE | BT | BI | BP,
                      at_least(0)));
  t.push_back(switch_("--include-upload", &C::include_upload,
                      "rn50 bench infer on a GPU: time each call with the host input's upload "
                      "and the logits' copy back (default: the input stays on the device, as "
                      "framework benchmarks time it); every result line says which",
                      BI));
  t.push_back(switch_("--profile", &C::profile,
                      "time every op of the measured steps (forward, backward-data, "
                      "backward-weights apart; reorders and copies as ops of their own): a "
                      "per-op table (ms/step, share of the step, GFLOP/s, GB/s; with "
                      "--peak-file each op's and the step's share of their roofline time) and a "
                      "profile report record; rn50 train: with --benchmark",
                      T | BI));
  t.push_back(text("--peak-file", &C::peak_file,
                   "a file of peak records (rn50 bench peak --report-file FILE): the benchmark "
                   "records and tables then give the share of the measured peak of their "
                   "precision; empty = no share; rn50 train: with --benchmark",
                   T | BT | BI));
  t.push_back(switch_("--show-config", &C::show_config,
                      "print the resolved configuration as a table before running",
                      TE | BT | BI));
  // ---- optimisation (DLE RN50 v1.5) ----
  t.push_back(integer("--epochs", &C::epochs, "number of epochs (DLE 90)", T, at_least(1)));
  t.push_back(integer("--batch-size", &C::batch_size,
                      "images per step per process; global batch = this x processes", TE | BL,
                      at_least(1)));
  t.push_back(real("--lr", &C::lr,
                   "learning rate per 256 images; base lr = lr x global batch / 256 (DLE 0.256)",
                   T | BT, at_least(0.0)));
  t.push_back(real("--warmup-epochs", &C::warmup_epochs,
                   "epochs of linear lr warmup before the cosine decay; may be fractional",
                   T | BT, at_least(0.0)));
  t.push_back(real("--warmup-start-lr", &C::warmup_start_lr,
                   "lr per 256 images (as --lr) the linear warmup starts from (0: base lr x "
                   "(step + 1) / warmup steps, DLE PyTorch)",
                   T | BT, at_least(0.0)));
  t.push_back(choice("--lr-scheduler", &C::lr_scheduler, {"cosine", "step", "linear", "constant"},
                     "lr after warmup (DLE PyTorch lr policies; DLE Paddle's Cosine too)",
                     T | BT));
  {
    FlagSpec f = base("--lr-decay-epochs", "FLOAT ...",
                      "step schedule: epochs at which the lr is multiplied by --lr-decay-rate "
                      "(space- or comma-separated)",
                      T | BT);
    f.get = [](const Config& c) { return json(c.lr_decay_epochs); };
    f.set = [n = f.name](Config& c, const std::vector<std::string>& v) {
      c.lr_decay_epochs = parse_reals(n, v);
    };
    f.check = [n = f.name](const Config& c) {
      for (size_t i = 0; i < c.lr_decay_epochs.size(); ++i)
        RN50_CHECK(c.lr_decay_epochs[i] >= 0 &&
                       (i == 0 || c.lr_decay_epochs[i] > c.lr_decay_epochs[i - 1]),
                   "{} {}: epochs must be >= 0 and ascending", n, json(c.lr_decay_epochs).dump());
    };
    t.push_back(std::move(f));
  }
  t.push_back(real("--lr-decay-rate", &C::lr_decay_rate, "step schedule: lr factor (DLE 0.1)",
                   T | BT, in_range(0, 1, true)));
  {
    // DLE Paddle's --optimizer Momentum: the only optimizer of the recipe.
    FlagSpec f = base("--optimizer", "Momentum",
                      "the optimizer: Momentum, SGD with momentum (DLE Paddle's name; the only "
                      "optimizer of the RN50 v1.5 recipe)",
                      T | BT);
    f.get = [](const Config& c) { return json(c.optimizer); };
    f.set = [n = f.name](Config& c, const std::vector<std::string>& v) {
      const std::string& o = one_value(n, v);
      RN50_CHECK(lower(o) == "momentum",
                 "{} '{}': rn50 trains with Momentum only (SGD with momentum --momentum and "
                 "weight decay --weight-decay, DLE's RN50 v1.5 recipe); drop the flag or pass "
                 "{} Momentum",
                 n, o, n);
      c.optimizer = "momentum";
    };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(real("--momentum", &C::momentum, "SGD momentum (DLE 0.875)", T | BT,
                   in_range(0, 1, true)));
  t.push_back(real("--weight-decay", &C::weight_decay,
                   "L2 weight decay on conv and fc weights only (DLE 1/32768)", T | BT,
                   at_least(0.0)));
  t.push_back(switch_("--bn-weight-decay", &C::bn_weight_decay,
                      "apply --weight-decay to every parameter, BatchNorm gamma/beta and biases "
                      "too (DLE flag)",
                      T | BT));
  t.push_back(real("--label-smoothing", &C::label_smoothing,
                   "label smoothing epsilon of the loss (training and validation; DLE 0.1)",
                   TE | BT, in_range(0, 1, true)));
  t.push_back(switch_("--asp", &C::asp,
                      "2:4 structured sparsity (NVIDIA ASP, DLE flag): every conv but the stem "
                      "keeps at most 2 of each 4 input channels, held at zero through training "
                      "(masks from --prune-model or an --asp checkpoint)",
                      T | BT));
  t.push_back(switch_("--qat", &C::qat,
                      "quantization-aware training (DLE flag): 8-bit fake quantization of conv/fc "
                      "weights (per output channel) and inputs (per tensor, moving-average abs-max "
                      "ranges, rate 0.9), straight-through backward; eval runs it too; rn50 export "
                      "--precision int8 takes the learnt ranges",
                      TE | BT));
  t.push_back(switch_("--prune-model", &C::prune_model,
                      "compute the 2:4 masks from the starting weights with --mask-algo (DLE "
                      "flag; needs --asp)",
                      T | BT));
  t.push_back(choice("--mask-algo", &C::mask_algo, {"mask_1d", "mask_2d_greedy", "mask_2d_best"},
                     "2:4 mask algorithm (DLE's names): per 4 input channels, or per 4x4 block "
                     "of output x input channels (greedy or the best of the 90 patterns)",
                     T | BT));
  t.push_back(real("--mixup", &C::mixup,
                   "mixup alpha: each step mixes every image and its smoothed target with the "
                   "batch's image in reversed order, weight ~ Beta(alpha, alpha) (DLE 0.2 for 250 "
                   "epochs; 0 = off). Training top1/top5 then count against the dominant label "
                   "(its own when the weight is >= 0.5)",
                   T | BT, at_least(0.0)));
  t.push_back(integer("--max-nonfinite-steps", &C::max_nonfinite_steps,
                      "consecutive inf/NaN losses tolerated before the run stops", T,
                      at_least(1)));
  // ---- model ----
  const unsigned model_cmds = TE | BT | P | X | BI;
  t.push_back(choice("--arch", &C::arch, arch_names(),
                     "architecture (predict, export, bench infer and convert-weights with "
                     "weights: read from the weights' keys unless given)",
                     model_cmds | CVW));
  t.push_back(alias(choice("--model-arch-name", &C::arch, arch_names(),
                           "DLE Paddle's --arch (ResNet50 = resnet50)", model_cmds),
                    "--arch"));
  t.push_back(integer("--num-of-class", &C::num_classes,
                      "classes of the fc layer; 0 = the class folders of the data, or the "
                      "weights' fc rows (1000 for synthetic data or random weights)",
                      model_cmds, at_least(0)));
  t.push_back(switch_("--zero-init-residual", &C::zero_init_residual,
                      "initialise the last BN gamma of each residual branch with 0", T | BT));
  t.push_back(enumeration<Layout>(
      "--data-layout", &C::data_layout, "NCHW|NHWC",
      [](const std::string& s) {
        try {
          return parse_layout(s);
        } catch (const Error&) {
          RN50_FAIL("--data-layout '{}': expected NCHW or NHWC", s);
        }
      },
      [](Layout l) { return std::string(layout_name(l)); },
      "activation memory layout (NHWC: channels last); bench infer: the layout of the input "
      "batch handed to the engine (DLE inference.py's)",
      TE | BT | BI));
  t.push_back(text("--device", &C::device,
                   "auto (cuda:0 when a GPU is usable, else cpu) | cpu | cuda | cuda:N",
                   TE | BT | P | BI | S, [](const std::string& d) {
                     resolve_device(d);  // throws naming --device and the reason
                     return std::string();
                   }));
}

/// Precision, data, logging and checkpoints, data parallelism.
void add_precision_and_data(std::vector<FlagSpec>& t) {
  t.push_back(switch_("--amp", &C::amp,
                      "mixed precision (DLE --amp): --amp-dtype compute, f32 master weights, BN "
                      "and loss; CUDA fp16 or bf16, CPU bf16 (oneDNN, AVX-512)",
                      TE));
  t.push_back(choice("--amp-dtype", &C::amp_dtype, {"fp16", "bf16"},
                     "--amp compute dtype: fp16 (with loss scaling; CUDA) or bf16 (CUDA and CPU)",
                     TE));
  t.push_back(switch_("--use-pure-fp16", &C::use_pure_fp16,
                      "pure fp16 (DLE Paddle's O2, with --amp fp16): conv/fc weights, their "
                      "gradients and momentum only in fp16 (6 bytes per parameter instead of "
                      "16); BN and loss f32; updates below half an fp16 ulp of a weight are "
                      "lost; one process (CUDA)",
                      T));
  t.push_back(real("--scale-loss", &C::scale_loss, "initial fp16 loss scale (DLE's AMP scripts)",
                   T | BT, positive()));
  t.push_back(switch_("--use-dynamic-loss-scaling", &C::use_dynamic_loss_scaling,
                      "grow/back off the fp16 loss scale as torch GradScaler "
                      "(--use-dynamic-loss-scaling False keeps --scale-loss fixed)",
                      T | BT));
  t.push_back(switch_("--no-tf32", &C::no_tf32,
                      "f32 convolutions and GEMMs without TF32 tensor cores (CUDA)", TE));
  t.push_back(switch_("--no-cuda-graphs", &C::no_cuda_graphs,
                      "run each CUDA training step op by op instead of replaying a recorded "
                      "CUDA graph",
                      T | BT));
  // ---- data ----
  const unsigned data_cmds = TE | BT | BI;
  t.push_back(enumeration<DataKind>(
      "--data", &C::data, "imagefolder|synthetic", parse_data_kind,
      [](DataKind k) { return std::string(data_kind_name(k)); },
      "ImageFolder images (--image-root) or random synthetic images (bench train and bench "
      "infer: imagefolder when --image-root is given)",
      data_cmds));
  {
    FlagSpec f = base("--use-synthetic", "", "DLE Paddle's --use-synthetic True = --data synthetic",
                      data_cmds);
    f.alias_of = "--data";
    f.get = [](const Config& c) { return json(c.data == DataKind::synthetic); };
    f.set = [n = f.name](Config& c, const std::vector<std::string>& v) {
      c.data = v.empty() || parse_bool(n, v.back()) ? DataKind::synthetic : DataKind::imagefolder;
    };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(text("--image-root", &C::image_root,
                   "the dataset: an ImageFolder root holding train/<class>/* and val/<class>/*, "
                   "TFRecord shards, WebDataset train/ and val/ shard folders, or the root of a "
                   "file list's paths (export: int8 calibration images from its train/)",
                   data_cmds | BL | CD | X | CVD));
  // Where the images are stored (src/data/stores.h).
  const unsigned store_cmds = data_cmds | BL | CD | CVD;
  t.push_back(choice("--data-format", &C::data_format,
                     {"auto", "imagefolder", "filelist", "tfrecord", "webdataset"},
                     "how the dataset is stored; auto: file lists when given, TFRecord shards "
                     "(train-*-of-*), WebDataset (.tar under train/ or val/), else ImageFolder",
                     store_cmds));
  t.push_back(text("--train-list", &C::train_list,
                   "PaddleClas file list of the train split: 'relative/path label' per line, "
                   "paths relative to --image-root",
                   store_cmds));
  t.push_back(text("--val-list", &C::val_list, "PaddleClas file list of the val split",
                   store_cmds));
  t.push_back(text("--train-shards", &C::train_shards,
                   "WebDataset train shards: a folder, a brace pattern "
                   "(imagenet-train-{000000..001281}.tar) or one file (default <image-root>/train)",
                   store_cmds));
  t.push_back(text("--val-shards", &C::val_shards,
                   "WebDataset val shards (default <image-root>/val)", store_cmds));
  t.push_back(text("--data-idx-dir", &C::data_idx_dir,
                   "DALI index files of TFRecord shards (<shard>.idx, tfrecord2idx's 'offset "
                   "size' lines); built in one pass when none (and written here when missing)",
                   store_cmds));
  t.push_back(integer("--label-offset", &C::label_offset,
                      "subtracted from TFRecord labels (the standard conversion's are 1..1000, "
                      "as DLE subtracts 1)",
                      store_cmds, at_least(0)));
  t.push_back(integer("--shuffle-buffer", &C::shuffle_buffer,
                      "TFRecord and WebDataset training: samples in the buffer shuffling the "
                      "shard stream (the shards are shuffled per epoch too); 0 = shards only",
                      T | BT | BL, at_least<int64_t>(0)));
  t.push_back(integer("--synthetic-samples", &C::synthetic_samples,
                      "samples per epoch of --data synthetic; 0 = batch x benchmark steps with "
                      "--benchmark, else 1281167",
                      TE | BT, at_least<int64_t>(0)));
  t.push_back(integer("--crop-size", &C::crop_size,
                      "train RandomResizedCrop and val center-crop size, pixels (predict: the "
                      "model's unless given)",
                      TE | BT | BL | BI | P | X, at_least(1)));
  {
    // DLE Paddle/MXNet's input shape "C,H,W" (or "C H W"): channels and the (square) crop.
    FlagSpec f = base("--image-shape", "INT ...",
                      "input shape C,H,W: C = 3, or 4 for a zero fourth channel (DLE's NHWC "
                      "padding; the stem conv gets 4 input channels); H = W = the crop size "
                      "(sets --crop-size); bench infer: C = 4 is timed as RGB (the engine's stem "
                      "drops the zero channel's weights, exact); convert-weights: the stem to "
                      "write, 3 channels (default: a 4-channel stem's fourth channel dropped) or "
                      "4 (kept)",
                      TE | BT | BI | CVW);
    f.get = [](const Config& c) {
      return json::array({c.input_channels, c.crop_size, c.crop_size});
    };
    f.set = [n = f.name](Config& c, const std::vector<std::string>& v) {
      const std::vector<std::string> parts = split_list(v);
      RN50_CHECK(parts.size() == 3, "{}: expected three integers C,H,W (e.g. 4,224,224), got {}",
                 n, parts.size());
      const int ch = parse_integer<int>(n, parts[0]);
      const int h = parse_integer<int>(n, parts[1]), w = parse_integer<int>(n, parts[2]);
      RN50_CHECK(ch == 3 || ch == 4,
                 "{} {},{},{}: C must be 3 (RGB) or 4 (RGB plus a zero channel)", n, ch, h, w);
      RN50_CHECK(h >= 1 && h == w,
                 "{} {},{},{}: H and W must be equal and positive (rn50 crops squares; "
                 "--crop-size sets both)",
                 n, ch, h, w);
      RN50_CHECK(!c.given.count("--crop-size") || c.crop_size == h,
                 "{} {},{},{} and --crop-size {} disagree: give one of them (--image-shape H,W "
                 "is the crop size)",
                 n, ch, h, w, c.crop_size);
      c.input_channels = ch;
      c.crop_size = h;
      c.image_shape_hw = h;
    };
    f.check = [](const Config&) {};  // set() checks the values; validate() the crop size
    t.push_back(std::move(f));
  }
  // RandomResizedCrop's ranges: two numbers, "LO,HI" or "LO HI".
  auto range = [](const char* name, std::array<double, 2> Config::*m, const char* help,
                  double max_hi) {
    FlagSpec f = base(name, "FLOAT ...", help, T | BT | BL);
    f.get = [m](const Config& c) { return json((c.*m)); };
    f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
      const std::vector<double> x = parse_reals(n, v);
      RN50_CHECK(x.size() == 2, "{}: expected two numbers LO,HI, got {}", n, x.size());
      c.*m = {x[0], x[1]};
    };
    f.check = [m, n = f.name, max_hi](const Config& c) {
      const auto& r = c.*m;
      RN50_CHECK(r[0] > 0 && r[0] <= r[1] && r[1] <= max_hi, "{} {},{}: need 0 < LO <= HI{}", n,
                 r[0], r[1], std::isinf(max_hi) ? "" : fmt::format(" <= {}", max_hi));
    };
    return f;
  };
  t.push_back(range("--rand-crop-scale", &C::rand_crop_scale,
                    "train RandomResizedCrop: area fraction range LO,HI", 1.0));
  t.push_back(range("--rand-crop-ratio", &C::rand_crop_ratio,
                    "train RandomResizedCrop: aspect ratio (w/h) range LO,HI",
                    std::numeric_limits<double>::infinity()));
  // The input normalisation: three numbers, "R,G,B" or "R G B" (DLE's comma lists).
  auto rgb = [](const char* name, std::array<double, 3> Config::*m, const char* help,
                bool positive) {
    FlagSpec f = base(name, "FLOAT ...", help, TE | BT | X);
    f.get = [m](const Config& c) { return json((c.*m)); };
    f.set = [m, n = f.name](Config& c, const std::vector<std::string>& v) {
      const std::vector<double> x = parse_reals(n, v);
      RN50_CHECK(x.size() == 3, "{}: expected three numbers R,G,B (one per channel), got {}", n,
                 x.size());
      c.*m = {x[0], x[1], x[2]};
    };
    f.check = [m, n = f.name, positive](const Config& c) {
      for (double v : c.*m)
        RN50_CHECK(std::isfinite(v) && (positive ? v > 0 : (v >= 0 && v <= 1)),
                   "{} {}: each value must be {}", n, fmt::join(c.*m, ","),
                   positive ? "> 0 (a standard deviation of [0,1] pixel values)"
                            : "in [0, 1] (a mean of pixel / 255)");
    };
    return f;
  };
  t.push_back(rgb("--normalize-mean", &C::normalize_mean,
                  "input normalisation: RGB mean of pixel / 255 subtracted (DLE flag; export: "
                  "recorded for weights files, a checkpoint brings its own)",
                  false));
  t.push_back(rgb("--normalize-std", &C::normalize_std,
                  "input normalisation: RGB std the centred value is divided by (DLE flag)", true));
  t.push_back(integer("--resize-short", &C::resize_short,
                      "val: shorter side resized to this before the center crop, pixels "
                      "(predict, bench infer: the model's unless given)",
                      TE | BL | BI | P | X, at_least(1)));
  t.push_back(integer("--workers", &C::workers,
                      "decode threads; 0 = this process's share of the cores", TE | BT | BL | CD,
                      at_least(0)));
  t.push_back(integer("--prefetch", &C::prefetch, "batches queued ahead per decode worker",
                      TE | BT | BL, at_least(1)));
  t.push_back(real("--max-bad-fraction", &C::max_bad_fraction,
                   "stop when undecodable files exceed this fraction of an epoch (each is "
                   "skipped and counted below it)",
                   TE | BT | BL, in_range(0, 1, false)));
  t.push_back(switch_("--exact-decode", &C::exact_decode,
                      "decode whole images, PIL-exact (off: fast DCT-scaled region decoding)",
                      TE | BT | BL | BI));
  {
    FlagSpec f = base("--worker-cpus", "INT ...", "pin decode worker i to CPU list[i % n]",
                      TE | BT | BL);
    f.get = [](const Config& c) { return json(c.worker_cpus); };
    f.set = [n = f.name](Config& c, const std::vector<std::string>& v) {
      c.worker_cpus.clear();
      for (const std::string& s : split_list(v)) c.worker_cpus.push_back(parse_integer<int>(n, s));
    };
    f.check = [n = f.name](const Config& c) {
      for (int cpu : c.worker_cpus) RN50_CHECK(cpu >= 0, "{} {}: CPU ids must be >= 0", n, cpu);
    };
    t.push_back(std::move(f));
  }
  t.push_back(integer("--seed", &C::seed,
                      "seed of the weight init and of the data order and augmentation",
                      TE | BT | BL | BI));
  // ---- logging, evaluation, checkpoints ----
  t.push_back(integer("--print-interval", &C::print_interval,
                      "steps between progress lines and report step lines", TE | BT,
                      at_least(1)));
  t.push_back(integer("--eval-interval", &C::eval_interval,
                      "evaluate every N epochs (and after the last)", T, at_least(1)));
  t.push_back(integer("--save-interval", &C::save_interval,
                      "checkpoint every N epochs (and after the last); 0 = never", T,
                      at_least(0)));
  t.push_back(text("--checkpoint-dir", &C::checkpoint_dir,
                   "checkpoints go to <dir>/<arch>/<epoch>/ (checked writable before the first "
                   "epoch; a later failed write, e.g. a full disk, stops the run naming the "
                   "file, and the newest complete epoch folder stays the one "
                   "--last-epoch-of-checkpoint auto resumes from)",
                   T));
  t.push_back(text("--model-prefix", &C::model_prefix,
                   "file name prefix of checkpoint files: <prefix>.safetensors and "
                   "<prefix>.optimizer.safetensors (model: model.safetensors, "
                   "optimizer.safetensors); state.json records them",
                   T, [](const std::string& p) {
                     const bool ok = !p.empty() && p != "." && p != ".." &&
                                     p.find_first_of("/\\") == std::string::npos &&
                                     p != "state" && p.rfind('.') != p.size() - 1;
                     return ok ? std::string()
                               : std::string("need a plain file name prefix (no '/', not "
                                             "'state', not ending in '.')");
                   }));
  t.push_back(text("--inference-dir", &C::inference_dir,
                   "after the last epoch, write the model for inference there (as rn50 export: "
                   "model.json + model.safetensors, and model.onnx in builds with ONNX; BatchNorm "
                   "folded); empty = none",
                   T));
  t.push_back(text("--report-file", &C::report_file,
                   "report file: train/eval write JSON lines (config, step, epoch, eval, "
                   "benchmark records); bench loader, bench infer and bench peak append their "
                   "lines; bench "
                   "train writes its sweep JSON; empty = none. A write that fails (a full disk) "
                   "stops the run naming the file and the reason, as DLLogger does: a run "
                   "whose record is being lost is not left to continue unnoticed",
                   TE | BT | BL | BI | BP));
  t.push_back(choice("--report-format", &C::report_format, {"rn50", "dllogger"},
                     "format of --report-file: rn50's JSON lines (docs/report-schema.md) or "
                     "DLLogger's \"DLLL {...}\" lines as DLE's scripts write and parse",
                     TE | BI));
  t.push_back(text("--from-checkpoint", &C::from_checkpoint,
                   "a checkpoint: the --checkpoint-dir of a training run, its <arch> folder, or "
                   "one epoch folder",
                   TE | X));
  t.push_back(text("--last-epoch-of-checkpoint", &C::last_epoch_of_checkpoint,
                   "the epoch folder of --from-checkpoint to use: N, or auto = the newest "
                   "complete one (rn50 train: none yet, or the run's own --checkpoint-dir not "
                   "made yet, = start from epoch 0: one command line for every requeue)",
                   TE | X, [](const std::string& le) {
                     const bool ok = le == "auto" ||
                                     (!le.empty() && le.size() <= 9 &&
                                      le.find_first_not_of("0123456789") == std::string::npos);
                     return ok ? std::string()
                               : std::string("expected 'auto' or an epoch number >= 0");
                   }));
  t.push_back(text("--from-pretrained-params", &C::from_pretrained_params,
                   "weights to start from: a safetensors file with torchvision state_dict keys, "
                   "a folder holding it (model.safetensors, the checkpoint's --model-prefix "
                   "file, or its only weights file), or a DLE-style path prefix P for "
                   "P.safetensors; rn50 train: a classifier of another class count is "
                   "re-initialised (fine-tuning) unless --strict-pretrained",
                   TE | BT | P | X | BI));
  t.push_back(switch_("--strict-pretrained", &C::strict_pretrained,
                      "rn50 train: refuse --from-pretrained-params weights whose fc has another "
                      "class count than --num-of-class instead of re-initialising fc",
                      T));
  // ---- data parallelism ----
  t.push_back(choice("--dist-backend", &C::dist_backend, {"auto", "single", "mpi", "nccl"},
                     "gradient/metric communicator; auto = nccl on GPUs, mpi on CPUs when "
                     "launched on several processes",
                     TE | BT));
  t.push_back(real("--bucket-size-mb", &C::bucket_size_mb,
                   "gradient allreduce bucket size, MiB (torch DDP 25)", T | BT, positive()));
  t.push_back(boolean("--enable-cpu-affinity", &C::enable_cpu_affinity,
                      "bind each process of a node to its own share of the cores (DLE flag); "
                      "false: no binding, OpenMP threads still split the cores",
                      TE | BT));
  t.push_back(switch_("--log-all-ranks", &C::log_all_ranks,
                      "every rank prints its progress (off: rank 0 only)", TE | BT));
  t.push_back(real("--timeout", &C::timeout,
                   "seconds without progress after which a rank stops the whole job; 0 = never",
                   TE | BT, at_least(0.0)));
}

/// Inference, export, the data tools, the benchmark sweeps and reports.
void add_other_commands(std::vector<FlagSpec>& t) {
  t.push_back(text("--model", &C::model_dir,
                   "an rn50 inference model folder (rn50 export --output), instead of weights",
                   P | BI));
  {
    // One flag for the engine (predict, bench infer) and the export: DLE's FP32|FP16|INT8.
    const std::vector<std::string> names{"fp32", "tf32", "fp16", "bf16", "int8"};
    FlagSpec f = base("--precision", "fp32|tf32|fp16|bf16|int8",
                      "predict, bench infer, serve: the engine's (CPU fp32, bf16, int8; GPU fp32, "
                      "tf32, fp16, bf16; none = the precision a model was exported for, else "
                      "fp32); export: fp32 or int8 (activation ranges for the INT8 engine)",
                      P | BI | X | S);
    f.get = [](const Config& c) { return json(c.precision); };
    f.set = [n = f.name, names](Config& c, const std::vector<std::string>& v) {
      const std::string p = lower(one_value(n, v));
      RN50_CHECK(std::find(names.begin(), names.end(), p) != names.end(),
                 "{} '{}': expected one of {}", n, v.back(), fmt::join(names, ", "));
      c.precision = p;
    };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(int_list("--batch-sizes", &C::batch_sizes, 1,
                       "batch sizes (per process), space- or comma-separated", BT | BI));
  // DLE Paddle inference.py's spellings (utils/config.py add_trt_args) on rn50 bench infer.
  t.push_back(alias(int_list("--batch-size", &C::batch_sizes, 1,
                             "DLE inference.py's --batch-size: the batch size to time, or "
                             "several as --batch-sizes",
                             BI),
                    "--batch-sizes"));
  t.push_back(alias(text("--inference-dir", &C::model_dir,
                         "DLE inference.py's --inference-dir: the exported model's folder (rn50 "
                         "export --output, or rn50 train --inference-dir)",
                         BI),
                    "--model"));
  // Paddle-TRT's knobs, which rn50's engines have no counterpart for: refused with what rn50
  // does instead.
  const std::pair<const char*, const char*> trt_only[] = {
      {"--workspace-size",
       "TensorRT's workspace: rn50's engines size their own scratch memory (oneDNN "
       "scratchpads; cuDNN's workspace, chosen with each convolution's algorithm)"},
      {"--min-subgraph-size",
       "Paddle-TRT's subgraph partition: the whole network runs in rn50's engine"},
      {"--use-static",
       "TensorRT's serialised engine: rn50 builds its plan per batch size at the first call "
       "(the untimed --benchmark-warmup-steps), and rn50 export writes the model once"},
      {"--use-calib-mode",
       "TensorRT's INT8 calibration: rn50 calibrates at export (rn50 export --precision int8 "
       "--image-root DIR, or the ranges of a --qat run), then rn50 bench infer --model DIR "
       "--precision int8"}};
  for (const auto& [name, instead] : trt_only) {
    // A value, as DLE's argparse takes one for each (an integer or True/False).
    FlagSpec f = base(name, "TEXT", fmt::format("refused: {}", instead).c_str(), BI);
    f.get = [](const Config&) { return json(std::string()); };
    f.set = [n = f.name, why = std::string(instead)](Config&, const std::vector<std::string>&) {
      RN50_FAIL("{} (DLE inference.py, Paddle-TRT) has no counterpart in rn50: {}", n, why);
    };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(text("--predictions-file", &C::predictions_file,
                   "with ImageFolder data: write path<TAB>label<TAB>top1 per val image", BI));
  t.push_back(text("--output", &C::output,
                   "export, convert-data: the folder to write; convert-weights: the safetensors "
                   "file to write; check-data: the class list file (else stdout); report: the "
                   "tables file (else stdout)",
                   X | CD | R | CVD | CVW));
  t.push_back(choice("--format", &C::shard_format, {"webdataset", "tfrecord"},
                     "the shards to write: WebDataset tar files or TFRecord files with DALI "
                     "index files",
                     CVD));
  t.push_back(integer("--shard-size", &C::shard_size, "samples per shard", CVD, at_least(1)));
  {
    FlagSpec f = base("source", "FILE",
                      "the weights to convert: a torchvision .pth, a DLE PyTorch checkpoint or a "
                      "DLE Paddle .pdparams",
                      CVW);
    f.positional = true;
    f.get = [](const Config& c) { return json(c.weights_source); };
    f.set = [](Config& c, const std::vector<std::string>& v) { c.weights_source = v.back(); };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(choice("--from", &C::weights_from, {"auto", "torchvision", "dle-pytorch", "paddle"},
                     "the source's format; auto: by its contents (a zip or pickle holding a "
                     "state_dict, a Paddle parameter dict)",
                     CVW));
  t.push_back(switch_("--ema", &C::weights_ema,
                      "a DLE PyTorch checkpoint: convert its EMA copy (state_dict_ema) instead "
                      "of state_dict",
                      CVW));
  t.push_back(text_list("--format", &C::export_formats, {"rn50", "onnx"},
                        "rn50 (model.json + model.safetensors) and/or onnx (model.onnx, opset "
                        "13; QDQ with --precision int8); none = both (rn50 alone in a build "
                        "without ONNX)",
                        X));
  t.push_back(integer("--calib-images", &C::calib_images,
                      "int8 calibration images, evenly spaced over the sorted train/ list", X,
                      at_least(1)));
  t.push_back(choice("--calib-method", &C::calib_method, {"max", "percentile"},
                     "int8 calibration: max |x| or a percentile of |x| per tensor", X));
  t.push_back(real("--calib-percentile", &C::calib_percentile,
                   "the percentile of --calib-method percentile", X, in_range(0, 100, false)));
  t.push_back(text("--classes", &C::classes_tsv,
                   "TSV index<TAB>synset<TAB>name with a header line (e.g. "
                   "imagenet1k_classes.tsv)",
                   P));
  t.push_back(switch_("--json", &C::json, "one JSON object per image", P));
  t.push_back(integer("--top-k", &C::top_k, "classes printed per image", P, at_least(1)));
  {
    FlagSpec f = base("images", "IMAGE ...", "image files (JPEG or PNG)", P);
    f.positional = true;
    f.get = [](const Config& c) { return json(c.images); };
    f.set = [](Config& c, const std::vector<std::string>& v) { c.images = v; };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(switch_("--header-only", &C::header_only,
                      "read each file's header only instead of decoding it (faster)", CD));
  t.push_back(choice("--split", &C::split, {"train", "val"},
                     "train (RandomResizedCrop + flip) or val (resize + center crop)", BL));
  t.push_back(integer("--batches", &C::batches, "timed batches; 0 = the rest of one epoch", BL,
                      at_least<int64_t>(0)));
  t.push_back(integer("--warmup-batches", &C::warmup_batches, "untimed batches first", BL,
                      at_least<int64_t>(0)));
  t.push_back(text_list("--precisions", &C::precisions, {},
                        "bench train: rn50/precision.h names (fp32, tf32, amp-fp16, amp-bf16, "
                        "pure-fp16), none = fp32, tf32, amp-fp16, amp-bf16 on CUDA, fp32 on the "
                        "CPU; bench peak: fp32, bf16, int8, memory (STREAM bandwidth), none = "
                        "all four",
                        BT | BP));
  t.push_back(integer("--repeats", &C::repeats, "runs per (precision, batch size) point", BT,
                      at_least(1)));
  t.push_back(switch_("--verbose", &C::verbose, "print every run's progress lines too", BT));
  {
    FlagSpec f = base("results", "FILE ...",
                      "rn50 bench train sweeps, --report-file files (rn50 or DLLogger format), "
                      "rn50 bench infer lines",
                      R);
    f.positional = true;
    f.get = [](const Config& c) { return json(c.results); };
    f.set = [](Config& c, const std::vector<std::string>& v) { c.results = v; };
    f.check = [](const Config&) {};
    t.push_back(std::move(f));
  }
  t.push_back(choice("--format", &C::table_format, {"md", "csv", "json"},
                     "table format: Markdown, CSV or JSON", R));
  t.push_back(text("--plot", &C::plot,
                   "write PNG and SVG plots into this folder (python3 with matplotlib)", R));
  t.push_back(switch_("--reference", &C::reference,
                      "add DLE's published ResNet-50 v1.5 training rows (DGX A100 / V100), "
                      "labelled with their hardware",
                      R));
}

/// rn50 serve (rn50/serve.h ServeOptions).
void add_serve(std::vector<FlagSpec>& t) {
  {
    FlagSpec f = text_list("--model", &C::serve_models, {},
                           "an exported model folder (rn50 export --output) to serve under its "
                           "folder's name; give --model once per model",
                           S);
    t.push_back(std::move(f));
  }
  t.push_back(text("--model-repository", &C::model_repository,
                   "a folder whose sub-folders are exported models, each served under its "
                   "sub-folder's name (Triton's model repository)",
                   S));
  t.push_back(text("--host", &C::host, "address to listen on (0.0.0.0: every interface)", S));
  t.push_back(integer("--port", &C::port, "TCP port to listen on; 0 = any free port", S,
                      Problem<int>([](const int& p) {
                        return p >= 0 && p <= 65535 ? std::string()
                                                    : std::string("must be in [0, 65535]");
                      })));
  t.push_back(integer("--max-batch-size", &C::max_batch_size,
                      "images per engine call: queued requests are batched up to this", S,
                      at_least(1)));
  t.push_back(integer("--max-queue-delay-us", &C::max_queue_delay_us,
                      "how long the oldest queued request waits for a fuller batch, microseconds",
                      S, at_least<int64_t>(0)));
  t.push_back(integer("--instances", &C::instances,
                      "engines per model, each fed by its own batching thread", S, at_least(1)));
  t.push_back(integer("--max-queue-size", &C::max_queue_size,
                      "requests queued per model before new ones are answered 503; 0 = unbounded",
                      S, at_least(0)));
  t.push_back(integer("--request-timeout-ms", &C::request_timeout_ms,
                      "a request still queued this long after it arrived is answered 504 at "
                      "once; 0 = no deadline",
                      S, at_least<int64_t>(0)));
  t.push_back(integer("--max-request-bytes", &C::max_request_bytes,
                      "larger request bodies are answered 413 before they are read (Triton's 64 "
                      "MiB)",
                      S, at_least<int64_t>(1024)));
  t.push_back(integer("--decode-threads", &C::decode_threads,
                      "threads decoding request images; 0 = the cores", S, at_least(0)));
  t.push_back(switch_("--log-requests", &C::log_requests, "one stderr line per request", S));
}

std::vector<FlagSpec> make_table() {
  std::vector<FlagSpec> t;
  add_run_and_recipe(t);
  add_precision_and_data(t);
  add_other_commands(t);
  add_serve(t);
  return t;
}

}  // namespace

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = make_table();
  return table;
}

}  // namespace rn50
