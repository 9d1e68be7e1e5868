// rn50: the command line.
//   rn50 train   [flags]            train (and evaluate) ResNet with the DLE RN50 v1.5 recipe
//   rn50 eval    [flags]            = rn50 train --run-scope eval_only
//   rn50 predict --from-pretrained-params FILE [flags] IMAGE...
// Flag names follow NVIDIA DeepLearningExamples (PaddlePaddle RN50 v1.5 train.py). The train/eval
// flags come from one table (src/train/flags.h); their meanings are documented on TrainConfig
// (include/rn50/train.h); predict's on PredictConfig (rn50/infer.h).
// Exit codes: 0 ok; 1 a run failed (message on stderr); CLI11's codes (>= 100) for flag
// syntax errors; 2 for flag values rejected after parsing.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <map>
#include <vector>

#include "core/check.h"
#include "rn50/bench.h"
#include "rn50/data.h"
#include "rn50/infer.h"
#include "rn50/inference.h"
#include "rn50/report.h"
#include "rn50/train.h"
#include "train/checkpoint.h"
#include "train/flags.h"

namespace {

using rn50::TrainConfig;

/// The `rn50 train` / `rn50 eval` flags, registered from the flag table (src/train/flags.h):
/// CLI11 collects each flag's text, the table parses it into TrainConfig.
struct TrainFlags {
  unsigned command = rn50::kTrainCommand;
  std::string config_file;  ///< --config FILE, applied before the command line's flags
  std::map<std::string, std::vector<std::string>> text;
  std::map<std::string, CLI::Option*> option;
};

void add_train_flags(CLI::App* app, TrainFlags& tf, unsigned command) {
  tf.command = command;
  app->add_option("--config", tf.config_file,
                  "read flags from FILE first: TOML/INI (batch-size = 256, amp = true, "
                  "lr-decay-epochs = [30, 60]; configs/ has DLE's recipes), or a report / "
                  "state.json to rerun its configuration; flags given here override it");
  for (const rn50::FlagSpec& f : rn50::train_flags()) {
    std::vector<std::string>& v = tf.text[f.name];
    CLI::Option* o;
    if (f.is_switch()) {
      o = app->add_flag(f.name, v, f.help_text());  // "true", or the text of --flag=false
    } else {
      // CLI11 appends " ..." to list options itself.
      o = app->add_option(f.name, v, f.help_text())
              ->type_name(f.is_list() ? f.value_name.substr(0, f.value_name.size() - 4)
                                      : f.value_name);
      if (!f.is_list()) o->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    // Flags of the other command are accepted by the parser only to be refused with a reason.
    if (!(f.commands & command)) o->group("");
    tf.option[f.name] = o;
  }
}

/// The parsed flags into `c` (TrainConfig::given records them); throws rn50::Error naming a
/// flag this command does not take, or a value that does not parse.
void resolve(rn50::TrainConfig& c, const TrainFlags& tf, const char* command) {
  if (!tf.config_file.empty()) rn50::apply_config_file(c, tf.config_file, tf.command);
  for (const rn50::FlagSpec& f : rn50::train_flags()) {
    if (tf.option.at(f.name)->count() == 0) continue;
    RN50_CHECK(f.commands & tf.command,
               "{}: rn50 {} does not take it ({}); see rn50 {} --help", f.name, command,
               tf.command == rn50::kEvalCommand ? "it is a training flag: evaluation trains nothing"
                                                : "it is an evaluation flag",
               command);
    rn50::set_flag(c, f, tf.text.at(f.name));
  }
  // Rerunning a report's configuration would truncate that very report: refuse instead.
  std::error_code ec;
  RN50_CHECK(tf.config_file.empty() || c.report_file.empty() ||
                 !std::filesystem::equivalent(tf.config_file, c.report_file, ec),
             "--config '{}' is also this run's --report-file: the run would overwrite the report "
             "it was configured from; pass --report-file with a new name",
             tf.config_file);
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
  CLI::App* bench_infer = nullptr;
  rn50::InferBenchConfig ib;
  CLI::App* bench_train = nullptr;
  rn50::TrainSweepConfig ts;
  std::string ts_data = "synthetic", ts_layout = "NHWC";
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

  d.bench_train = d.bench->add_subcommand(
      "train", "training throughput sweep, DLPerf's method: every (precision, batch size) run "
               "--repeats times as rn50 train --benchmark; median/min/max images/s, step-time "
               "percentiles, data-wait share, peak memory and the environment, into one JSON "
               "(rn50 report reads it). Under mpirun -np N every rank runs it (bench/scaling.sh)");
  rn50::TrainSweepConfig& ts = d.ts;
  ts.base.benchmark_steps = 20;
  ts.base.benchmark_warmup_steps = 5;
  ts.report_file = "bench_train.json";
  d.bench_train->add_option("--batch-sizes", ts.batch_sizes, "batch sizes per process (256)")
      ->delimiter(',');
  d.bench_train->add_option("--precisions", ts.precisions,
                            "fp32, tf32, amp-fp16, amp-bf16 (default: every one the device's "
                            "backend trains in; the CPU: fp32)")
      ->delimiter(',');
  d.bench_train->add_option("--repeats", ts.repeats, "runs per point (5)");
  d.bench_train->add_option("--data", d.ts_data, "synthetic (default), or an ImageFolder root "
                            "whose train/ images are decoded and augmented as in training");
  d.bench_train->add_option("--benchmark-steps", ts.base.benchmark_steps,
                            "measured steps per run (20)");
  d.bench_train->add_option("--benchmark-warmup-steps", ts.base.benchmark_warmup_steps,
                            "untimed steps before each run (5)");
  d.bench_train->add_option("--arch", ts.base.arch, "architecture (resnet50)");
  d.bench_train->add_option("--num-of-class", ts.base.num_classes,
                            "classes (0: 1000 for synthetic data, else the class folders)");
  d.bench_train->add_option("--crop-size", ts.base.crop_size, "input size, pixels (224)");
  d.bench_train->add_option("--data-layout", d.ts_layout, "NHWC (default) or NCHW");
  d.bench_train->add_option("--device", ts.base.device, "auto | cpu | cuda[:N] (auto)");
  d.bench_train->add_option("--workers", ts.base.workers,
                            "decode threads with image data; 0 = this process's share (0)");
  d.bench_train->add_flag("--exact-decode", ts.base.exact_decode,
                          "with image data: PIL-exact whole-image decoding");
  d.bench_train->add_option("--dist-backend", ts.base.dist_backend,
                            "auto | single | mpi | nccl (auto)");
  d.bench_train->add_option("--seed", ts.base.seed, "seed of weights and data (0)");
  d.bench_train->add_option("--report-file", ts.report_file,
                            "the sweep JSON to write (bench_train.json)");
  d.bench_train->add_flag("--verbose", ts.verbose, "print every run's progress lines too");

  d.bench_infer = d.bench->add_subcommand(
      "infer", "inference throughput and latency (avg, p50, p90, p95, p99) per batch size, with "
               "the inference engine (BN folded, fused post-ops)");
  rn50::InferBenchConfig& ib = d.ib;
  d.bench_infer->add_option("--arch", ib.arch, "architecture (resnet50)");
  d.bench_infer->add_option("--num-of-class", ib.num_classes,
                            "classes (1000; 0 with weights = from fc.weight)");
  d.bench_infer->add_option("--model", ib.model_dir,
                            "an rn50 inference model folder (rn50 export --output)");
  d.bench_infer->add_option("--from-pretrained-params", ib.weights,
                            "safetensors weights (default: Kaiming-initialised, same speed)");
  d.bench_infer->add_option("--batch-sizes", ib.batch_sizes, "batch sizes (default 1 32)")
      ->delimiter(',');
  d.bench_infer->add_option("--crop-size", ib.crop_size, "input size, pixels (224)");
  d.bench_infer->add_option("--benchmark-steps", ib.steps, "timed calls per batch size (20)");
  d.bench_infer->add_option("--benchmark-warmup-steps", ib.warmup_steps,
                            "untimed calls first (3)");
  d.bench_infer->add_option("--precision", ib.engine.precision,
                            "CPU: fp32, bf16 or int8 (int8: a model exported with --precision "
                            "int8); GPU: fp32, tf32, fp16 or bf16");
  d.bench_infer->add_option("--device", ib.engine.device,
                            "cpu (oneDNN engine), cuda[:N] (GPU engine: cuDNN fused conv + bias "
                            "+ residual + ReLU, NHWC, CUDA graph per batch size) or auto");
  d.bench_infer->add_option("--seed", ib.seed, "seed of the weights and input (0)");
  d.bench_infer->add_option("--data", ib.data,
                            "synthetic, or an ImageFolder root: classify all of its val/ first "
                            "(top-1/top-5), then time");
  d.bench_infer->add_option("--resize-short", ib.resize_short,
                            "eval resize with --data, pixels (the model's, else crop*256/224)");
  d.bench_infer->add_option("--predictions-file", ib.predictions_file,
                            "with --data: write path<TAB>label<TAB>top1 per val image");
  d.bench_infer->add_flag("--exact-decode", ib.exact_decode,
                          "with --data: decode and resize exactly as PIL/torchvision");
  d.bench_infer->add_option("--report-file", ib.report_file,
                            "append one JSON line per batch size to this file");
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
  TrainFlags train_f, eval_f;
  CLI::App* train = app.add_subcommand("train", "train (and evaluate) a ResNet");
  add_train_flags(train, train_f, rn50::kTrainCommand);
  CLI::App* eval = app.add_subcommand("eval", "evaluate on <image-root>/val "
                                              "(= train --run-scope eval_only)");
  add_train_flags(eval, eval_f, rn50::kEvalCommand);

  rn50::PredictConfig pc;
  CLI::App* predict = app.add_subcommand("predict", "classify image files (top-k per image)");
  predict->add_option("--from-pretrained-params", pc.weights,
                      "safetensors weights with torchvision keys");
  predict->add_option("--model", pc.model_dir,
                      "an rn50 inference model folder (rn50 export), instead of the weights");
  predict->add_option("--arch", pc.arch, "architecture (default: inferred from the file's keys)");
  predict->add_option("--num-of-class", pc.num_classes,
                      "classes (default: from the file's fc.weight)");
  predict->add_option("--classes", pc.classes_tsv,
                      "TSV index<TAB>synset<TAB>name with a header line (e.g. "
                      "imagenet1k_classes.tsv)");
  predict->add_flag("--json", pc.json, "one JSON object per image");
  predict->add_option("--resize-short", pc.resize_short,
                      "resize the shorter side to this, pixels (the model's, else 256)");
  predict->add_option("--crop-size", pc.crop_size, "center crop, pixels (the model's, else 224)");
  predict->add_option("--top-k", pc.top_k, "classes printed per image (5)");
  predict->add_option("--device", pc.device, "auto | cpu | cuda[:N] (default auto)");
  predict->add_option("images", pc.images, "image files (JPEG or PNG)")->required();

  DataCommands data_cmds;
  add_data_commands(app, data_cmds);

  rn50::ExportConfig ec;
  std::string ec_checkpoint, ec_last_epoch = "auto", ec_formats;
  CLI::App* exp = app.add_subcommand(
      "export", "fold a trained model (BatchNorm into the convolutions) and write it for "
                "inference: model.json + model.safetensors (read by rn50 bench infer --model, "
                "predict --model) and model.onnx (opset 13, dynamic batch)");
  exp->add_option("--from-checkpoint", ec_checkpoint, "checkpoint folder (or its parent)");
  exp->add_option("--last-epoch-of-checkpoint", ec_last_epoch,
                  "epoch folder to use under --from-checkpoint: auto (the last) or N");
  exp->add_option("--from-pretrained-params", ec.weights,
                  "safetensors weights with torchvision keys");
  exp->add_option("--output", ec.output, "folder to write")->required();
  exp->add_option("--format", ec_formats,
                  "comma list of rn50 and onnx (default: both; rn50 alone in a build without "
                  "ONNX); with --precision int8 the ONNX is QDQ (QuantizeLinear/DequantizeLinear, "
                  "int8, per-channel weights)");
  exp->add_option("--precision", ec.precision,
                  "fp32, or int8: activation ranges for the INT8 engine, the ones weights trained "
                  "with --qat hold (used as they are, no calibration), else calibrated on "
                  "--image-root's train/ images with eval preprocessing");
  exp->add_option("--image-root", ec.calib_root,
                  "ImageFolder root for int8 calibration (not with QAT weights)");
  exp->add_option("--calib-images", ec.calib_images,
                  "calibration images, evenly spaced over the sorted train/ list (500)");
  exp->add_option("--calib-method", ec.calib_method,
                  "max | percentile (of |x| per tensor; default percentile)");
  exp->add_option("--calib-percentile", ec.calib_percentile, "for percentile (99.99)");
  exp->add_option("--arch", ec.arch, "architecture (default: inferred from the weights' keys)");
  exp->add_option("--num-of-class", ec.num_classes, "classes (default: from fc.weight)");
  exp->add_option("--resize-short", ec.resize_short, "recorded eval resize, pixels (256)");
  exp->add_option("--crop-size", ec.crop_size, "recorded eval crop, pixels (224)");

  std::vector<std::string> report_files;
  std::string report_format = "md", report_plot, report_output;
  bool report_reference = false;
  CLI::App* report = app.add_subcommand(
      "report", "tables from result files: throughput (median, spread), speedup over one device "
                "and scaling efficiency, precision speedup, time to train 90 ImageNet epochs, "
                "training curves, inference latency; plots with --plot");
  report->add_option("results", report_files,
                     "rn50 bench train sweeps, --report-file files (rn50 or DLLogger format), "
                     "rn50 bench infer lines")
      ->required();
  report->add_option("--format", report_format, "md (default), csv or json");
  report->add_option("--plot", report_plot,
                     "write PNG and SVG plots into this folder (python3 with matplotlib)");
  report->add_flag("--reference", report_reference,
                   "add DLE's published ResNet-50 v1.5 training rows (DGX A100 / V100), "
                   "labelled with their hardware");
  report->add_option("--output", report_output, "write the tables to this file (default stdout)");

  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (cmd != "train" && cmd != "eval" && cmd != "predict" && cmd != "check-data" &&
        cmd != "bench" && cmd != "export" && cmd != "report") {
      std::cerr << "error: unknown command '" << cmd << "' (expected train, eval, predict, "
                << "export, check-data, bench or report; see " << argv[0] << " --help)\n";
      return 2;
    }
  }
  CLI11_PARSE(app, argc, argv);

  try {
    if (*train) {
      resolve(train_cfg, train_f, "train");
      return rn50::run_train(train_cfg);
    }
    if (*eval) {
      resolve(eval_cfg, eval_f, "eval");
      return rn50::run_eval(eval_cfg);
    }
    if (*predict) return rn50::run_predict(pc, std::cout, std::cerr);
    if (*exp) {
      RN50_CHECK(ec_checkpoint.empty() != ec.weights.empty(),
                 "rn50 export: pass one of --from-checkpoint and --from-pretrained-params");
      if (!ec_checkpoint.empty()) {
        const std::string dir = rn50::resolve_checkpoint_dir(ec_checkpoint, ec_last_epoch);
        const rn50::CheckpointState st = rn50::read_checkpoint_state(dir);
        ec.weights = (std::filesystem::path(dir) / st.model_file).string();
        ec.classes = st.classes;
        if (ec.arch.empty()) ec.arch = st.arch;
        // The normalisation the model was trained with (checkpoints before the flags existed
        // hold none: ImageNet's).
        for (const char* key : {"normalize_mean", "normalize_std"}) {
          if (!st.config.contains(key)) continue;
          const auto v = st.config[key].get<std::vector<double>>();
          RN50_CHECK(v.size() == 3, "'{}': state.json config {} has {} values, expected 3", dir,
                     key, v.size());
          auto& dst = std::string(key) == "normalize_mean" ? ec.norm.mean : ec.norm.std;
          for (int c = 0; c < 3; ++c) dst[c] = static_cast<float>(v[c]);
        }
      }
      for (const char* flag : {"--image-root", "--calib-images", "--calib-method",
                               "--calib-percentile"})
        if (exp->count(flag) > 0) ec.calib_flags.push_back(flag);
      if (ec_formats.empty()) ec_formats = rn50::onnx_export_available() ? "rn50,onnx" : "rn50";
      std::stringstream formats(ec_formats);
      ec.formats.clear();
      for (std::string f; std::getline(formats, f, ',');) ec.formats.push_back(f);
      rn50::run_export(ec, std::cout);
      return 0;
    }
    if (*data_cmds.check) return run_check_data(data_cmds);
    if (*data_cmds.bench_loader) return run_bench_loader(data_cmds);
    if (*data_cmds.bench_train) {
      rn50::TrainSweepConfig& ts = data_cmds.ts;
      if (data_cmds.ts_data == "synthetic") {
        ts.base.data = rn50::DataKind::synthetic;
      } else {
        ts.base.data = rn50::DataKind::imagefolder;
        ts.base.image_root = data_cmds.ts_data;
      }
      RN50_CHECK(data_cmds.ts_layout == "NHWC" || data_cmds.ts_layout == "NCHW",
                 "--data-layout '{}': expected NHWC or NCHW", data_cmds.ts_layout);
      ts.base.data_layout = data_cmds.ts_layout == "NHWC" ? rn50::Layout::NHWC : rn50::Layout::NCHW;
      rn50::run_train_sweep(ts, std::cout);
      return 0;
    }
    if (*report) {
      const rn50::ReportInputs in = rn50::load_report_inputs(report_files);
      const std::vector<rn50::ReportTable> tables = rn50::build_report(in, report_reference);
      const std::string text = rn50::render_report(tables, report_format);
      if (report_output.empty()) {
        std::cout << text;
      } else {
        std::ofstream f(report_output);
        f << text;
        RN50_CHECK(f.good(), "--output '{}': cannot write", report_output);
      }
      if (!report_plot.empty())
        for (const std::string& p : rn50::write_report_plots(tables, report_plot))
          std::cerr << "report: wrote " << p << "\n";
      return 0;
    }
    if (*data_cmds.bench_infer) {
      rn50::bench_infer(data_cmds.ib, std::cout);
      return 0;
    }
  } catch (const rn50::Error& e) {
    std::cerr << "error: " << rn50::error_text(e) << "\n";
    return 2;
  }
  return 0;
}
