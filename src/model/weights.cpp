// rn50: weights in torchvision's format — safetensors files keyed by state_dict names — loaded
// into a ResNet, with dtype conversion and architecture inference from the keys.
#include "model/weights.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

#include "core/check.h"
#include "core/fileio.h"
#include "core/json_value.h"
#include "model/convert_weights.h"

namespace rn50 {

namespace {


std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool is_num_batches_tracked(const std::string& name) {
  static const std::string suffix = "num_batches_tracked";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Tensor to_f32(const Tensor& t, const std::string& what) {
  RN50_CHECK(t.is_cpu(), "{}: expected a host tensor", what);
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32, t.layout());
  float* o = out.data_as<float>();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(t.data_as<double>()[i]);
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) o[i] = half_to_float(t.data_as<uint16_t>()[i]);
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits = static_cast<uint32_t>(t.data_as<uint16_t>()[i]) << 16;
        std::memcpy(&o[i], &bits, 4);
      }
      break;
    default:
      RN50_FAIL("{}: dtype {} cannot be converted to F32", what, dtype_name(t.dtype()));
  }
  return out;
}

Tensor with_input_channels(const Tensor& w, int64_t channels) {
  RN50_CHECK(w.is_cpu() && w.dtype() == DType::f32 && w.ndim() == 4 &&
                 (w.c() == 3 || w.c() == 4) && (channels == 3 || channels == 4),
             "stem conv weight {}: cannot give it {} input channels (3 <-> 4 only)", w.str(),
             channels);
  const int64_t K = w.n(), C = w.c(), R = w.h(), S = w.w();
  Tensor out = Tensor::zeros({K, channels, R, S}, DType::f32, Layout::NCHW);
  const float* s = w.data_as<const float>();
  float* d = out.data_as<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < std::min(C, channels); ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t x = 0; x < S; ++x) d[out.offset4(k, c, r, x)] = s[w.offset4(k, c, r, x)];
  return out;
}

Tensor to_host(Backend& backend, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), t.layout());
  backend.copy(t, h);
  backend.synchronize();
  return h;
}

std::string weights_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) {
    // DLE Paddle names weights by their path prefix (<dir>/<epoch>/<--model-prefix>, the file
    // being <prefix>.pdparams): <prefix>.safetensors is rn50's file of that name.
    if (fs::is_regular_file(path + ".safetensors")) return path + ".safetensors";
    if (fs::is_regular_file(path + ".pdparams")) {
      const std::string hint = foreign_weights_hint(path + ".pdparams", flag);
      RN50_CHECK(hint.empty(), "{}", hint);
    }
    RN50_FAIL("{} '{}': no such file or folder (nor '{}.safetensors', as a DLE-style path "
              "prefix)",
              flag, path, path);
  }
  if (!fs::is_directory(path)) {
    const std::string hint = foreign_weights_hint(path, flag);
    RN50_CHECK(hint.empty(), "{}", hint);
    return path;
  }
  // An rn50 epoch folder names its weights file in state.json (--model-prefix P writes
  // P.safetensors); else model.safetensors; else the folder's only weights file (not an
  // optimizer state: *.optimizer.safetensors).
  const fs::path state = fs::path(path) / "state.json";
  if (fs::is_regular_file(state)) {
    try {
      const nlohmann::json j = parse_json_limited(read_file(state.string()), state.string(),
                                                  /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("model_file") && j["model_file"].is_string()) {
        const std::string name = j["model_file"].get<std::string>();
        if (name.find_first_of("/\\") == std::string::npos &&
            fs::is_regular_file(fs::path(path) / name))
          return (fs::path(path) / name).string();
      }
    } catch (const Error&) {  // not ours to judge here: the checkpoint reader names it
    }
  }
  const fs::path file = fs::path(path) / "model.safetensors";
  if (fs::is_regular_file(file)) return file.string();
  std::vector<std::string> others, weights;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".safetensors") continue;
    others.push_back(name);
    if (name.size() < 22 || name.compare(name.size() - 22, 22, ".optimizer.safetensors") != 0)
      weights.push_back(name);
  }
  if (weights.size() == 1) return (fs::path(path) / weights.front()).string();
  std::sort(others.begin(), others.end());
  RN50_FAIL("{} '{}' is a folder without model.safetensors{}: pass the weights file itself (a "
            "safetensors file with torchvision's state_dict keys), or a folder holding "
            "model.safetensors or one <prefix>.safetensors",
            flag, path,
            others.empty() ? std::string()
                           : fmt::format(" (it holds {})", fmt::join(others, ", ")));
}

SafeTensorsFile load_weights_file(const std::string& file) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(file).parent_path(), name = fs::path(file).filename();
  for (const char* sidecar : {"state.json", "model.json"}) {
    const fs::path side = dir / sidecar;
    if (!fs::is_regular_file(side)) continue;
    // A sidecar that does not parse is not ours to judge here (its own reader names it): the
    // weights are then read unchecked, as files from elsewhere are.
    nlohmann::json j;
    try {
      j = parse_json_limited(read_file(side.string()), side.string(), /*allow_exceptions=*/false);
    } catch (const Error&) {
      continue;
    }
    if (!j.is_object()) continue;
    const nlohmann::json* d = nullptr;
    if (j.contains("files") && j["files"].is_object() && j["files"].contains(name.string()))
      d = &j["files"][name.string()];
    else if (name == "model.safetensors" && j.contains("weights_digest"))
      d = &j["weights_digest"];
    if (d)
      return load_safetensors(file, FileDigest::from_json(*d, side.string()), side.string());
  }
  return load_safetensors(file);
}

std::string load_pretrained_params(const std::string& path, ResNet& model, bool strict_classes) {
  const std::string file = weights_file(path, "--from-pretrained-params");
  return load_pretrained_params(load_weights_file(file), file, model, strict_classes);
}

std::string load_pretrained_params(const SafeTensorsFile& f, const std::string& path,
                                   ResNet& model, bool strict_classes) {
  std::map<std::string, Tensor> sd;
  std::set<std::string> expected;
  // The classifier of another class count (fine-tuning 1000-class weights on 10 classes): the
  // model keeps its own initialisation of fc.weight and fc.bias, as torchvision/timm users
  // replace model.fc and DLE Paddle's load_params skips parameters of another shape.
  int64_t file_classes = -1;
  auto other_classes = [&](const std::string& name, const Tensor& t,
                           const std::vector<int64_t>& shape) {
    if (name == "fc.weight")
      return t.ndim() == 2 && shape.size() == 2 && t.dim(1) == shape[1] && t.dim(0) != shape[0];
    if (name == "fc.bias") return t.ndim() == 1 && shape.size() == 1 && t.dim(0) != shape[0];
    return false;
  };
  auto check = [&](const std::string& name, const std::vector<int64_t>& shape) {
    expected.insert(name);
    auto it = f.tensors.find(name);
    RN50_CHECK(it != f.tensors.end(),
               "--from-pretrained-params '{}': missing key '{}' (is it a torchvision {} "
               "state_dict?)",
               path, name, model.arch().name);
    const Tensor& t = it->second;  // a stem conv of 3 <-> 4 input channels: load_state_dict adapts
    const bool stem_channels = name == "conv1.weight" && t.ndim() == 4 && shape.size() == 4 &&
                               (t.dim(1) == 3 || t.dim(1) == 4) && t.dim(0) == shape[0] &&
                               t.dim(2) == shape[2] && t.dim(3) == shape[3];
    if (!strict_classes && other_classes(name, t, shape)) {
      file_classes = t.dim(0);
      return;  // the model's own initialisation stays
    }
    if (it->second.shape() != shape && !stem_channels) {
      std::string hint;
      if (name.rfind("fc.", 0) == 0 && !it->second.shape().empty())
        hint = fmt::format(" — the file has {} classes: pass --num-of-class {}{}",
                           it->second.shape()[0], it->second.shape()[0],
                           strict_classes ? " (or leave out --strict-pretrained to fine-tune "
                                            "with fc re-initialised)"
                                          : "");
      RN50_FAIL("--from-pretrained-params '{}': key '{}' has shape {} but the {} model expects "
                "{}{}",
                path, name, shape_str(it->second.shape()), model.arch().name, shape_str(shape),
                hint);
    }
    sd[name] = to_f32(it->second, path + ": " + name);
  };
  for (const ParamInfo& p : model.params()) check(p.name, p.shape);
  for (const BufferInfo& b : model.buffers())
    if (!is_num_batches_tracked(b.name)) check(b.name, b.shape);
  std::vector<std::string> extra;
  for (const auto& [name, t] : f.tensors)
    if (!expected.count(name) && !is_num_batches_tracked(name)) extra.push_back(name);
  if (!extra.empty())
    std::cerr << fmt::format("warning: --from-pretrained-params '{}': ignoring {} unexpected "
                             "key(s): {}\n",
                             path, extra.size(), fmt::join(extra, ", "));
  std::string note;
  if (file_classes >= 0) {
    for (auto& [name, t] : model.state_dict())
      if (name == "fc.weight" || name == "fc.bias") sd[name] = t;
    note = fmt::format("fc: {} -> {} classes, re-initialised (--strict-pretrained refuses "
                       "instead)",
                       file_classes, model.options().num_classes);
  }
  model.load_state_dict(sd, /*strict=*/true);
  return note;
}

std::string infer_arch(const std::map<std::string, Tensor>& sd, const std::string& what) {
  const bool bottleneck = sd.count("layer1.0.conv3.weight") > 0;
  std::array<int, 4> layers{};
  for (int s = 0; s < 4; ++s)
    while (sd.count(fmt::format("layer{}.{}.conv1.weight", s + 1, layers[s]))) ++layers[s];
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}) {
    ArchSpec a = arch_from_name(name);
    if (a.bottleneck == bottleneck && a.layers == layers) return name;
  }
  RN50_FAIL("{}: cannot infer the architecture from its keys ({} blocks per stage {}, {}); pass "
            "--arch",
            what, bottleneck ? "bottleneck" : "basic", shape_str({layers[0], layers[1],
                                                                  layers[2], layers[3]}),
            sd.empty() ? "no tensors" : "no known ResNet matches");
}

int classes_of(const SafeTensorsFile& file, const std::string& path, int num_classes) {
  if (num_classes > 0) return num_classes;
  auto it = file.tensors.find("fc.weight");
  RN50_CHECK(it != file.tensors.end() && it->second.ndim() == 2,
             "'{}': no 2-D 'fc.weight' to take the class count from (pass --num-of-class)", path);
  return static_cast<int>(it->second.dim(0));
}

std::map<std::string, Tensor> state_dict_f32(const SafeTensorsFile& file, const std::string& path,
                                             int num_classes) {
  std::map<std::string, Tensor> sd;
  for (const auto& [k, t] : file.tensors) {
    if (t.dtype() == DType::i64) continue;  // num_batches_tracked
    sd.emplace(k, to_f32(t, fmt::format("'{}' in '{}'", k, path)));
  }
  // A checkpoint of --image-shape 4,H,W: the inference graph takes RGB (exact, see
  // with_input_channels).
  if (auto c = sd.find("conv1.weight");
      c != sd.end() && c->second.ndim() == 4 && c->second.c() == 4)
    c->second = with_input_channels(c->second, 3);
  auto fc = sd.find("fc.weight");
  RN50_CHECK(fc == sd.end() || fc->second.ndim() != 2 || fc->second.dim(0) == num_classes,
             "--from-pretrained-params '{}': fc.weight has {} classes, the model {} (pass "
             "--num-of-class {})",
             path, fc->second.dim(0), num_classes, fc->second.dim(0));
  return sd;
}

}  // namespace rn50
