// rn50 inference: the rn50 inference model folder (model.json + model.safetensors), see
// rn50/inference.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/check.h"
#include "core/fileio.h"
#include "core/json_value.h"
#include "core/safetensors.h"
#include "model/qat.h"
#include "model/weights.h"
#include "rn50/inference.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kFormat = "rn50-inference";

/// Floats as the shortest decimal that reads back as the same float (0.485, not 0.48500001...).
json short_floats(const std::vector<float>& v) {
  json a = json::array();
  for (float f : v) a.push_back(std::stod(fmt::format("{}", f)));
  return a;
}
constexpr int kFormatVersion = 1;

const char* kind_name(InferOp::Kind k) {
  switch (k) {
    case InferOp::Kind::conv:
      return "conv";
    case InferOp::Kind::maxpool:
      return "maxpool";
    case InferOp::Kind::global_avgpool:
      return "global_avgpool";
    case InferOp::Kind::fc:
      return "fc";
  }
  return "?";
}

InferOp::Kind kind_of(const std::string& s, const std::string& where) {
  for (auto k : {InferOp::Kind::conv, InferOp::Kind::maxpool, InferOp::Kind::global_avgpool,
                 InferOp::Kind::fc})
    if (s == kind_name(k)) return k;
  RN50_FAIL("{}: unknown op kind '{}' (expected conv, maxpool, global_avgpool or fc)", where, s);
}

/// j[key] as T, or an error naming the file, the entry and the key.
template <class T>
T field(const json& j, const char* key, const std::string& where) {
  RN50_CHECK(j.is_object() && j.contains(key), "{}: '{}' is missing", where, key);
  return json_as<T>(j[key], fmt::format("{}: '{}' has the wrong type or range", where, key));
}

}  // namespace

void save_inference_model(const InferenceModel& m, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  RN50_CHECK(!ec, "--output '{}': cannot create the folder: {}", dir, ec.message());
  const InferenceProgram& p = m.program;
  json ops = json::array();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const InferOp& op : p.ops) {
    json o;
    o["kind"] = kind_name(op.kind);
    o["name"] = op.name;
    o["input"] = op.input;
    o["output"] = op.output;
    switch (op.kind) {
      case InferOp::Kind::conv:
        o["residual"] = op.residual;
        o["relu"] = op.relu;
        o["conv"] = {{"in_channels", op.conv.in_channels},
                     {"out_channels", op.conv.out_channels},
                     {"kernel", op.conv.kernel},
                     {"stride", op.conv.stride},
                     {"pad", op.conv.pad}};
        o["folded_bn"] = op.folded_bn;
        break;
      case InferOp::Kind::maxpool:
        o["pool"] = {{"kernel", op.pool.kernel}, {"stride", op.pool.stride}, {"pad", op.pool.pad}};
        break;
      case InferOp::Kind::global_avgpool:
      case InferOp::Kind::fc:
        break;  // no attributes (the fc's shape is the program's num_classes, feature_channels)
    }
    if (op.weight.defined()) {
      tensors.emplace_back(op.name + ".weight", op.weight);
      tensors.emplace_back(op.name + ".bias", op.bias);
    }
    ops.push_back(o);
  }
  json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["arch"] = p.arch;
  j["num_classes"] = p.num_classes;
  j["feature_channels"] = p.feature_channels;
  // The precision the model runs in by default (rn50 export --precision); the stored weights
  // are f32 either way (the INT8 engine quantizes them when it loads them).
  j["precision"] = m.info.precision;
  j["weights_dtype"] = "f32";
  if (!p.value_absmax.empty()) {
    // INT8 calibration: per value, the |x| range the INT8 engine quantizes with.
    // QAT ranges are marked by the method: the engine quantizes them on the training grid.
    const CalibrationInfo& c = m.info.calibration;
    json cal = {{"method", p.qat_ranges ? std::string("qat") : c.method},
                {"images", p.qat_ranges ? 0 : c.images},
                {"image_root", c.image_root}};
    if (c.method == "percentile") cal["percentile"] = c.percentile;
    json r = json::array();
    for (float a : p.value_absmax) r.push_back(a);
    cal["value_absmax"] = r;
    j["int8_calibration"] = cal;
  }
  j["input"] = {
      {"dtype", "f32"}, {"shape", "N,3,H,W"}, {"normalised", "(pixel / 255 - mean) / std"}};
  j["preprocessing"] = {{"resize_short", m.info.resize_short},
                        {"crop_size", m.info.crop_size},
                        {"mean", short_floats(m.info.mean)},
                        {"std", short_floats(m.info.std)}};
  j["classes"] = m.info.classes;
  j["values"] = p.producer.size();
  j["ops"] = ops;
  j["weights_digest"] = save_safetensors((fs::path(dir) / kInferenceWeightsFile).string(),
                                         tensors, {{"format", kFormat}, {"arch", p.arch}})
                            .to_json();
  // Written last: a folder holds model.json only once its weights are complete.
  write_file_atomic((fs::path(dir) / kInferenceJsonFile).string(), j.dump(1) + "\n");
}

InferenceModel load_inference_model(const std::string& dir) {
  const std::string jpath = (fs::path(dir) / kInferenceJsonFile).string();
  const std::string wpath = (fs::path(dir) / kInferenceWeightsFile).string();
  RN50_CHECK(fs::exists(jpath),
             "'{}' is not an rn50 inference model: no {} (write one with rn50 export)", dir,
             kInferenceJsonFile);
  json j;
  try {
    j = parse_json_limited(read_file(jpath), fmt::format("'{}'", jpath));
  } catch (const json::exception& e) {
    RN50_FAIL("'{}': not valid JSON ({})", jpath, e.what());
  }
  RN50_CHECK(j.is_object() && j.contains("format") && j["format"] == kFormat,
             "'{}': not an rn50 inference model (\"format\" is not \"{}\")", jpath, kFormat);
  const int version = field<int>(j, "format_version", jpath);
  RN50_CHECK(version == kFormatVersion,
             "'{}': format_version {} is not supported by this rn50 (it reads {})", jpath, version,
             kFormatVersion);
  InferenceModel m;
  InferenceProgram& p = m.program;
  p.arch = field<std::string>(j, "arch", jpath);
  p.num_classes = field<int>(j, "num_classes", jpath);
  p.feature_channels = field<int64_t>(j, "feature_channels", jpath);
  RN50_CHECK(p.num_classes >= 1, "'{}': num_classes {} must be >= 1", jpath, p.num_classes);
  const auto nv = field<int64_t>(j, "values", jpath);
  // Each op writes one value: a count far beyond any network is a damaged file, not a reason
  // to allocate gigabytes.
  RN50_CHECK(nv >= 2 && nv <= (int64_t{1} << 20), "'{}': values {} must be in 2..{}", jpath, nv,
             int64_t{1} << 20);
  p.producer.assign(static_cast<size_t>(nv), -1);
  const json& pre = j.contains("preprocessing") ? j["preprocessing"] : json::object();
  m.info.resize_short = field<int>(pre, "resize_short", jpath + " preprocessing");
  m.info.crop_size = field<int>(pre, "crop_size", jpath + " preprocessing");
  m.info.mean = field<std::vector<float>>(pre, "mean", jpath + " preprocessing");
  m.info.std = field<std::vector<float>>(pre, "std", jpath + " preprocessing");
  RN50_CHECK(m.info.mean.size() == 3 && m.info.std.size() == 3,
             "'{}': preprocessing mean and std need 3 values each", jpath);
  m.info.classes = json_get_or(j, "classes", jpath, std::vector<std::string>{});
  m.info.precision = json_get_or(j, "precision", jpath, std::string("fp32"));
  RN50_CHECK(m.info.precision == "fp32" || m.info.precision == "int8",
             "'{}': precision '{}' is not one rn50 exports (fp32 or int8)", jpath,
             m.info.precision);

  RN50_CHECK(fs::exists(wpath), "'{}': {} is missing beside {}", dir, kInferenceWeightsFile,
             kInferenceJsonFile);
  const FileDigest digest = j.contains("weights_digest")
                                ? FileDigest::from_json(j["weights_digest"], jpath + " weights_digest")
                                : FileDigest{};
  SafeTensorsFile w = load_safetensors(wpath, digest, jpath);
  auto tensor = [&](const std::string& key, const std::vector<int64_t>& shape) {
    auto it = w.tensors.find(key);
    RN50_CHECK(it != w.tensors.end(), "'{}': tensor '{}' is missing", wpath, key);
    RN50_CHECK(it->second.dtype() == DType::f32 && it->second.shape() == shape,
               "'{}': tensor '{}' is {} with {} dims, expected f32 of shape ({})", wpath, key,
               dtype_name(it->second.dtype()), it->second.ndim(), fmt::join(shape, ", "));
    return it->second;
  };
  const json& ops = j.contains("ops") ? j["ops"] : json();
  RN50_CHECK(ops.is_array() && !ops.empty(), "'{}': 'ops' is missing or empty", jpath);
  for (size_t i = 0; i < ops.size(); ++i) {
    const json& o = ops[i];
    const std::string where = fmt::format("'{}' ops[{}]", jpath, i);
    InferOp op;
    op.kind = kind_of(field<std::string>(o, "kind", where), where);
    op.name = field<std::string>(o, "name", where);
    op.input = field<int>(o, "input", where);
    op.output = field<int>(o, "output", where);
    auto valid_read = [&](int v) {
      return v == 0 || (v > 0 && v < nv && p.producer[static_cast<size_t>(v)] >= 0);
    };
    RN50_CHECK(valid_read(op.input), "{} ('{}'): reads value {}, which no earlier op writes", where,
               op.name, op.input);
    RN50_CHECK(op.output > 0 && op.output < nv && p.producer[static_cast<size_t>(op.output)] < 0,
               "{} ('{}'): output value {} is out of range or written twice", where, op.name,
               op.output);
    switch (op.kind) {
      case InferOp::Kind::conv: {
        const json& c = o.contains("conv") ? o["conv"] : json();
        op.conv.in_channels = field<int64_t>(c, "in_channels", where);
        op.conv.out_channels = field<int64_t>(c, "out_channels", where);
        op.conv.kernel = field<int>(c, "kernel", where);
        op.conv.stride = field<int>(c, "stride", where);
        op.conv.pad = field<int>(c, "pad", where);
        RN50_CHECK(op.conv.in_channels >= 1 && op.conv.out_channels >= 1 && op.conv.kernel >= 1 &&
                       op.conv.stride >= 1 && op.conv.pad >= 0,
                   "{} ('{}'): bad conv attributes {}", where, op.name, c.dump());
        op.residual = field<int>(o, "residual", where);
        RN50_CHECK(op.residual == -1 || valid_read(op.residual),
                   "{} ('{}'): residual value {} is not written by an earlier op", where, op.name,
                   op.residual);
        op.relu = field<bool>(o, "relu", where);
        op.folded_bn = json_get_or(o, "folded_bn", where, std::string());
        op.weight = tensor(op.name + ".weight", {op.conv.out_channels, op.conv.in_channels,
                                                 op.conv.kernel, op.conv.kernel});
        op.bias = tensor(op.name + ".bias", {op.conv.out_channels});
        break;
      }
      case InferOp::Kind::maxpool: {
        const json& pl = o.contains("pool") ? o["pool"] : json();
        op.pool.kernel = field<int>(pl, "kernel", where);
        op.pool.stride = field<int>(pl, "stride", where);
        op.pool.pad = field<int>(pl, "pad", where);
        RN50_CHECK(op.pool.kernel >= 1 && op.pool.stride >= 1 && op.pool.pad >= 0,
                   "{} ('{}'): bad pool attributes {}", where, op.name, pl.dump());
        break;
      }
      case InferOp::Kind::global_avgpool:
        break;
      case InferOp::Kind::fc:
        op.weight = tensor(op.name + ".weight", {p.num_classes, p.feature_channels});
        op.bias = tensor(op.name + ".bias", {p.num_classes});
        break;
    }
    p.producer[static_cast<size_t>(op.output)] = static_cast<int>(p.ops.size());
    p.ops.push_back(std::move(op));
  }
  RN50_CHECK(p.ops.back().kind == InferOp::Kind::fc, "'{}': the last op must be the fc", jpath);
  if (j.contains("int8_calibration")) {
    const json& c = j["int8_calibration"];
    const std::string where = jpath + " int8_calibration";
    m.info.calibration.method = field<std::string>(c, "method", where);
    m.info.calibration.images = field<int64_t>(c, "images", where);
    m.info.calibration.image_root = json_get_or(c, "image_root", where, std::string());
    m.info.calibration.percentile = json_get_or(c, "percentile", where, 0.0);
    p.qat_ranges = m.info.calibration.method == "qat";
    p.value_absmax = field<std::vector<float>>(c, "value_absmax", where);
    RN50_CHECK(static_cast<int64_t>(p.value_absmax.size()) == nv,
               "{}: value_absmax has {} entries for {} values", where, p.value_absmax.size(), nv);
    for (float a : p.value_absmax)
      RN50_CHECK(std::isfinite(a) && a >= 0, "{}: value_absmax holds {}", where, a);
  }
  RN50_CHECK(m.info.precision != "int8" || !p.value_absmax.empty(),
             "'{}': precision int8 without int8_calibration ranges", jpath);
  return m;
}

std::vector<std::string> class_names_for(const std::vector<std::string>& known,
                                         int num_classes) {
  RN50_CHECK(static_cast<int>(known.size()) <= num_classes,
             "{} class names for a {}-class model: the model has fewer outputs than the data has "
             "classes",
             known.size(), num_classes);
  std::vector<std::string> names = known;
  for (int i = static_cast<int>(known.size()); i < num_classes; ++i)
    names.push_back(fmt::format("class_{}", i));
  return names;
}

void run_export(const ExportConfig& cfg, std::ostream& out) {
  RN50_CHECK(!cfg.weights.empty(),
             "rn50 export: pass --from-checkpoint or --from-pretrained-params");
  RN50_CHECK(!cfg.output.empty(), "rn50 export: --output DIR is required");
  for (const std::string& f : cfg.formats) {
    RN50_CHECK(f == "rn50" || f == "onnx", "--format {}: expected rn50 or onnx", f);
    RN50_CHECK(f != "onnx" || onnx_export_available(),
               "--format onnx: this rn50 was built without ONNX support (libonnx-dev and "
               "libprotobuf-dev were not found); run scripts/setup.sh and rebuild, or use "
               "--format rn50");
  }
  RN50_CHECK(cfg.precision == "fp32" || cfg.precision == "int8",
             "--precision {}: expected fp32 or int8 (bf16 needs no export: rn50 bench infer "
             "--precision bf16 runs any model)",
             cfg.precision);
  const bool int8 = cfg.precision == "int8";
  RN50_CHECK(cfg.crop_size >= 1 && cfg.resize_short >= cfg.crop_size,
             "--resize-short {} / --crop-size {}: need crop >= 1 and resize >= crop",
             cfg.resize_short, cfg.crop_size);
  // fold_weights_file, keeping the description and the state dict for the QAT ranges.
  const std::string weights = weights_file(cfg.weights, "--from-pretrained-params");
  const SafeTensorsFile file = load_weights_file(weights);
  const std::string arch_name = cfg.arch.empty() ? infer_arch(file.tensors, weights) : cfg.arch;
  const int k = classes_of(file, weights, cfg.num_classes);
  const NetworkDesc desc = describe(arch_from_name(arch_name), k);
  const std::map<std::string, Tensor> sd = state_dict_f32(file, weights, k);
  // Weights trained with --qat hold their activation ranges: int8 takes them, no calibration.
  const bool qat = int8 && has_qat_ranges(sd);
  std::vector<std::string> calib_flags = cfg.calib_flags;
  if (!cfg.calib_root.empty() &&
      std::find(calib_flags.begin(), calib_flags.end(), "--image-root") == calib_flags.end())
    calib_flags.insert(calib_flags.begin(), "--image-root");
  RN50_CHECK(!qat || calib_flags.empty(),
             "{} with --precision int8: '{}' holds the activation ranges quantization-aware "
             "training learnt (--qat), which the INT8 model takes as they are; QAT ranges need "
             "no calibration: drop {}",
             calib_flags.empty() ? "" : calib_flags.front(), weights,
             fmt::join(calib_flags, ", "));
  RN50_CHECK(!int8 || qat || !cfg.calib_root.empty(),
             "--precision int8 calibrates on training images: pass --image-root DIR (its train/ "
             "folder is used), or export weights trained with --qat (they hold their ranges)");
  InferenceModel m;
  m.program = fold_network(desc, sd);
  const std::string& arch = m.program.arch;
  const int classes = m.program.num_classes;
  if (!cfg.classes.empty()) m.info.classes = class_names_for(cfg.classes, classes);
  m.info.precision = cfg.precision;
  m.info.resize_short = cfg.resize_short;
  m.info.crop_size = cfg.crop_size;
  m.info.mean.assign(cfg.norm.mean.begin(), cfg.norm.mean.end());
  m.info.std.assign(cfg.norm.std.begin(), cfg.norm.std.end());
  std::string calib_note;
  if (qat) {
    apply_qat_ranges(m.program, desc, sd, fmt::format("'{}'", weights));
    m.info.calibration = {"qat", 0.0, 0, ""};
    calib_note = ", int8 with the QAT ranges (no calibration)";
    out << fmt::format(
        "int8: using the activation ranges quantization-aware training learnt, from '{}' ({} "
        "quantizers, no calibration; u8 and s8 values on the training grid, step amax / 127)\n",
        weights, qat::activation_quantizers(desc).size());
  } else if (int8) {
    CalibrationConfig cc;
    cc.method = cfg.calib_method;
    cc.percentile = cfg.calib_percentile;
    Calibrator cal(m.program, cc);
    const int64_t bad =
        for_calibration_batches(cfg.calib_root, cfg.calib_images, cfg.resize_short, cfg.crop_size,
                                16, [&](const Tensor& x) { cal.add(x); }, cfg.norm);
    m.program.value_absmax = cal.value_absmax();
    m.info.calibration = {cc.method, cc.method == "percentile" ? cc.percentile : 0.0, cal.images(),
                          cfg.calib_root};
    calib_note = fmt::format(
        ", int8 calibration: {} {} images{}",
        cc.method == "max" ? "max over" : fmt::format("{} percentile over", cc.percentile),
        cal.images(), bad ? fmt::format(" ({} unreadable skipped)", bad) : "");
  }
  std::vector<std::string> written;
  for (const std::string& f : cfg.formats) {
    if (f == "rn50") {
      save_inference_model(m, cfg.output);
      written.push_back(fmt::format("{} + {}", kInferenceJsonFile, kInferenceWeightsFile));
    } else {
      save_onnx_model(m, (fs::path(cfg.output) / kOnnxFile).string(), int8);
      written.push_back(fmt::format("{} (opset 13{})", kOnnxFile, int8 ? ", QDQ int8" : ""));
    }
  }
  int convs = 0;
  for (const InferOp& op : m.program.ops) convs += op.kind == InferOp::Kind::conv;
  out << fmt::format(
      "exported {} ({} classes{}) to '{}': {} ops, {} convolutions with their BatchNorm folded, "
      "fp32 weights{} ({})\n",
      arch, classes, m.info.classes.empty() ? ", no class names" : "", cfg.output,
      m.program.ops.size(), convs, calib_note, fmt::join(written, ", "));
}

}  // namespace rn50
