// rn50 inference: `rn50 bench infer` (see rn50/inference.h). Per batch size: a random normalised
// input batch, --benchmark-warmup-steps untimed calls (which build the plan), then
// --benchmark-steps timed calls of InferenceEngine::run; the GFLOP/s they achieve and, with
// --peak-file, their share of the measured peak (rn50/roofline.h); with --profile, as many
// profiled calls after them (rn50/profile.h). With --image-root: the accuracy over its val/
// first, and after the model-alone table the same batch sizes with data loading
// (bench_infer_data.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <ostream>
#include <random>

#include "core/check.h"
#include "core/fileio.h"
#include "core/progress.h"
#include "core/report.h"
#include "core/stats.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "rn50/profile.h"
#include "rn50/roofline.h"

namespace rn50 {

std::vector<InferBenchPoint> bench_infer(const InferBenchConfig& cfg, std::ostream& out) {
  RN50_CHECK(!cfg.batch_sizes.empty(), "--batch-sizes: give at least one");
  for (int b : cfg.batch_sizes) RN50_CHECK(b >= 1, "--batch-sizes: {} is not >= 1", b);
  RN50_CHECK(cfg.steps >= 1, "--benchmark-steps {}: must be >= 1", cfg.steps);
  RN50_CHECK(cfg.warmup_steps >= 0, "--benchmark-warmup-steps {}: must be >= 0", cfg.warmup_steps);
  RN50_CHECK(cfg.crop_size >= 1, "--crop-size {}: must be >= 1", cfg.crop_size);

  // The program: from an exported model, the weights file, or Kaiming-initialised weights.
  std::string arch = cfg.arch;
  int classes = cfg.num_classes;
  std::unique_ptr<InferenceEngine> engine;
  int model_resize = 0, model_crop = 0;
  Normalization norm;  // the model's (rn50 export records it), else ImageNet's
  if (!cfg.model_dir.empty()) {
    InferenceModel m = load_inference_model(cfg.model_dir);
    model_resize = m.info.resize_short;
    model_crop = m.info.crop_size;
    std::copy(m.info.mean.begin(), m.info.mean.end(), norm.mean.begin());
    std::copy(m.info.std.begin(), m.info.std.end(), norm.std.begin());
    arch = m.program.arch;
    classes = m.program.num_classes;
    EngineOptions eo = cfg.engine;  // by default, the precision the model was exported for
    if (eo.precision.empty()) eo.precision = m.info.precision;
    engine = make_inference_engine(std::move(m.program), eo);
  } else if (!cfg.weights.empty()) {
    InferenceProgram p = fold_weights_file(cfg.weights, arch, classes);
    arch = p.arch;
    classes = p.num_classes;
    engine = make_inference_engine(std::move(p), cfg.engine);
  } else {
    RN50_CHECK(classes >= 1, "--num-of-class {}: must be >= 1", classes);
    auto be = make_backend("ref");
    ModelOptions mo;
    mo.num_classes = classes;
    ResNet model(*be, arch_from_name(arch), mo);
    model.init(cfg.seed);
    std::map<std::string, Tensor> sd;
    for (auto& [k, t] : model.state_dict()) sd.emplace(k, t);
    engine = make_inference_engine(fold_network(model.desc(), sd), cfg.engine);
  }

  RN50_CHECK(cfg.report_format == "rn50" || cfg.report_format == "dllogger",
             "--report-format '{}': expected rn50 or dllogger", cfg.report_format);
  ReportWriter report(cfg.report_file, ReportWriter::Mode::append, "--report-file",
                      cfg.report_format == "dllogger" ? ReportWriter::Format::dllogger
                                                      : ReportWriter::Format::rn50);
  if (cfg.data != "synthetic") {
    const int resize = cfg.resize_short > 0 ? cfg.resize_short
                       : model_resize > 0 && model_crop == cfg.crop_size
                           ? model_resize
                           : cfg.crop_size * 256 / 224;
    const int batch = *std::max_element(cfg.batch_sizes.begin(), cfg.batch_sizes.end());
    const InferAccuracy a = measure_accuracy(*engine, cfg.data, resize, cfg.crop_size, batch,
                                             cfg.predictions_file, cfg.exact_decode, norm);
    out << fmt::format(
        "accuracy: {} {} on {}/val: top1 {:.2f}% top5 {:.2f}% ({} images, resize "
        "{} crop {})\n",
        arch, engine->precision(), cfg.data, a.top1, a.top5, a.images, resize, cfg.crop_size);
    ReportRecord r("infer_accuracy");
    r.set("images", a.images)
        .set("top1", a.top1)
        .set("top5", a.top5)
        .set("arch", arch)
        .set("precision", engine->precision())
        .set("device", cfg.engine.device)
        .set("resize_short", resize)
        .set("crop_size", cfg.crop_size)
        .set("image_root", cfg.data);
    report.write(r);
    std::vector<InferBenchPoint> points = time_engine(*engine, cfg, arch, classes, out, &report);
    // The same batch sizes again with data loading: <data>/val through the loader.
    const std::string val = (std::filesystem::path(cfg.data) / "val").string();
    std::unique_ptr<DataSource> src;
    auto source_for = [&](int b) -> DataSource& {
      LoaderOptions lo;
      lo.exact_decode = cfg.exact_decode;
      lo.batch_size = b;
      lo.crop_size = cfg.crop_size;
      lo.resize_short = resize;
      src.reset();  // one loader's threads at a time
      src = make_image_folder_source(val, Split::val, lo);
      return *src;
    };
    time_engine_with_loader(*engine, cfg, arch, classes, source_for, norm, val, out, &report);
    return points;
  }
  return time_engine(*engine, cfg, arch, classes, out, &report);
}

InferAccuracy measure_accuracy(InferenceEngine& engine, const std::string& image_root,
                               int resize_short, int crop, int batch,
                               const std::string& predictions_file, bool exact_decode,
                               const Normalization& norm) {
  LoaderOptions lo;
  lo.exact_decode = exact_decode;
  lo.batch_size = batch;
  lo.crop_size = crop;
  lo.resize_short = resize_short;
  const std::string val = (std::filesystem::path(image_root) / "val").string();
  const ImageFolderIndex index = ImageFolderIndex::scan(val);
  auto src = make_image_folder_source(val, Split::val, lo);
  src->start_epoch(0);
  InferAccuracy acc;
  int64_t hit1 = 0, hit5 = 0, seen = 0;
  std::string lines;
  Batch b;
  Tensor x;
  const int k = engine.num_classes();
  auto host = make_backend("onednn");
  ProgressLine progress(stderr, 10.0);  // stdout carries the table
  const auto t0 = std::chrono::steady_clock::now();
  while (src->next(b)) {
    const int64_t n = b.size;
    if (!x.defined() || x.n() != n) x = Tensor::empty({n, 3, crop, crop}, DType::f32, Layout::NHWC);
    host->normalize_u8(b.images.slice0(0, n), norm.mean, norm.std, x);
    const Tensor logits = engine.run(x);
    for (int64_t i = 0; i < n; ++i) {
      const float* l = logits.data_as<const float>() + i * k;
      const int label = b.labels.data_as<const int32_t>()[i];
      const int64_t top = std::max_element(l, l + k) - l;
      int rank = 0;  // classes scoring above the label (ties go to the lower index, as topk)
      for (int c = 0; c < k; ++c) rank += l[c] > l[label] || (l[c] == l[label] && c < label);
      hit1 += top == label;
      hit5 += rank < 5;
      if (!predictions_file.empty())
        lines += fmt::format("{}\t{}\t{}\n",
                             seen < static_cast<int64_t>(index.samples.size())
                                 ? index.samples[static_cast<size_t>(seen)].first
                                 : std::string("?"),
                             label, top);
      ++seen;
    }
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress.update("accuracy", seen, src->num_samples(),
                    el > 0 ? static_cast<double>(seen) / el : 0.0,
                    fmt::format("top1 {:.2f}%", 100.0 * static_cast<double>(hit1) / seen));
  }
  progress.finish();
  RN50_CHECK(seen > 0, "'{}': no images to classify", val);
  acc.images = seen;
  acc.top1 = 100.0 * static_cast<double>(hit1) / static_cast<double>(seen);
  acc.top5 = 100.0 * static_cast<double>(hit5) / static_cast<double>(seen);
  if (!predictions_file.empty()) {
    RN50_CHECK(src->bad_samples() == 0,
               "--predictions-file '{}': {} val images were unreadable, so the lines would not "
               "line up with the files; run rn50 check-data on '{}'",
               predictions_file, src->bad_samples(), image_root);
    write_file_atomic(predictions_file, lines);
  }
  return acc;
}

namespace {

/// Where a timed call's input comes from, as the result lines and records say: "host" (the
/// CPU engine: its input is in host memory), "device" (kept on the GPU between calls) or
/// "host+upload" (a device engine's run(): the upload and the logits' copy timed too).
std::string input_name(bool resident, const std::string& device) {
  if (resident) return "device";
  return device == "cpu" ? "host" : "host+upload";
}

/// `n` calls of `engine` on `x` with `prof` active, each counted as a profiled step; the
/// profile table to `out` and its record to `report`.
void profile_engine(InferenceEngine& engine, const Tensor& x, int n, const InferBenchConfig& cfg,
                    const std::string& arch, const std::string& device, const PeakTable* peaks,
                    std::ostream& out, ReportWriter* report) {
  OpProfiler prof;
  // With peaks of this device, the profile gives each op its roofline time (rn50/profile.h).
  if (peaks) prof.set_roof(Roof::from(*peaks, device));
  for (int i = 0; i < n; ++i) {
    OpProfiler::Activation on(prof);
    const auto t0 = std::chrono::steady_clock::now();
    engine.run(x);
    prof.add_step(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const ProfileSummary s = summarize_profile(prof);
  out << profile_table(s, fmt::format("profile: {} {} batch {} on {}, per call", arch,
                                      engine.precision(), x.n(), device))
      << "\n";
  out.flush();
  ReportRecord r("profile");
  r.set("source", std::string("bench infer"))
      .set("arch", arch)
      .set("precision", engine.precision())
      .set("device", device)
      .set("batch_size", x.n())
      .set("crop_size", cfg.crop_size)
      .set("steps", s.steps)
      .set("step_ms", s.step_ms)
      .set("ops_ms", s.ops_ms)
      .set_json("ops", profile_ops_json(s))
      .set_json("families", profile_families_json(s));
  if (s.roof) r.set_json("roofline", profile_roof_json(s));
  if (report) report->write(r);
}

}  // namespace

std::vector<InferBenchPoint> time_engine(InferenceEngine& engine, const InferBenchConfig& cfg,
                                         const std::string& arch, int classes, std::ostream& out,
                                         ReportWriter* report) {
  // The device the engine runs on, by name ("auto" resolved: "cpu" or "cuda:N"; "ref" the
  // tests' reference engine).
  const std::string device =
      cfg.engine.device == "ref" ? std::string("ref") : resolve_device(cfg.engine.device).name;
  // The roofline: the forward GFLOP of one image, and the peaks to set the results against.
  const double gflops_per_image =
      forward_flops(describe(arch_from_name(arch), classes), cfg.crop_size, cfg.crop_size) / 1e9;
  std::optional<PeakTable> peaks;
  if (!cfg.peak_file.empty()) peaks = PeakTable::load(cfg.peak_file);
  // The profiled engine: this one on the CPU (its primitives are timed whenever a profiler is
  // active); a device engine is built again behind the profiling backend, so that the timed
  // calls keep their CUDA graphs.
  std::unique_ptr<InferenceEngine> profiled_engine;
  if (cfg.profile && device != "cpu") {
    EngineOptions eo = cfg.engine;
    eo.precision = engine.precision();
    eo.profile = true;
    profiled_engine = make_inference_engine(engine.program(), eo);
  }
  InferenceEngine& profiled = profiled_engine ? *profiled_engine : engine;
  out << fmt::format(
      "inference benchmark: {} {} classes, {} on {}, {}x{}, {} timed calls after {}\n", arch,
      classes, engine.precision(), device, cfg.crop_size, cfg.crop_size, cfg.steps,
      cfg.warmup_steps);
  out << fmt::format(
      "{:.3f} GFLOP per image (forward: 2 x conv and fc multiply-adds); peak of {}: {}\n",
      gflops_per_image, engine.precision(), [&] {
        const PeakRecord* pk =
            peaks ? peaks->best(peak_precision(engine.precision()), device) : nullptr;
        return pk ? fmt::format("{:.1f} GFLOP/s ({}, {})", pk->gflops, pk->op, cfg.peak_file)
                  : std::string(cfg.peak_file.empty() ? "none (--peak-file FILE)"
                                                      : "none measured in --peak-file");
      }());
  out << fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {}\n", "batch",
                     "img/s", "avg ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "GFLOP/s",
                     "% peak", "input");
  out.flush();
  std::vector<InferBenchPoint> points;
  std::mt19937_64 gen(cfg.seed + 1);
  std::normal_distribution<float> nd;
  for (int b : cfg.batch_sizes) {
    Tensor x = Tensor::empty({b, 3, cfg.crop_size, cfg.crop_size}, DType::f32, cfg.input_layout);
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = nd(gen);
    // On a device, the input stays there between calls unless --include-upload (the
    // declaration of InferBenchConfig::include_upload).
    const bool resident = !cfg.include_upload && engine.stage_on_device(x);
    auto call = [&] { resident ? engine.run_device_resident() : (void)engine.run(x); };
    for (int i = 0; i < cfg.warmup_steps; ++i) call();
    std::vector<double> ms;
    double total = 0;
    for (int i = 0; i < cfg.steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total += s;
      ms.push_back(1e3 * s);
    }
    InferBenchPoint p;
    p.batch_size = b;
    p.steps = cfg.steps;
    p.ips = static_cast<double>(b) * cfg.steps / total;
    p.latency_avg_ms = 1e3 * total / cfg.steps;
    p.latency_p50_ms = percentile(ms, 50);
    p.latency_p90_ms = percentile(ms, 90);
    p.latency_p95_ms = percentile(ms, 95);
    p.latency_p99_ms = percentile(ms, 99);
    out.flush();
    ReportRecord r("infer_benchmark");
    r.set("batch_size", b)
        .set("infer.ips", p.ips)
        .set("infer.latency_avg_ms", p.latency_avg_ms)
        .set("infer.latency_p50_ms", p.latency_p50_ms)
        .set("infer.latency_p90_ms", p.latency_p90_ms)
        .set("infer.latency_p95_ms", p.latency_p95_ms)
        .set("infer.latency_p99_ms", p.latency_p99_ms)
        .set("steps", cfg.steps)
        .set("warmup_steps", cfg.warmup_steps)
        .set("arch", arch)
        .set("num_of_class", classes)
        .set("crop_size", cfg.crop_size)
        .set("precision", engine.precision())
        .set("device", device)
        .set("input", input_name(resident, device));
    const double share = set_roofline_fields(r, gflops_per_image, p.ips, peaks ? &*peaks : nullptr,
                                             engine.precision(), device)
                             .share;
    out << fmt::format("{:>6} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.1f} "
                       "{:>7} {}\n",
                       b, p.ips, p.latency_avg_ms, p.latency_p50_ms, p.latency_p90_ms,
                       p.latency_p95_ms, p.latency_p99_ms, p.ips * gflops_per_image,
                       share < 0 ? std::string("-") : fmt::format("{:.1f}%", 100 * share),
                       input_name(resident, device));
    out.flush();
    if (report) report->write(r);
    points.push_back(p);
    if (cfg.profile) {
      if (profiled_engine)
        for (int i = 0; i < std::max(1, cfg.warmup_steps); ++i) profiled.run(x);  // its plan
      profile_engine(profiled, x, cfg.steps, cfg, arch, device, peaks ? &*peaks : nullptr, out,
                     report);
    }
  }
  return points;
}

}  // namespace rn50
