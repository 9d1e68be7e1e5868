// rn50: each command run from its resolved Config (tools/commands.h): the Config turned into
// the library call's own options — the only place a command's flags meet its consumer.
#include "commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "config/config.h"
#include "config/flags.h"
#include "core/check.h"
#include "rn50/bench.h"
#include "rn50/data.h"
#include "rn50/predict.h"
#include "rn50/inference.h"
#include "rn50/report.h"
#include "rn50/roofline.h"
#include "rn50/serve.h"
#include "rn50/train.h"
#include "data/check_store.h"
#include "data/convert_data.h"
#include "model/convert_weights.h"
#include "train/checkpoint.h"

namespace rn50::cli {

namespace {

bool given(const Config& c, const char* flag) { return c.given.count(flag) > 0; }

PredictConfig predict_config(const Config& c) {
  PredictConfig p;
  p.weights = c.from_pretrained_params;
  p.model_dir = c.model_dir;
  // From the weights unless given: the architecture, the classes, the eval transform.
  p.arch = given(c, "--arch") ? c.arch : std::string();
  p.num_classes = c.num_classes;
  p.classes_tsv = c.classes_tsv;
  p.json = c.json;
  p.resize_short = given(c, "--resize-short") ? c.resize_short : 0;
  p.crop_size = given(c, "--crop-size") ? c.crop_size : 0;
  p.top_k = c.top_k;
  p.device = c.device;
  p.precision = c.precision;
  p.images = c.images;
  return p;
}

ExportConfig export_config(const Config& c) {
  RN50_CHECK(c.from_checkpoint.empty() != c.from_pretrained_params.empty(),
             "rn50 export: pass one of --from-checkpoint and --from-pretrained-params");
  RN50_CHECK(!c.output.empty(), "rn50 export: pass --output DIR, the folder to write");
  RN50_CHECK(!given(c, "--last-epoch-of-checkpoint") || !c.from_checkpoint.empty(),
             "--last-epoch-of-checkpoint has no effect here: it picks the epoch folder of "
             "--from-checkpoint; add --from-checkpoint");
  ExportConfig e;
  e.arch = given(c, "--arch") ? c.arch : std::string();
  e.num_classes = c.num_classes;
  e.resize_short = c.resize_short;
  e.crop_size = c.crop_size;
  e.norm = normalization(c);
  e.output = c.output;
  e.precision = c.precision.empty() ? std::string("fp32") : c.precision;
  e.calib_root = c.image_root;
  e.calib_images = c.calib_images;
  e.calib_method = c.calib_method;
  e.calib_percentile = c.calib_percentile;
  for (const char* flag : {"--image-root", "--calib-images", "--calib-method",
                           "--calib-percentile"})
    if (given(c, flag)) e.calib_flags.push_back(flag);
  e.formats = c.export_formats;
  if (e.formats.empty())
    e.formats = onnx_export_available() ? std::vector<std::string>{"rn50", "onnx"}
                                        : std::vector<std::string>{"rn50"};
  e.weights = c.from_pretrained_params;
  if (!c.from_checkpoint.empty()) {
    const std::string dir =
        resolve_checkpoint_dir(c.from_checkpoint, c.last_epoch_of_checkpoint, e.arch);
    const CheckpointState st = read_checkpoint_state(dir);
    e.weights = (std::filesystem::path(dir) / st.model_file).string();
    e.classes = st.classes;
    if (e.arch.empty()) e.arch = st.arch;
    // The normalisation the model was trained with (checkpoints before the flags existed
    // hold none: ImageNet's), unless given here.
    for (const char* key : {"normalize_mean", "normalize_std"}) {
      const bool mean = std::string(key) == "normalize_mean";
      if (!st.config.contains(key) || given(c, mean ? "--normalize-mean" : "--normalize-std"))
        continue;
      const auto v = st.config[key].get<std::vector<double>>();
      RN50_CHECK(v.size() == 3, "'{}': state.json config {} has {} values, expected 3", dir, key,
                 v.size());
      auto& dst = mean ? e.norm.mean : e.norm.std;
      for (int k = 0; k < 3; ++k) dst[k] = static_cast<float>(v[k]);
    }
  }
  return e;
}

/// check-data: class list to stdout / --output, summary and one line per problem to stderr.
/// Returns 0 when the dataset is fine, 1 otherwise.
int check_data(const Config& c) {
  const StoreOptions store = store_options(c);
  RN50_CHECK(!c.image_root.empty() || data::detect_format(store) != DataFormat::imagefolder,
             "rn50 check-data: pass --image-root DIR, the folder holding train/ and val/ (or "
             "the file lists or shards)");
  DataCheckOptions o;
  o.decode = !c.header_only;
  o.workers = c.workers;
  const DataCheckReport r = data::check_store(store, o);
  for (const DataCheckReport::Shard& s : r.shards)
    std::fprintf(stderr, "check-data: shard %s: %lld samples, %lld damaged\n", s.file.c_str(),
                 static_cast<long long>(s.samples), static_cast<long long>(s.damaged));
  if (!r.classes.empty()) {
    std::ofstream f;
    if (!c.output.empty()) {
      f.open(c.output);
      RN50_CHECK(f.good(), "--output '{}': cannot open for writing", c.output);
    }
    std::ostream& out = c.output.empty() ? std::cout : f;
    for (const std::string& cls : r.classes) out << cls << '\n';
    RN50_CHECK(out.good(), "cannot write the class list");
  }
  std::fprintf(stderr,
               "check-data: %s, %zu classes; train %lld images, val %lld images; %lld files %s, "
               "%zu unreadable\n",
               r.format.c_str(), r.classes.size(), static_cast<long long>(r.train_images),
               static_cast<long long>(r.val_images), static_cast<long long>(r.checked_files),
               o.decode ? "decoded" : "header-checked", r.unreadable.size());
  for (const DataProblem& p : r.problems)
    std::fprintf(stderr, "error: [%s] %s\n", p.kind.c_str(), p.message.c_str());
  if (!r.ok()) {
    std::fprintf(stderr, "check-data: %zu problem(s) in '%s'\n", r.problems.size(),
                 c.image_root.c_str());
    return 1;
  }
  std::fprintf(stderr, "check-data: '%s' is ready for training\n", c.image_root.c_str());
  return 0;
}

/// bench loader: prints the JSON line (and appends it to --report-file).
int bench_loader_command(const Config& c) {
  const StoreOptions store = store_options(c);
  RN50_CHECK(!c.image_root.empty() || data::detect_format(store) != DataFormat::imagefolder,
             "rn50 bench loader: pass --image-root DIR, the folder holding train/ and val/");
  LoaderBenchConfig b;
  b.image_root = c.image_root;
  b.store = store;
  b.split = c.split == "train" ? Split::train : Split::val;
  b.loader = loader_options(c, ProcessInfo{});
  b.loader.bad_files_path.clear();
  b.batches = c.batches;
  b.warmup_batches = c.warmup_batches;
  b.report_file = c.report_file;
  std::printf("%s\n", bench_loader(b).json.c_str());
  return 0;
}

TrainSweepConfig sweep_config(const Config& c) {
  TrainSweepConfig s;
  s.base = c;
  s.base.report_file.clear();  // --report-file is the sweep's JSON, not each run's report
  s.batch_sizes = c.batch_sizes;
  s.precisions = c.precisions;
  s.repeats = c.repeats;
  s.report_file = c.report_file;
  s.verbose = c.verbose;
  return s;
}

InferBenchConfig infer_bench_config(const Config& c) {
  const bool weights = !c.from_pretrained_params.empty() || !c.model_dir.empty();
  InferBenchConfig b;
  b.arch = !weights || given(c, "--arch") ? c.arch : std::string();
  b.num_classes = c.num_classes > 0 ? c.num_classes : (weights ? 0 : 1000);
  b.weights = c.from_pretrained_params;
  b.model_dir = c.model_dir;
  b.seed = c.seed;
  b.batch_sizes = c.batch_sizes;
  b.crop_size = c.crop_size;
  b.steps = c.benchmark_steps;
  b.warmup_steps = c.benchmark_warmup_steps;
  b.engine.device = c.device;
  b.engine.precision = c.precision;
  b.report_file = c.report_file;
  b.report_format = c.report_format;
  b.data = c.data == DataKind::imagefolder ? c.image_root : std::string("synthetic");
  RN50_CHECK(c.data == DataKind::synthetic || !c.image_root.empty(),
             "rn50 bench infer --data imagefolder: pass --image-root DIR (its val/ images are "
             "classified first)");
  b.resize_short = given(c, "--resize-short") ? c.resize_short : 0;
  b.predictions_file = c.predictions_file;
  b.exact_decode = c.exact_decode;
  b.profile = c.profile;
  b.peak_file = c.peak_file;
  b.include_upload = c.include_upload;
  b.input_layout = c.data_layout;
  return b;
}

PeakBenchConfig peak_bench_config(const Config& c) {
  PeakBenchConfig p;
  p.precisions = c.precisions;
  p.calls = c.benchmark_steps;
  p.warmup = c.benchmark_warmup_steps;
  p.report_file = c.report_file;
  return p;
}

int report_command(const Config& c) {
  RN50_CHECK(!c.results.empty(), "rn50 report: give the result files to read");
  const ReportInputs in = load_report_inputs(c.results);
  const std::vector<ReportTable> tables = build_report(in, c.reference);
  const std::string text = render_report(tables, c.table_format);
  if (c.output.empty()) {
    std::cout << text;
  } else {
    std::ofstream f(c.output);
    f << text;
    RN50_CHECK(f.good(), "--output '{}': cannot write", c.output);
  }
  if (!c.plot.empty())
    for (const std::string& p : write_report_plots(tables, c.plot))
      std::cerr << "report: wrote " << p << "\n";
  return 0;
}

int convert_data_command(const Config& c) {
  RN50_CHECK(!c.image_root.empty() || !c.train_list.empty() || !c.train_shards.empty(),
             "rn50 convert-data: pass --image-root DIR (or the file lists or shards to read)");
  const data::ConvertReport r =
      data::convert_data(store_options(c), c.output, c.shard_format, c.shard_size, std::cerr);
  std::printf("convert-data: %lld samples in %lld %s shard(s), %.1f MiB, %.1f s (%.0f images/s)%s"
              "\n",
              static_cast<long long>(r.samples), static_cast<long long>(r.shards),
              c.shard_format.c_str(), static_cast<double>(r.bytes) / (1 << 20), r.seconds,
              r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0.0,
              c.shard_format == "tfrecord"
                  ? fmt::format("; read with --image-root {} --data-idx-dir {}/idx", c.output,
                                c.output)
                        .c_str()
                  : "");
  return r.skipped > 0 ? 1 : 0;
}

int convert_weights_command(const Config& c) {
  ConvertWeightsOptions o;
  o.source = c.weights_source;
  o.output = c.output;
  o.from = c.weights_from;
  o.arch = given(c, "--arch") ? c.arch : "auto";
  o.ema = c.weights_ema;
  o.input_channels = c.input_channels;
  convert_weights(o, std::cerr);
  // rn50's own reader must take the file as well: every tensor, shape and the architecture.
  const InferenceProgram prog = fold_weights_file(c.output);
  std::printf("convert-weights: wrote %s (rn50 reads it: %s)\n", c.output.c_str(),
              prog.arch.c_str());
  return 0;
}

int bench_infer_command(const Config& c) {
  const InferBenchConfig b = infer_bench_config(c);
  if (c.show_config) std::printf("%s", config_table(c, kBenchInfer).c_str());
  if (c.input_channels == 4)  // DLE inference.py's default --image-shape 4,224,224
    std::printf("--image-shape 4,%d,%d: DLE's zero fourth input channel; the engine's stem takes "
                "RGB (the zero channel's weights dropped, exact), so RGB batches are timed\n",
                c.crop_size, c.crop_size);
  bench_infer(b, std::cout);
  return 0;
}

int serve_command(const Config& c) {
#ifdef RN50_HAVE_SERVE
  ServeOptions o;
  o.models = c.serve_models;
  o.model_repository = c.model_repository;
  o.host = c.host;
  o.port = c.port;
  o.device = c.device;
  o.precision = c.precision;
  o.max_batch_size = c.max_batch_size;
  o.max_queue_delay_us = c.max_queue_delay_us;
  o.instances = c.instances;
  o.max_queue_size = c.max_queue_size;
  o.request_timeout_ms = c.request_timeout_ms;
  o.max_request_bytes = c.max_request_bytes;
  o.decode_threads = c.decode_threads;
  o.log_requests = c.log_requests;
  return run_serve(o);
#else
  (void)c;
  RN50_FAIL("rn50 serve is not built: CMake did not find cpp-httplib; install libcpp-httplib-dev "
            "(bash scripts/setup.sh does) and rebuild");
#endif
}

}  // namespace

int run(Command command, const Config& c) {
  if (command != kTrain && command != kEval) check_flags(c, command);  // validate() does theirs
  switch (command) {
    case kTrain: return run_train(c);
    case kEval: return run_eval(c);
    case kPredict: return run_predict(predict_config(c), std::cout, std::cerr);
    case kExport: run_export(export_config(c), std::cout); return 0;
    case kCheckData: return check_data(c);
    case kBenchLoader: return bench_loader_command(c);
    case kBenchTrain: run_train_sweep(sweep_config(c), std::cout); return 0;
    case kBenchInfer: return bench_infer_command(c);
    case kBenchPeak: run_bench_peak(peak_bench_config(c), std::cout); return 0;
    case kReport: return report_command(c);
    case kServe: return serve_command(c);
    case kConvertData: return convert_data_command(c);
    case kConvertWeights: return convert_weights_command(c);
  }
  return 2;
}

}  // namespace rn50::cli
