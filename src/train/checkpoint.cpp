#include "train/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

#include <fmt/ranges.h>

#include "core/check.h"
#include "core/fileio.h"
#include "core/json_value.h"
#include "core/safetensors.h"

namespace rn50 {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

std::pair<std::string, std::string> checkpoint_file_names(const std::string& prefix) {
  if (prefix == "model") return {kModelFile, kOptimizerFile};
  return {prefix + ".safetensors", prefix + ".optimizer.safetensors"};
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
  j["model_file"] = model_file;
  j["optimizer_file"] = optimizer_file;
  if (!files.empty()) {
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    for (const auto& [name, d] : files) f[name] = d.to_json();
    j["files"] = f;
  }
  return j;
}

CheckpointState CheckpointState::from_json(const nlohmann::json& j, const std::string& what) {
  CheckpointState s;
  RN50_CHECK(j.is_object(), "{}: bad checkpoint state: not a JSON object", what);
  // Every field is type- and range-checked (json_as): a damaged file gives an error naming it.
  auto need = [&](const char* key) -> const nlohmann::json& {
    RN50_CHECK(j.contains(key), "{}: bad checkpoint state: '{}' is missing", what, key);
    return j[key];
  };
  const std::string in = what + ": bad checkpoint state";
  s.epoch = json_as<int>(need("epoch"), in + ": 'epoch'");
  s.global_step = json_as<int64_t>(need("global_step"), in + ": 'global_step'");
  s.next_lr = json_as<double>(need("next_lr"), in + ": 'next_lr'");
  s.steps_per_epoch = json_as<int64_t>(need("steps_per_epoch"), in + ": 'steps_per_epoch'");
  s.seed = json_as<uint64_t>(need("seed"), in + ": 'seed'");
  s.arch = json_get_or(j, "arch", in, std::string());
  s.classes = json_get_or(j, "classes", in, std::vector<std::string>{});
  if (j.contains("config")) s.config = j["config"];
  s.version = json_get_or(j, "version", in, std::string());
  s.loss_scale = json_get_or(j, "loss_scale", in, 0.0);
  s.skipped_steps = json_get_or(j, "skipped_steps", in, int64_t{0});
  s.model_file = json_get_or(j, "model_file", in, std::string(kModelFile));
  s.optimizer_file = json_get_or(j, "optimizer_file", in, std::string(kOptimizerFile));
  for (const std::string* f : {&s.model_file, &s.optimizer_file})
    RN50_CHECK(!f->empty() && f->find('/') == std::string::npos && *f != "." && *f != "..",
               "{}: file name '{}' must be a plain name inside the epoch folder", what, *f);
  if (j.contains("files")) {
    RN50_CHECK(j["files"].is_object(), "{}: \"files\" must be an object", in);
    for (const auto& [name, d] : j["files"].items())
      s.files[name] = FileDigest::from_json(d, fmt::format("{} files.{}", what, name));
  }
  return s;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kStateFile).string();
  nlohmann::json j;
  try {
    j = parse_json_limited(read_file(path), path);
  } catch (const nlohmann::json::exception& e) {
    RN50_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  return CheckpointState::from_json(j, path);
}

// ---- save ----

void save_checkpoint(const std::string& dir, ResNet& model, SgdOptimizer& optimizer,
                     const CheckpointState& state) {
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
  CheckpointState st = state;
  st.files[st.model_file] =
      save_safetensors((fs::path(dir) / st.model_file).string(), model.state_dict(), meta);
  st.files[st.optimizer_file] = save_safetensors((fs::path(dir) / st.optimizer_file).string(),
                                                 optimizer.state_dict(), meta);
  // Written last: a folder holds state.json only once both files are complete.
  write_file_atomic(state_path.string(), st.to_json().dump(2) + "\n");
}

// ---- resolve / load ----

namespace {

/// Whether `name` is an epoch folder's name (a non-negative integer of at most 9 digits).
bool is_epoch_name(const std::string& name) {
  return !name.empty() && name.size() <= 9 &&
         name.find_first_not_of("0123456789") == std::string::npos;
}

/// The newest epoch sub-folder of `dir` holding state.json, or -1.
long newest_epoch(const fs::path& dir) {
  long best = -1;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && is_epoch_name(name) && fs::exists(e.path() / kStateFile))
      best = std::max(best, std::stol(name));
  }
  return best;
}

/// The folder holding the epoch folders: `from` itself (<checkpoint-dir>/<arch>, as rn50 train
/// writes it) or, for the --checkpoint-dir given to training, its <arch> sub-folder (`arch`
/// when given, else the only sub-folder holding epoch folders).
fs::path epochs_folder(const fs::path& from, const std::string& arch) {
  if (newest_epoch(from) >= 0) return from;
  if (!arch.empty() && fs::is_directory(from / arch) && newest_epoch(from / arch) >= 0)
    return from / arch;
  std::vector<std::string> archs;
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_directory() && !is_epoch_name(e.path().filename().string()) &&
        newest_epoch(e.path()) >= 0)
      archs.push_back(e.path().filename().string());
  std::sort(archs.begin(), archs.end());
  RN50_CHECK(!archs.empty(),
             "--from-checkpoint '{}': no checkpoint found (expected <dir>/<epoch>/{} or "
             "<dir>/<arch>/<epoch>/{}, as rn50 train --checkpoint-dir <dir> writes them)",
             from.string(), kStateFile, kStateFile);
  RN50_CHECK(archs.size() == 1,
             "--from-checkpoint '{}' holds checkpoints of {} architectures ({}){}: pass "
             "'{}/<arch>'",
             from.string(), archs.size(), fmt::join(archs, ", "),
             arch.empty() ? std::string() : fmt::format(", none of --arch {}", arch),
             from.string());
  return from / archs.front();
}

}  // namespace

std::string resolve_checkpoint_dir(const std::string& from, const std::string& last_epoch,
                                   const std::string& arch, bool none_ok) {
  RN50_CHECK(fs::is_directory(from), "--from-checkpoint '{}': no such directory", from);
  if (fs::exists(fs::path(from) / kStateFile)) return from;
  if (none_ok && (last_epoch == "auto" || last_epoch.empty())) {
    // No complete epoch folder in `from` nor in any sub-folder: nothing to resume from.
    bool any = newest_epoch(from) >= 0;
    for (const auto& e : fs::directory_iterator(from))
      any = any || (e.is_directory() && newest_epoch(e.path()) >= 0);
    if (!any) return "";
  }
  const fs::path epochs = epochs_folder(from, arch);
  if (last_epoch == "auto" || last_epoch.empty())
    return (epochs / std::to_string(newest_epoch(epochs))).string();
  RN50_CHECK(is_epoch_name(last_epoch),
             "--last-epoch-of-checkpoint '{}': expected 'auto' or an epoch number >= 0",
             last_epoch);
  const fs::path dir = epochs / std::to_string(std::stol(last_epoch));
  RN50_CHECK(fs::exists(dir / kStateFile),
             "--last-epoch-of-checkpoint {}: '{}' holds no {} (incomplete or missing checkpoint)",
             last_epoch, dir.string(), kStateFile);
  return dir.string();
}

CheckpointState load_checkpoint(const std::string& dir, ResNet& model, SgdOptimizer& optimizer) {
  CheckpointState st = read_checkpoint_state(dir);
  const std::string mpath = (fs::path(dir) / st.model_file).string();
  const std::string spath = (fs::path(dir) / kStateFile).string();
  auto digest = [&](const std::string& f) {
    auto it = st.files.find(f);
    return it == st.files.end() ? FileDigest{} : it->second;
  };
  SafeTensorsFile mf = load_safetensors(mpath, digest(st.model_file), spath);
  for (const ParamInfo& p : model.params()) {
    auto it = mf.tensors.find(p.name);
    RN50_CHECK(it != mf.tensors.end(), "{}: missing key '{}'", mpath, p.name);
    if (p.name == "conv1.weight" && it->second.ndim() == 4 && p.shape.size() == 4 &&
        it->second.dim(1) != p.shape[1])
      RN50_FAIL("{}: the checkpoint was trained with {} input channels (--image-shape {},H,W), "
                "this run has {}: pass the same --image-shape to resume or evaluate it",
                mpath, it->second.dim(1), it->second.dim(1), p.shape[1]);
    RN50_CHECK(it->second.shape() == p.shape, "{}: '{}' has shape {}, the model {} (arch {})",
               mpath, p.name, shape_str(it->second.shape()), shape_str(p.shape), st.arch);
  }
  const std::string opath = (fs::path(dir) / st.optimizer_file).string();
  SafeTensorsFile of = load_safetensors(opath, digest(st.optimizer_file), spath);
  model.load_state_dict(mf.tensors, /*strict=*/true);
  optimizer.load_state_dict(of.tensors, opath);
  return st;
}

}  // namespace rn50
