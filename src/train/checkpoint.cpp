#include "train/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

#include <fmt/ranges.h>

#include "core/check.h"
#include "core/fileio.h"
#include "core/safetensors.h"

namespace rn50 {

namespace fs = std::filesystem;

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

Tensor to_host(Backend& backend, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), t.layout());
  backend.copy(t, h);
  backend.synchronize();
  return h;
}

// ---- state.json ----

nlohmann::ordered_json CheckpointState::to_json() const {
  nlohmann::ordered_json j;
  j["epoch"] = epoch;
  j["global_step"] = global_step;
  j["next_lr"] = next_lr;
  j["steps_per_epoch"] = steps_per_epoch;
  j["seed"] = seed;
  j["arch"] = arch;
  j["classes"] = classes;
  j["config"] = config;
  j["version"] = version;
  if (loss_scale > 0) {
    j["loss_scale"] = loss_scale;
    j["skipped_steps"] = skipped_steps;
  }
  return j;
}

CheckpointState CheckpointState::from_json(const nlohmann::json& j, const std::string& what) {
  CheckpointState s;
  try {
    s.epoch = j.at("epoch").get<int>();
    s.global_step = j.at("global_step").get<int64_t>();
    s.next_lr = j.at("next_lr").get<double>();
    s.steps_per_epoch = j.at("steps_per_epoch").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.arch = j.value("arch", std::string());
    s.classes = j.value("classes", std::vector<std::string>{});
    if (j.contains("config")) s.config = j.at("config");
    s.version = j.value("version", std::string());
    s.loss_scale = j.value("loss_scale", 0.0);
    s.skipped_steps = j.value("skipped_steps", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    RN50_FAIL("{}: bad checkpoint state: {}", what, e.what());
  }
  return s;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kStateFile).string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    RN50_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  return CheckpointState::from_json(j, path);
}

// ---- save ----

void save_checkpoint(const std::string& dir, ResNet& model, Backend& backend,
                     const Tensor& momentum_buf, const CheckpointState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  RN50_CHECK(!ec, "cannot create checkpoint folder '{}': {}", dir, ec.message());
  // A stale state.json would mark a half-rewritten folder as complete: remove it first.
  const fs::path state_path = fs::path(dir) / kStateFile;
  fs::remove(state_path, ec);
  RN50_CHECK(!ec, "cannot remove stale '{}': {}", state_path.string(), ec.message());

  const std::map<std::string, std::string> meta{
      {"format", "pt"}, {"arch", state.arch}, {"rn50_version", state.version},
      {"epoch", std::to_string(state.epoch)}};
  save_safetensors((fs::path(dir) / kModelFile).string(), model.state_dict(), meta);

  RN50_CHECK(momentum_buf.numel() == model.num_params(),
             "momentum buffer has {} elements, the model {} parameters", momentum_buf.numel(),
             model.num_params());
  Tensor host = to_host(backend, momentum_buf);
  std::vector<std::pair<std::string, Tensor>> mom;
  for (const ParamInfo& p : model.params())
    mom.emplace_back(p.name, Tensor::view(host.data_as<float>() + p.offset, p.shape, DType::f32));
  save_safetensors((fs::path(dir) / kOptimizerFile).string(), mom, meta);

  write_file_atomic(state_path.string(), state.to_json().dump(2) + "\n");
}

// ---- resolve / load ----

std::string resolve_checkpoint_dir(const std::string& from, const std::string& last_epoch) {
  RN50_CHECK(fs::is_directory(from), "--from-checkpoint '{}': no such directory", from);
  if (fs::exists(fs::path(from) / kStateFile)) return from;
  if (last_epoch == "auto" || last_epoch.empty()) {
    long best = -1;
    for (const auto& e : fs::directory_iterator(from)) {
      if (!e.is_directory()) continue;
      const std::string name = e.path().filename().string();
      if (name.empty() || name.size() > 9 ||
          name.find_first_not_of("0123456789") != std::string::npos)
        continue;
      if (!fs::exists(e.path() / kStateFile)) continue;
      best = std::max(best, std::stol(name));
    }
    RN50_CHECK(best >= 0,
               "--from-checkpoint '{}': no epoch folder holding {} found (expected <dir>/<epoch>/"
               "{} as written by rn50 train)",
               from, kStateFile, kStateFile);
    return (fs::path(from) / std::to_string(best)).string();
  }
  RN50_CHECK(!last_epoch.empty() && last_epoch.size() <= 9 &&
                 last_epoch.find_first_not_of("0123456789") == std::string::npos,
             "--last-epoch-of-checkpoint '{}': expected 'auto' or an epoch number >= 0",
             last_epoch);
  const fs::path dir = fs::path(from) / std::to_string(std::stol(last_epoch));
  RN50_CHECK(fs::exists(dir / kStateFile),
             "--last-epoch-of-checkpoint {}: '{}' holds no {} (incomplete or missing checkpoint)",
             last_epoch, dir.string(), kStateFile);
  return dir.string();
}

CheckpointState load_checkpoint(const std::string& dir, ResNet& model, Backend& backend,
                                Tensor& momentum_buf) {
  CheckpointState st = read_checkpoint_state(dir);
  const std::string mpath = (fs::path(dir) / kModelFile).string();
  SafeTensorsFile mf = load_safetensors(mpath);
  for (const ParamInfo& p : model.params()) {
    auto it = mf.tensors.find(p.name);
    RN50_CHECK(it != mf.tensors.end(), "{}: missing key '{}'", mpath, p.name);
    RN50_CHECK(it->second.shape() == p.shape, "{}: '{}' has shape {}, the model {} (arch {})",
               mpath, p.name, shape_str(it->second.shape()), shape_str(p.shape), st.arch);
  }
  model.load_state_dict(mf.tensors, /*strict=*/true);

  const std::string opath = (fs::path(dir) / kOptimizerFile).string();
  SafeTensorsFile of = load_safetensors(opath);
  Tensor host = Tensor::empty({model.num_params()}, DType::f32);
  for (const ParamInfo& p : model.params()) {
    auto it = of.tensors.find(p.name);
    RN50_CHECK(it != of.tensors.end(), "{}: missing momentum of '{}'", opath, p.name);
    RN50_CHECK(it->second.shape() == p.shape, "{}: momentum '{}' has shape {}, the model {}",
               opath, p.name, shape_str(it->second.shape()), shape_str(p.shape));
    Tensor f = to_f32(it->second, opath + ": " + p.name);
    std::memcpy(host.data_as<float>() + p.offset, f.data(), f.nbytes());
  }
  RN50_CHECK(momentum_buf.numel() == model.num_params(),
             "momentum buffer has {} elements, the model {} parameters", momentum_buf.numel(),
             model.num_params());
  backend.copy(host, momentum_buf);
  backend.synchronize();
  return st;
}

void load_pretrained_params(const std::string& path, ResNet& model) {
  load_pretrained_params(load_safetensors(path), path, model);
}

void load_pretrained_params(const SafeTensorsFile& f, const std::string& path, ResNet& model) {
  std::map<std::string, Tensor> sd;
  std::set<std::string> expected;
  auto check = [&](const std::string& name, const std::vector<int64_t>& shape) {
    expected.insert(name);
    auto it = f.tensors.find(name);
    RN50_CHECK(it != f.tensors.end(),
               "--from-pretrained-params '{}': missing key '{}' (is it a torchvision {} "
               "state_dict?)",
               path, name, model.arch().name);
    if (it->second.shape() != shape) {
      std::string hint;
      if (name.rfind("fc.", 0) == 0 && !it->second.shape().empty())
        hint = fmt::format(" — the file has {} classes: pass --num-of-class {}",
                           it->second.shape()[0], it->second.shape()[0]);
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
  model.load_state_dict(sd, /*strict=*/true);
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

}  // namespace rn50
