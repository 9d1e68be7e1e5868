// rn50: the command line.
//   rn50 train   [flags]            train (and evaluate) ResNet with the DLE RN50 v1.5 recipe
//   rn50 eval    [flags]            = rn50 train --run-scope eval_only
//   rn50 predict --from-pretrained-params FILE [flags] IMAGE...
// Flag names follow NVIDIA DeepLearningExamples (PaddlePaddle RN50 v1.5 train.py); defaults and
// meanings are documented on TrainConfig (include/rn50/train.h) and PredictConfig (rn50/infer.h).
// Exit codes: 0 ok; 1 a run failed (message on stderr); CLI11's codes (>= 100) for flag
// syntax errors; 2 for flag values rejected after parsing.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "core/check.h"
#include "rn50/data.h"
#include "rn50/infer.h"
#include "rn50/train.h"

namespace {

using rn50::TrainConfig;

/// Flag values that need our own parsing (enums), kept as strings until after CLI11 is done.
struct TrainStrings {
  std::string run_scope = "train_eval";
  std::string data = "imagefolder";
  std::string layout = "NHWC";
};

void add_train_flags(CLI::App* app, TrainConfig& c, TrainStrings& s, bool with_run_scope) {
  if (with_run_scope)
    app->add_option("--run-scope", s.run_scope,
                    "train_eval | train_only | eval_only (default train_eval)");
  app->add_option("--epochs", c.epochs, "number of epochs (DLE 90)");
  app->add_option("--batch-size", c.batch_size, "images per step per process (DLE 256)");
  app->add_option("--lr", c.lr,
                  "learning rate per 256 images; base lr = lr * global batch / 256 (DLE 0.256)");
  app->add_option("--warmup-epochs", c.warmup_epochs,
                  "epochs of linear lr warmup before the cosine decay (DLE 5)");
  app->add_option("--momentum", c.momentum, "SGD momentum (DLE 0.875)");
  app->add_option("--weight-decay", c.weight_decay,
                  "weight decay on conv and fc weights only (DLE 3.0517578125e-05 = 1/32768)");
  app->add_option("--label-smoothing", c.label_smoothing, "label smoothing epsilon (DLE 0.1)");
  app->add_option("--image-root", c.image_root,
                  "ImageFolder root holding train/<class>/* and val/<class>/*");
  app->add_option("--crop-size", c.crop_size, "train random-resized-crop / val center-crop size, "
                  "pixels (224)");
  app->add_option("--resize-short", c.resize_short,
                  "val: resize the shorter side to this before the center crop, pixels (256)");
  app->add_option("--num-of-class", c.num_classes,
                  "classes of the fc layer (default: class folders of the data; 1000 synthetic)");
  app->add_option("--arch", c.arch, "resnet18 | resnet34 | resnet50 | resnet101 | resnet152 "
                  "(default resnet50)");
  app->add_option("--seed", c.seed,
                  "seed of the weight init and of the data order/augmentation (default 0)");
  app->add_option("--workers", c.workers, "decode threads; 0 = all cores (default 0)");
  app->add_option("--prefetch", c.prefetch, "batches queued ahead per worker (default 2)");
  app->add_option("--max-bad-fraction", c.max_bad_fraction,
                  "abort when undecodable files exceed this fraction of an epoch (default 0.001)");
  app->add_flag("--exact-decode", c.exact_decode,
                "decode whole images, PIL-exact (default: fast DCT-scaled region decoding)");
  app->add_option("--worker-cpus", c.worker_cpus, "pin decode worker i to CPU list[i % n]");
  app->add_option("--eval-interval", c.eval_interval, "evaluate every N epochs (default 1)");
  app->add_option("--save-interval", c.save_interval,
                  "checkpoint every N epochs, 0 = never (default 1)");
  app->add_option("--print-interval", c.print_interval,
                  "steps between progress lines and report step lines (default 10)");
  app->add_option("--checkpoint-dir", c.checkpoint_dir,
                  "checkpoints go to <dir>/<arch>/<epoch>/ (default ./output)");
  app->add_option("--report-file", c.report_file, "JSON-lines report file (default: none)");
  app->add_option("--from-checkpoint", c.from_checkpoint,
                  "resume from <checkpoint-dir>/<arch> (epoch folders) or one epoch folder");
  app->add_option("--last-epoch-of-checkpoint", c.last_epoch_of_checkpoint,
                  "epoch folder to resume from: N or auto = the newest complete one (default "
                  "auto)");
  app->add_option("--from-pretrained-params", c.from_pretrained_params,
                  "safetensors file with torchvision state_dict keys to start from");
  app->add_flag("--benchmark", c.benchmark,
                "time training steps (report train.ips); no eval, no checkpoints");
  app->add_option("--benchmark-steps", c.benchmark_steps, "measured benchmark steps (default 50)");
  app->add_option("--benchmark-warmup-steps", c.benchmark_warmup_steps,
                  "untimed benchmark steps first (default 10)");
  app->add_option("--data", s.data, "imagefolder | synthetic (default imagefolder)");
  app->add_option("--synthetic-samples", c.synthetic_samples,
                  "samples per epoch of --data synthetic; 0 = automatic (default 0)");
  app->add_option("--device", c.device,
                  "auto | cpu | cuda[:N] (default auto: cuda:0 when a GPU is usable, else cpu)");
  app->add_flag("--amp", c.amp,
                "mixed precision on CUDA: fp16/bf16 compute, f32 master weights (DLE --amp)");
  app->add_option("--amp-dtype", c.amp_dtype, "fp16 (loss-scaled) | bf16 (default fp16)");
  app->add_option("--scale-loss", c.scale_loss,
                  "initial AMP fp16 loss scale (default 128, as DLE's AMP scripts)");
  app->add_flag("--use-dynamic-loss-scaling{true}", c.use_dynamic_loss_scaling,
                "grow/back off the fp16 loss scale like torch GradScaler; "
                "--use-dynamic-loss-scaling=false keeps --scale-loss fixed (default true)");
  app->add_flag("--no-tf32", c.no_tf32, "f32 convolutions and GEMMs without TF32 tensor cores");
  app->add_option("--dist-backend", c.dist_backend,
                  "auto | single | mpi | nccl (default auto: nccl on GPUs, mpi on CPUs when "
                  "launched on several processes)");
  app->add_option("--bucket-size-mb", c.bucket_size_mb,
                  "gradient allreduce bucket size, MiB (default 25)");
  app->add_flag("--log-all-ranks", c.log_all_ranks, "every rank prints progress (default rank 0)");
  app->add_option("--timeout", c.timeout,
                  "seconds without progress before a rank stops the whole job; 0 = never "
                  "(default 1800)");
  app->add_option("--max-nonfinite-steps", c.max_nonfinite_steps,
                  "consecutive inf/NaN losses tolerated before stopping (default 3)");
  app->add_flag("--no-cuda-graphs", c.no_cuda_graphs,
                "run CUDA steps op by op instead of replaying a recorded CUDA graph");
  app->add_option("--data-layout", s.layout, "activation layout NCHW | NHWC (default NHWC)");
  app->add_flag("--zero-init-residual", c.zero_init_residual,
                "zero-init the last BN gamma of each residual branch (default off)");
}

/// Converts the string-valued flags; throws rn50::Error naming the flag.
void resolve(TrainConfig& c, const TrainStrings& s) {
  c.run_scope = rn50::parse_run_scope(s.run_scope);
  c.data = rn50::parse_data_kind(s.data);
  try {
    c.data_layout = rn50::parse_layout(s.layout);
  } catch (const rn50::Error&) {
    RN50_FAIL("--data-layout '{}': expected NCHW or NHWC", s.layout);
  }
}

/// rn50 check-data and rn50 bench loader: the data-pipeline commands (library side:
/// rn50::check_dataset and rn50::bench_loader in src/data).
struct DataCommands {
  CLI::App* check = nullptr;
  CLI::App* bench = nullptr;
  CLI::App* bench_loader = nullptr;
  std::string check_root, check_output;
  bool check_header_only = false;
  int check_workers = 0;
  rn50::LoaderBenchConfig lb;
  std::string lb_split = "train";
};

void add_data_commands(CLI::App& app, DataCommands& d) {
  d.check = app.add_subcommand(
      "check-data", "validate an ImageFolder dataset (train/ and val/ class folders, same class "
                    "set, no empty class, every image decodable); prints the class list");
  d.check->add_option("--image-root", d.check_root, "dataset root holding train/ and val/")
      ->required();
  d.check->add_option("--output", d.check_output,
                      "write the class list (one per line) to this file instead of stdout");
  d.check->add_flag("--header-only", d.check_header_only,
                    "read each file's header only instead of decoding it (faster)");
  d.check->add_option("--workers", d.check_workers, "threads; 0 = all cores (default 0)");

  d.bench = app.add_subcommand("bench", "micro-benchmarks");
  d.bench->require_subcommand(1);
  d.bench_loader = d.bench->add_subcommand(
      "loader", "time the ImageFolder input pipeline alone (reports loader.ips)");
  rn50::LoaderOptions& lo = d.lb.loader;
  lo.batch_size = 256;
  d.bench_loader->add_option("--image-root", d.lb.image_root, "dataset root holding train/ and "
                             "val/")->required();
  d.bench_loader->add_option("--split", d.lb_split, "train | val (default train)");
  d.bench_loader->add_option("--workers", lo.workers, "decode threads; 0 = all cores (default 0)");
  d.bench_loader->add_option("--batch-size", lo.batch_size, "images per batch (default 256)");
  d.bench_loader->add_option("--prefetch", lo.prefetch, "batches queued ahead per worker (2)");
  d.bench_loader->add_option("--crop-size", lo.crop_size, "crop size, pixels (224)");
  d.bench_loader->add_option("--resize-short", lo.resize_short, "val resize, pixels (256)");
  d.bench_loader->add_option("--seed", lo.seed, "augmentation seed (0)");
  d.bench_loader->add_flag("--exact-decode", lo.exact_decode,
                           "decode whole images, PIL-exact (default: fast DCT-scaled ROI decode)");
  d.bench_loader->add_option("--worker-cpus", lo.worker_cpus,
                             "pin worker i to CPU list[i % n] (e.g. --worker-cpus 0 1)");
  d.bench_loader->add_option("--max-bad-fraction", lo.max_bad_fraction,
                             "abort past this fraction of undecodable files (0.001)");
  d.bench_loader->add_option("--batches", d.lb.batches,
                             "timed batches; 0 = the rest of one epoch (default 0)");
  d.bench_loader->add_option("--warmup-batches", d.lb.warmup_batches,
                             "untimed batches first (default 2)");
  d.bench_loader->add_option("--report-file", d.lb.report_file,
                             "append the JSON result line to this file");
}

/// check-data: class list to stdout / --output, summary and one line per problem to stderr.
/// Returns 0 when the dataset is fine, 1 otherwise.
int run_check_data(const DataCommands& d) {
  rn50::DataCheckOptions o;
  o.decode = !d.check_header_only;
  o.workers = d.check_workers;
  const rn50::DataCheckReport r = rn50::check_dataset(d.check_root, o);
  if (!r.classes.empty()) {
    std::ofstream f;
    if (!d.check_output.empty()) {
      f.open(d.check_output);
      RN50_CHECK(f.good(), "--output '{}': cannot open for writing", d.check_output);
    }
    std::ostream& out = d.check_output.empty() ? std::cout : f;
    for (const std::string& c : r.classes) out << c << '\n';
    RN50_CHECK(out.good(), "cannot write the class list");
  }
  std::fprintf(stderr,
               "check-data: %zu classes; train/ %lld images, val/ %lld images; %lld files %s, "
               "%zu unreadable\n",
               r.classes.size(), static_cast<long long>(r.train_images),
               static_cast<long long>(r.val_images), static_cast<long long>(r.checked_files),
               o.decode ? "decoded" : "header-checked", r.unreadable.size());
  for (const rn50::DataProblem& p : r.problems) {
    std::fprintf(stderr, "error: [%s] %s\n", p.kind.c_str(), p.message.c_str());
  }
  if (!r.ok()) {
    std::fprintf(stderr, "check-data: %zu problem(s) in '%s'\n", r.problems.size(),
                 d.check_root.c_str());
    return 1;
  }
  std::fprintf(stderr, "check-data: '%s' is ready for training\n", d.check_root.c_str());
  return 0;
}

/// bench loader: prints the JSON line (and appends it to --report-file).
int run_bench_loader(DataCommands& d) {
  RN50_CHECK(d.lb_split == "train" || d.lb_split == "val", "--split '{}': expected train or val",
             d.lb_split);
  d.lb.split = d.lb_split == "train" ? rn50::Split::train : rn50::Split::val;
  const rn50::LoaderBenchResult r = rn50::bench_loader(d.lb);
  std::printf("%s\n", r.json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rn50: ResNet-50 v1.5 training (NVIDIA DeepLearningExamples recipe), evaluation "
               "and prediction"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("rn50 ") + rn50::kRn50Version);

  TrainConfig train_cfg, eval_cfg;
  TrainStrings train_s, eval_s;
  CLI::App* train = app.add_subcommand("train", "train (and evaluate) a ResNet");
  add_train_flags(train, train_cfg, train_s, /*with_run_scope=*/true);
  CLI::App* eval = app.add_subcommand("eval", "evaluate on <image-root>/val "
                                              "(= train --run-scope eval_only)");
  add_train_flags(eval, eval_cfg, eval_s, /*with_run_scope=*/false);

  rn50::PredictConfig pc;
  CLI::App* predict = app.add_subcommand("predict", "classify image files (top-k per image)");
  predict->add_option("--from-pretrained-params", pc.weights,
                      "safetensors weights with torchvision keys")->required();
  predict->add_option("--arch", pc.arch, "architecture (default: inferred from the file's keys)");
  predict->add_option("--num-of-class", pc.num_classes,
                      "classes (default: from the file's fc.weight)");
  predict->add_option("--classes", pc.classes_tsv,
                      "TSV index<TAB>synset<TAB>name with a header line (e.g. "
                      "imagenet1k_classes.tsv)");
  predict->add_flag("--json", pc.json, "one JSON object per image");
  predict->add_option("--resize-short", pc.resize_short,
                      "resize the shorter side to this, pixels (256)");
  predict->add_option("--crop-size", pc.crop_size, "center crop, pixels (224)");
  predict->add_option("--top-k", pc.top_k, "classes printed per image (5)");
  predict->add_option("--device", pc.device, "auto | cpu | cuda[:N] (default auto)");
  predict->add_option("images", pc.images, "image files (JPEG or PNG)")->required();

  DataCommands data_cmds;
  add_data_commands(app, data_cmds);

  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (cmd != "train" && cmd != "eval" && cmd != "predict" && cmd != "check-data" &&
        cmd != "bench") {
      std::cerr << "error: unknown command '" << cmd << "' (expected train, eval, predict, "
                << "check-data or bench; see " << argv[0] << " --help)\n";
      return 2;
    }
  }
  CLI11_PARSE(app, argc, argv);

  try {
    if (*train) {
      resolve(train_cfg, train_s);
      return rn50::run_train(train_cfg);
    }
    if (*eval) {
      resolve(eval_cfg, eval_s);
      return rn50::run_eval(eval_cfg);
    }
    if (*predict) return rn50::run_predict(pc, std::cout, std::cerr);
    if (*data_cmds.check) return run_check_data(data_cmds);
    if (*data_cmds.bench_loader) return run_bench_loader(data_cmds);
  } catch (const rn50::Error& e) {
    std::cerr << "error: " << rn50::error_text(e) << "\n";
    return 2;
  }
  return 0;
}
