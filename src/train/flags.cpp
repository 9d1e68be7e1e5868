// rn50: the flag table (see flags.h). One entry per flag; the helpers below give each kind of
// value (integer, real, text, switch, choice, list) its parsing, JSON form and check.
#include "train/flags.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

#include "core/check.h"
#include "rn50/backend.h"
#include "rn50/graph.h"

namespace rn50 {

namespace {

using json = nlohmann::ordered_json;
/// A value problem ("must be >= 1"), or empty when the value is fine.
template <class T>
using Problem = std::function<std::string(const T&)>;

std::string key_of(const std::string& name) {
  std::string k = name.substr(2);
  for (char& c : k)
    if (c == '-') c = '_';
  return k;
}

const std::string& one_value(const std::string& flag, const std::vector<std::string>& v) {
  RN50_CHECK(v.size() == 1, "{}: expected one value, got {}", flag, v.size());
  return v[0];
}

template <class T>
T parse_integer(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  RN50_CHECK(r.ec == std::errc() && r.ptr == end && !text.empty(),
             "{} '{}': expected {}", flag, text,
             r.ec == std::errc::result_out_of_range ? "a smaller integer"
             : std::is_signed_v<T>                  ? "an integer"
                                                    : "an integer >= 0");
  return v;
}

double parse_real(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  RN50_CHECK(!text.empty() && end == text.c_str() + text.size(), "{} '{}': expected a number",
             flag, text);
  return v;
}

/// The items of a list flag given as "A,B,C", "A B C" or a mix (each CLI value may hold several
/// comma-separated items; empty items are dropped).
std::vector<std::string> split_list(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const std::string& s : values) {
    std::stringstream ss(s);
    for (std::string e; std::getline(ss, e, ',');)
      if (!e.empty()) items.push_back(e);
  }
  return items;
}

/// The numbers of a list flag (split_list).
std::vector<double> parse_reals(const std::string& flag, const std::vector<std::string>& values) {
  std::vector<double> x;
  for (const std::string& e : split_list(values)) x.push_back(parse_real(flag, e));
  return x;
}

bool parse_bool(const std::string& flag, const std::string& text) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  RN50_FAIL("{}={}: expected true or false", flag, text);
}

FlagSpec base(const char* name, const char* value_name, const char* help, unsigned commands) {
  FlagSpec f;
  f.name = name;
  f.key = key_of(name);
  f.value_name = value_name;
  f.help = help;
  f.commands = commands;
  return f;
}

/// An integer field (int, int64_t, uint64_t).
template <class T>
FlagSpec integer(const char* name, T TrainConfig::*m, const char* help, unsigned commands,
                 Problem<T> problem = {}) {
  FlagSpec f = base(name, "INT", help, commands);
  f.get = [m](const TrainConfig& c) { return json(c.*m); };
  f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
    c.*m = parse_integer<T>(n, one_value(n, v));
  };
  f.check = [m, n = f.name, problem](const TrainConfig& c) {
    if (!problem) return;
    const std::string p = problem(c.*m);
    RN50_CHECK(p.empty(), "{} {}: {}", n, c.*m, p);
  };
  return f;
}

FlagSpec real(const char* name, double TrainConfig::*m, const char* help, unsigned commands,
              Problem<double> problem) {
  FlagSpec f = base(name, "FLOAT", help, commands);
  f.get = [m](const TrainConfig& c) { return json(c.*m); };
  f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
    c.*m = parse_real(n, one_value(n, v));
  };
  f.check = [m, n = f.name, problem](const TrainConfig& c) {
    const double v = c.*m;
    RN50_CHECK(std::isfinite(v), "{} {}: must be a finite number", n, v);
    const std::string p = problem ? problem(v) : std::string();
    RN50_CHECK(p.empty(), "{} {}: {}", n, v, p);
  };
  return f;
}

FlagSpec text(const char* name, std::string TrainConfig::*m, const char* help, unsigned commands,
              Problem<std::string> problem = {}) {
  FlagSpec f = base(name, "TEXT", help, commands);
  f.get = [m](const TrainConfig& c) { return json(c.*m); };
  f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
    c.*m = one_value(n, v);
  };
  f.check = [m, n = f.name, problem](const TrainConfig& c) {
    if (!problem) return;
    const std::string p = problem(c.*m);
    RN50_CHECK(p.empty(), "{} '{}': {}", n, c.*m, p);
  };
  return f;
}

FlagSpec switch_(const char* name, bool TrainConfig::*m, const char* help, unsigned commands) {
  FlagSpec f = base(name, "", help, commands);
  f.get = [m](const TrainConfig& c) { return json(c.*m); };
  f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
    c.*m = v.empty() ? true : parse_bool(n, v.back());
  };
  f.check = [](const TrainConfig&) {};
  return f;
}

/// A bool field that takes its value as a word (DLE's `--flag true|false`), unlike a switch.
FlagSpec boolean(const char* name, bool TrainConfig::*m, const char* help, unsigned commands) {
  FlagSpec f = base(name, "true|false", help, commands);
  f.get = [m](const TrainConfig& c) { return json(c.*m); };
  f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
    c.*m = parse_bool(n, one_value(n, v));
  };
  f.check = [](const TrainConfig&) {};
  return f;
}

/// A text field limited to `choices`.
FlagSpec choice(const char* name, std::string TrainConfig::*m, std::vector<std::string> choices,
                const char* help, unsigned commands) {
  std::string names;
  for (const std::string& c : choices) names += (names.empty() ? "" : "|") + c;
  FlagSpec f = text(name, m, help, commands, [choices, names](const std::string& v) {
    for (const std::string& c : choices)
      if (v == c) return std::string();
    return fmt::format("expected one of {}", names);
  });
  f.value_name = names;
  return f;
}

/// An enum field: `names` in order, `parse` the existing parser that throws naming the flag.
template <class E>
FlagSpec enumeration(const char* name, E TrainConfig::*m, const char* names,
                     std::function<E(const std::string&)> parse,
                     std::function<std::string(E)> to_name, const char* help,
                     unsigned commands) {
  FlagSpec f = base(name, names, help, commands);
  f.get = [m, to_name](const TrainConfig& c) { return json(to_name(c.*m)); };
  f.set = [m, n = f.name, parse](TrainConfig& c, const std::vector<std::string>& v) {
    c.*m = parse(one_value(n, v));
  };
  f.check = [](const TrainConfig&) {};
  return f;
}

template <class T>
Problem<T> at_least(T lo) {
  return [lo](const T& v) { return v >= lo ? std::string() : fmt::format("must be >= {}", lo); };
}

Problem<double> in_range(double lo, double hi, bool hi_open) {
  return [=](const double& v) {
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return std::string();
    return fmt::format("must be in [{}, {}{}", lo, hi, hi_open ? ")" : "]");
  };
}

std::vector<FlagSpec> make_table() {
  const unsigned T = kTrainCommand, B = kTrainAndEval;
  using C = TrainConfig;
  std::vector<FlagSpec> t;
  // ---- what to run ----
  t.push_back(enumeration<RunScope>(
      "--run-scope", &C::run_scope, "train_eval|train_only|eval_only", parse_run_scope,
      [](RunScope s) { return std::string(run_scope_name(s)); },
      "train and evaluate every --eval-interval epochs, train only, or evaluate only", T));
  t.push_back(switch_("--benchmark", &C::benchmark,
                      "rn50 train: time training steps (train.ips), no evaluation, no "
                      "checkpoints; rn50 eval: time the CPU inference engine on --batch-size "
                      "images (infer.ips, latency percentiles)",
                      B));
  t.push_back(integer("--benchmark-steps", &C::benchmark_steps, "measured benchmark steps", B,
                      at_least(1)));
  t.push_back(integer("--benchmark-warmup-steps", &C::benchmark_warmup_steps,
                      "untimed benchmark steps before measuring", B, at_least(0)));
  t.push_back(switch_("--show-config", &C::show_config,
                      "print the resolved configuration as a table before running", B));
  // ---- optimisation (DLE RN50 v1.5) ----
  t.push_back(integer("--epochs", &C::epochs, "number of epochs (DLE 90)", T, at_least(1)));
  t.push_back(integer("--batch-size", &C::batch_size,
                      "images per step per process; global batch = this x processes", B,
                      at_least(1)));
  t.push_back(real("--lr", &C::lr,
                   "learning rate per 256 images; base lr = lr x global batch / 256 (DLE 0.256)",
                   T, at_least(0.0)));
  t.push_back(real("--warmup-epochs", &C::warmup_epochs,
                   "epochs of linear lr warmup before the cosine decay; may be fractional", T,
                   at_least(0.0)));
  t.push_back(real("--warmup-start-lr", &C::warmup_start_lr,
                   "lr per 256 images (as --lr) the linear warmup starts from (0: base lr x "
                   "(step + 1) / warmup steps, DLE PyTorch)",
                   T, at_least(0.0)));
  t.push_back(choice("--lr-scheduler", &C::lr_scheduler, {"cosine", "step", "linear", "constant"},
                     "lr after warmup (DLE PyTorch lr policies)", T));
  {
    FlagSpec f = base("--lr-decay-epochs", "FLOAT ...",
                      "step schedule: epochs at which the lr is multiplied by --lr-decay-rate "
                      "(space- or comma-separated)",
                      T);
    f.get = [](const TrainConfig& c) { return json(c.lr_decay_epochs); };
    f.set = [n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
      c.lr_decay_epochs = parse_reals(n, v);
    };
    f.check = [n = f.name](const TrainConfig& c) {
      for (size_t i = 0; i < c.lr_decay_epochs.size(); ++i)
        RN50_CHECK(c.lr_decay_epochs[i] >= 0 &&
                       (i == 0 || c.lr_decay_epochs[i] > c.lr_decay_epochs[i - 1]),
                   "{} {}: epochs must be >= 0 and ascending", n, json(c.lr_decay_epochs).dump());
    };
    t.push_back(std::move(f));
  }
  t.push_back(real("--lr-decay-rate", &C::lr_decay_rate, "step schedule: lr factor (DLE 0.1)", T,
                   in_range(0, 1, true)));
  t.push_back(real("--momentum", &C::momentum, "SGD momentum (DLE 0.875)", T,
                   in_range(0, 1, true)));
  t.push_back(real("--weight-decay", &C::weight_decay,
                   "L2 weight decay on conv and fc weights only (DLE 1/32768)", T, at_least(0.0)));
  t.push_back(switch_("--bn-weight-decay", &C::bn_weight_decay,
                      "apply --weight-decay to every parameter, BatchNorm gamma/beta and biases "
                      "too (DLE flag)",
                      T));
  t.push_back(real("--label-smoothing", &C::label_smoothing,
                   "label smoothing epsilon of the loss (training and validation; DLE 0.1)", B,
                   in_range(0, 1, true)));
  t.push_back(switch_("--asp", &C::asp,
                      "2:4 structured sparsity (NVIDIA ASP, DLE flag): every conv but the stem "
                      "keeps at most 2 of each 4 input channels, held at zero through training "
                      "(masks from --prune-model or an --asp checkpoint)",
                      T));
  t.push_back(switch_("--qat", &C::qat,
                      "quantization-aware training (DLE flag): 8-bit fake quantization of conv/fc "
                      "weights (per output channel) and inputs (per tensor, moving-average abs-max "
                      "ranges, rate 0.9), straight-through backward; eval runs it too; rn50 export "
                      "--precision int8 takes the learnt ranges",
                      B));
  t.push_back(switch_("--prune-model", &C::prune_model,
                      "compute the 2:4 masks from the starting weights with --mask-algo (DLE "
                      "flag; needs --asp)",
                      T));
  t.push_back(choice("--mask-algo", &C::mask_algo, {"mask_1d", "mask_2d_greedy", "mask_2d_best"},
                     "2:4 mask algorithm (DLE's names): per 4 input channels, or per 4x4 block "
                     "of output x input channels (greedy or the best of the 90 patterns)",
                     T));
  t.push_back(real("--mixup", &C::mixup,
                   "mixup alpha: each step mixes every image and its smoothed target with the "
                   "batch's image in reversed order, weight ~ Beta(alpha, alpha) (DLE 0.2 for 250 "
                   "epochs; 0 = off). Training top1/top5 then count against the dominant label "
                   "(its own when the weight is >= 0.5)",
                   T, at_least(0.0)));
  t.push_back(integer("--max-nonfinite-steps", &C::max_nonfinite_steps,
                      "consecutive inf/NaN losses tolerated before the run stops", T,
                      at_least(1)));
  // ---- model ----
  {
    std::vector<std::string> archs = arch_names();
    t.push_back(choice("--arch", &C::arch, archs, "architecture", B));
  }
  t.push_back(integer("--num-of-class", &C::num_classes,
                      "classes of the fc layer; 0 = the class folders of the data (1000 for "
                      "synthetic data)",
                      B, at_least(0)));
  t.push_back(switch_("--zero-init-residual", &C::zero_init_residual,
                      "initialise the last BN gamma of each residual branch with 0", T));
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
      "activation memory layout (NHWC: channels last)", B));
  t.push_back(text("--device", &C::device,
                   "auto (cuda:0 when a GPU is usable, else cpu) | cpu | cuda | cuda:N", B,
                   [](const std::string& d) {
                     resolve_device(d);  // throws naming --device and the reason
                     return std::string();
                   }));
  // ---- precision ----
  t.push_back(switch_("--amp", &C::amp,
                      "mixed precision (DLE --amp): --amp-dtype compute, f32 master weights, BN "
                      "and loss; CUDA fp16 or bf16, CPU bf16 (oneDNN, AVX-512)",
                      B));
  t.push_back(choice("--amp-dtype", &C::amp_dtype, {"fp16", "bf16"},
                     "--amp compute dtype: fp16 (with loss scaling; CUDA) or bf16 (CUDA and CPU)",
                     B));
  t.push_back(switch_("--use-pure-fp16", &C::use_pure_fp16,
                      "pure fp16 (DLE Paddle's O2, with --amp fp16): conv/fc weights, their "
                      "gradients and momentum only in fp16 (6 bytes per parameter instead of "
                      "16); BN and loss f32; updates below half an fp16 ulp of a weight are "
                      "lost; one process (CUDA)",
                      T));
  t.push_back(real("--scale-loss", &C::scale_loss, "initial fp16 loss scale (DLE's AMP scripts)",
                   T, [](const double& v) {
                     return v > 0 ? std::string() : std::string("must be a number > 0");
                   }));
  t.push_back(switch_("--use-dynamic-loss-scaling", &C::use_dynamic_loss_scaling,
                      "grow/back off the fp16 loss scale as torch GradScaler "
                      "(--use-dynamic-loss-scaling=false keeps --scale-loss fixed)",
                      T));
  t.push_back(switch_("--no-tf32", &C::no_tf32,
                      "f32 convolutions and GEMMs without TF32 tensor cores (CUDA)", B));
  t.push_back(switch_("--no-cuda-graphs", &C::no_cuda_graphs,
                      "run each CUDA training step op by op instead of replaying a recorded "
                      "CUDA graph",
                      T));
  // ---- data ----
  t.push_back(enumeration<DataKind>(
      "--data", &C::data, "imagefolder|synthetic", parse_data_kind,
      [](DataKind k) { return std::string(data_kind_name(k)); },
      "ImageFolder images (--image-root) or random synthetic images", B));
  t.push_back(text("--image-root", &C::image_root,
                   "ImageFolder root holding train/<class>/* and val/<class>/*", B));
  t.push_back(integer("--synthetic-samples", &C::synthetic_samples,
                      "samples per epoch of --data synthetic; 0 = batch x benchmark steps with "
                      "--benchmark, else 1281167",
                      B, at_least<int64_t>(0)));
  t.push_back(integer("--crop-size", &C::crop_size,
                      "train RandomResizedCrop and val center-crop size, pixels", B, at_least(1)));
  {
    // DLE Paddle/MXNet's input shape "C,H,W" (or "C H W"): channels and the (square) crop.
    FlagSpec f = base("--image-shape", "INT ...",
                      "input shape C,H,W: C = 3, or 4 for a zero fourth channel (DLE's NHWC "
                      "padding; the stem conv gets 4 input channels); H = W = the crop size "
                      "(sets --crop-size)",
                      B);
    f.get = [](const TrainConfig& c) {
      return json::array({c.input_channels, c.crop_size, c.crop_size});
    };
    f.set = [n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
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
    f.check = [](const TrainConfig&) {};  // set() checks the values; validate() the crop size
    t.push_back(std::move(f));
  }
  // RandomResizedCrop's ranges: two numbers, "LO,HI" or "LO HI".
  auto range = [](const char* name, std::array<double, 2> TrainConfig::*m, const char* help,
                  double max_hi) {
    FlagSpec f = base(name, "FLOAT ...", help, kTrainCommand);
    f.get = [m](const TrainConfig& c) { return json((c.*m)); };
    f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
      const std::vector<double> x = parse_reals(n, v);
      RN50_CHECK(x.size() == 2, "{}: expected two numbers LO,HI, got {}", n, x.size());
      c.*m = {x[0], x[1]};
    };
    f.check = [m, n = f.name, max_hi](const TrainConfig& c) {
      const auto& r = c.*m;
      RN50_CHECK(r[0] > 0 && r[0] <= r[1] && r[1] <= max_hi,
                 "{} {},{}: need 0 < LO <= HI{}", n, r[0], r[1],
                 std::isinf(max_hi) ? "" : fmt::format(" <= {}", max_hi));
    };
    return f;
  };
  t.push_back(range("--rand-crop-scale", &C::rand_crop_scale,
                    "train RandomResizedCrop: area fraction range LO,HI", 1.0));
  t.push_back(range("--rand-crop-ratio", &C::rand_crop_ratio,
                    "train RandomResizedCrop: aspect ratio (w/h) range LO,HI",
                    std::numeric_limits<double>::infinity()));
  // The input normalisation: three numbers, "R,G,B" or "R G B" (DLE's comma lists).
  auto rgb = [](const char* name, std::array<double, 3> TrainConfig::*m, const char* help,
                bool positive) {
    FlagSpec f = base(name, "FLOAT ...", help, kTrainAndEval);
    f.get = [m](const TrainConfig& c) { return json((c.*m)); };
    f.set = [m, n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
      const std::vector<double> x = parse_reals(n, v);
      RN50_CHECK(x.size() == 3, "{}: expected three numbers R,G,B (one per channel), got {}", n,
                 x.size());
      c.*m = {x[0], x[1], x[2]};
    };
    f.check = [m, n = f.name, positive](const TrainConfig& c) {
      for (double v : c.*m)
        RN50_CHECK(std::isfinite(v) && (positive ? v > 0 : (v >= 0 && v <= 1)),
                   "{} {}: each value must be {}", n, fmt::join(c.*m, ","),
                   positive ? "> 0 (a standard deviation of [0,1] pixel values)"
                            : "in [0, 1] (a mean of pixel / 255)");
    };
    return f;
  };
  t.push_back(rgb("--normalize-mean", &C::normalize_mean,
                  "input normalisation: RGB mean of pixel / 255 subtracted (DLE flag)", false));
  t.push_back(rgb("--normalize-std", &C::normalize_std,
                  "input normalisation: RGB std the centred value is divided by (DLE flag)", true));
  t.push_back(integer("--resize-short", &C::resize_short,
                      "val: shorter side resized to this before the center crop, pixels", B,
                      at_least(1)));
  t.push_back(integer("--workers", &C::workers,
                      "decode threads; 0 = this process's share of the cores", B, at_least(0)));
  t.push_back(integer("--prefetch", &C::prefetch, "batches queued ahead per decode worker", B,
                      at_least(1)));
  t.push_back(real("--max-bad-fraction", &C::max_bad_fraction,
                   "stop when undecodable files exceed this fraction of an epoch (each is "
                   "skipped and counted below it)",
                   B, in_range(0, 1, false)));
  t.push_back(switch_("--exact-decode", &C::exact_decode,
                      "decode whole images, PIL-exact (off: fast DCT-scaled region decoding)",
                      B));
  {
    FlagSpec f = base("--worker-cpus", "INT ...", "pin decode worker i to CPU list[i % n]", B);
    f.get = [](const TrainConfig& c) { return json(c.worker_cpus); };
    f.set = [n = f.name](TrainConfig& c, const std::vector<std::string>& v) {
      c.worker_cpus.clear();
      for (const std::string& s : v) c.worker_cpus.push_back(parse_integer<int>(n, s));
    };
    f.check = [n = f.name](const TrainConfig& c) {
      for (int cpu : c.worker_cpus) RN50_CHECK(cpu >= 0, "{} {}: CPU ids must be >= 0", n, cpu);
    };
    t.push_back(std::move(f));
  }
  t.push_back(integer("--seed", &C::seed,
                      "seed of the weight init and of the data order and augmentation", B));
  // ---- logging, evaluation, checkpoints ----
  t.push_back(integer("--print-interval", &C::print_interval,
                      "steps between progress lines and report step lines", B, at_least(1)));
  t.push_back(integer("--eval-interval", &C::eval_interval,
                      "evaluate every N epochs (and after the last)", T, at_least(1)));
  t.push_back(integer("--save-interval", &C::save_interval,
                      "checkpoint every N epochs (and after the last); 0 = never", T,
                      at_least(0)));
  t.push_back(text("--checkpoint-dir", &C::checkpoint_dir,
                   "checkpoints go to <dir>/<arch>/<epoch>/", T));
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
                   "JSON-lines report (config, step, epoch, eval, benchmark lines); empty = none",
                   B));
  t.push_back(choice("--report-format", &C::report_format, {"rn50", "dllogger"},
                     "format of --report-file: rn50's JSON lines (docs/report-schema.md) or "
                     "DLLogger's \"DLLL {...}\" lines as DLE's scripts write and parse",
                     B));
  t.push_back(text("--from-checkpoint", &C::from_checkpoint,
                   "resume from <checkpoint-dir>/<arch> (epoch folders) or one epoch folder", B));
  t.push_back(text("--last-epoch-of-checkpoint", &C::last_epoch_of_checkpoint,
                   "the epoch folder of --from-checkpoint to use: N, or auto = the newest "
                   "complete one",
                   B, [](const std::string& le) {
                     const bool ok = le == "auto" ||
                                     (!le.empty() && le.size() <= 9 &&
                                      le.find_first_not_of("0123456789") == std::string::npos);
                     return ok ? std::string() : std::string("expected 'auto' or an epoch number >= 0");
                   }));
  t.push_back(text("--from-pretrained-params", &C::from_pretrained_params,
                   "safetensors file with torchvision state_dict keys to start from", B));
  // ---- data parallelism ----
  t.push_back(choice("--dist-backend", &C::dist_backend, {"auto", "single", "mpi", "nccl"},
                     "gradient/metric communicator; auto = nccl on GPUs, mpi on CPUs when "
                     "launched on several processes",
                     B));
  t.push_back(real("--bucket-size-mb", &C::bucket_size_mb,
                   "gradient allreduce bucket size, MiB (torch DDP 25)", T, [](const double& v) {
                     return v > 0 ? std::string() : std::string("must be a number > 0");
                   }));
  t.push_back(boolean("--enable-cpu-affinity", &C::enable_cpu_affinity,
                      "bind each process of a node to its own share of the cores (DLE flag); "
                      "false: no binding, OpenMP threads still split the cores",
                      B));
  t.push_back(switch_("--log-all-ranks", &C::log_all_ranks,
                      "every rank prints its progress (off: rank 0 only)", B));
  t.push_back(real("--timeout", &C::timeout,
                   "seconds without progress after which a rank stops the whole job; 0 = never",
                   B, at_least(0.0)));
  return t;
}

}  // namespace

bool FlagSpec::is_list() const {
  return value_name.size() > 4 && value_name.compare(value_name.size() - 4, 4, " ...") == 0;
}

std::string FlagSpec::help_text() const {
  const json d = get(TrainConfig{});
  std::string dv = d.is_string() ? d.get<std::string>() : d.dump();
  if (dv.empty()) dv = "none";
  return fmt::format("{} (default: {})", help, dv);
}

const std::vector<FlagSpec>& train_flags() {
  static const std::vector<FlagSpec> table = make_table();
  return table;
}

const FlagSpec& find_flag(const std::string& name) {
  for (const FlagSpec& f : train_flags())
    if (f.name == name) return f;
  RN50_FAIL("no flag named '{}'", name);
}

void set_flag(TrainConfig& cfg, const FlagSpec& flag, const std::vector<std::string>& values) {
  flag.set(cfg, values);
  cfg.given.insert(flag.name);
}

json config_to_json(const TrainConfig& cfg) {
  json j;
  for (const FlagSpec& f : train_flags()) j[f.key] = f.get(cfg);
  j["world_size"] = cfg.world_size;
  j["version"] = kRn50Version;
  return j;
}

std::vector<ReportField> config_flag_fields() {
  std::vector<ReportField> out;
  for (const FlagSpec& f : train_flags()) {
    FieldType t = FieldType::string;
    if (f.is_switch() || f.value_name == "true|false") t = FieldType::boolean;
    else if (f.is_list()) t = FieldType::list;
    else if (f.value_name == "INT") t = FieldType::integer;
    else if (f.value_name == "FLOAT") t = FieldType::number;
    out.push_back({f.key, t, true, false, f.name + ": " + f.help});
  }
  return out;
}

std::string config_table(const TrainConfig& cfg, unsigned command) {
  size_t w = 0;
  for (const FlagSpec& f : train_flags())
    if (f.commands & command) w = std::max(w, f.name.size());
  std::string out = fmt::format("{:<{}}  {:<10}  {}\n", "flag", w, "source", "value");
  for (const FlagSpec& f : train_flags()) {
    if (!(f.commands & command)) continue;
    const json v = f.get(cfg);
    out += fmt::format("{:<{}}  {:<10}  {}\n", f.name, w,
                       cfg.given.count(f.name)         ? "set"
                       : cfg.from_config.count(f.name) ? "config"
                                                       : "default",
                       v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

}  // namespace rn50
