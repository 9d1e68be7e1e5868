#include "train/validation.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "config/config.h"
#include "train/trained_model.h"

namespace rn50 {

EvalPath eval_path(const Session& s) {
  return s.backend->name() == "onednn" && s.precision == Precision::fp32 && !s.cfg.qat
             ? EvalPath::folded_engine
             : EvalPath::model;
}

EvalResult run_validation(Session& s, int print_interval, int epoch) {
  const int pi = s.log.enabled() ? print_interval : 0;
  const Normalization norm = normalization(s.cfg);
  switch (eval_path(s)) {
    case EvalPath::folded_engine: {
      auto engine = make_inference_engine(folded_program(s));
      return evaluate([&engine](const Tensor& x) { return engine->run(x); }, s.num_classes,
                      Layout::NHWC, DType::f32, *s.backend, *s.val, s.cfg.label_smoothing, pi,
                      epoch, &s.comm(), norm);
    }
    case EvalPath::model:
      return evaluate(*s.model, *s.backend, *s.val, s.cfg.label_smoothing, pi, epoch, &s.comm(),
                      norm);
  }
  return {};
}

void run_eval_only(Session& s) {
  if (s.cfg.from_checkpoint.empty() && s.cfg.from_pretrained_params.empty())
    s.log.warn("warning: evaluating randomly initialised weights (pass --from-checkpoint or "
               "--from-pretrained-params)\n");
  s.log.out("eval: {}\n", eval_path(s) == EvalPath::folded_engine
                              ? "fp32 inference engine (BatchNorm folded into the convolutions)"
                              : fmt::format("the model's eval forward, {}{}",
                                            precision_name(s.precision),
                                            s.cfg.qat ? ", fake-quantized (--qat)" : ""));
  const EvalResult r = run_validation(s, s.cfg.print_interval);
  s.log.out("eval: loss {:.4f} top1 {:.2f}% top5 {:.2f}% ({} images, {:.1f} img/s, {} bad)\n",
            r.loss, r.top1, r.top5, r.images, r.ips, r.bad_samples);
  ReportRecord rec("eval");
  rec.set_json("epoch", s.resumed_epoch >= 0 ? nlohmann::ordered_json(s.resumed_epoch)
                                             : nlohmann::ordered_json(nullptr));
  set_val_fields(rec, r);
  s.report.write(rec);
}

void run_eval_benchmark(Session& s) {
  EngineOptions eo;
  eo.device = s.device.name;
  eo.precision = s.cfg.qat ? "int8" : engine_precision(s.precision);
  auto engine = make_inference_engine(folded_program(s), eo);
  InferBenchConfig c;
  c.batch_sizes = {s.cfg.batch_size};
  c.crop_size = s.cfg.crop_size;
  c.steps = s.cfg.benchmark_steps;
  c.warmup_steps = s.cfg.benchmark_warmup_steps;
  c.seed = s.cfg.seed;
  c.engine = eo;
  c.input_layout = s.cfg.data_layout;
  std::ostringstream table;
  time_engine(*engine, c, s.cfg.arch, s.num_classes, table, &s.report);
  s.log.out("{}", table.str());
  // Real images: the same batch size again with data loading (DLE's eval-only tables).
  if (s.val && s.cfg.data != DataKind::synthetic) {
    std::ostringstream with_data;
    time_engine_with_loader(
        *engine, c, s.cfg.arch, s.num_classes, [&](int) -> DataSource& { return *s.val; },
        normalization(s.cfg), s.cfg.image_root, with_data, &s.report);
    s.log.out("{}", with_data.str());
  }
}

}  // namespace rn50
