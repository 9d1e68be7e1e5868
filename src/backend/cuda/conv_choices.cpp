// rn50 CUDA backend: the convolution algorithm policy, memo, cache file and log
// (conv_choices.h).
#include "backend/cuda/conv_choices.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>


namespace rn50::cuda {
namespace {

/// RN50_CUDNN_NONDET's override: -1 none, else 0 / 1.
std::atomic<int> g_nondet_override{-1};

/// ChoiceStore::set_instance_for_tests's store, or null.
std::atomic<ChoiceStore*> g_instance_override{nullptr};

/// A warning on stderr (the backends have no logger of their own).
template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  std::fprintf(stderr, "rn50: warning: %s\n", fmt::format(f, std::forward<A>(a)...).c_str());
}

/// The environment variable `name`, or "".
std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

std::optional<Choice> pick_result(const std::vector<SearchResult>& results, size_t ws_cap,
                                  bool allow_nondeterministic, std::string* rejected,
                                  std::string* why) {
  auto acceptable = [&](const SearchResult& r, bool need_det) {
    return r.ok && r.ms >= 0 && r.ws_bytes <= ws_cap && r.math_allowed &&
           (!need_det || r.deterministic);
  };
  int best = -1;
  for (bool need_det : {!allow_nondeterministic, false}) {
    for (size_t i = 0; i < results.size(); ++i)
      if (acceptable(results[i], need_det) && (best < 0 || results[i].ms < results[best].ms))
        best = static_cast<int>(i);
    if (best >= 0) break;
  }
  if (why) {
    for (const SearchResult& r : results)
      *why += fmt::format("{}algo {} math {}{}: {} ({} bytes, {} ms)", why->empty() ? "" : "; ",
                          r.algo, r.math, r.deterministic ? "" : " non-deterministic", r.status,
                          r.ws_bytes, r.ms);
  }
  if (best < 0) return std::nullopt;
  const SearchResult& b = results[static_cast<size_t>(best)];
  if (rejected) {
    // The fastest timed result faster than the pick, and what ruled it out.
    int faster = -1;
    for (size_t i = 0; i < results.size(); ++i) {
      const SearchResult& r = results[i];
      if (r.ok && r.ms >= 0 && r.ms < b.ms && (faster < 0 || r.ms < results[faster].ms))
        faster = static_cast<int>(i);
    }
    if (faster >= 0) {
      const SearchResult& f = results[static_cast<size_t>(faster)];
      const char* reason = !f.math_allowed      ? "math type"
                           : f.ws_bytes > ws_cap ? "workspace"
                                                 : "non-deterministic";
      *rejected = fmt::format("algo {} math {} {} ms {} bytes ({})", f.algo, f.math, f.ms,
                              f.ws_bytes, reason);
    }
  }
  return Choice{b.algo, b.ws_bytes, b.math, b.ms, b.deterministic};
}

bool cudnn_nondeterministic() {
  static const bool env = env_or_empty("RN50_CUDNN_NONDET") == "1";
  const int o = g_nondet_override.load(std::memory_order_relaxed);
  return o < 0 ? env : o == 1;
}

void set_cudnn_nondeterministic(std::optional<bool> v) {
  g_nondet_override.store(v ? static_cast<int>(*v) : -1, std::memory_order_relaxed);
}

ChoiceStore& ChoiceStore::instance() {
  if (ChoiceStore* o = g_instance_override.load(std::memory_order_acquire)) return *o;
  static ChoiceStore s(env_or_empty("RN50_CUDNN_CACHE"), env_or_empty("RN50_CUDNN_LOG"));
  return s;
}

void ChoiceStore::set_instance_for_tests(ChoiceStore* store) {
  g_instance_override.store(store, std::memory_order_release);
}

ChoiceStore::ChoiceStore(std::string cache_file, std::string log_file)
    : cache_file_(std::move(cache_file)), log_file_(std::move(log_file)) {}

std::string ChoiceStore::entry_key(const std::string& gpu, size_t cudnn_version,
                                   const std::string& key) {
  return fmt::format("{}|cudnn {}|nondet {}|{}", gpu, cudnn_version, cudnn_nondeterministic(),
                     key);
}

void ChoiceStore::load_locked() {
  if (cache_read_) return;
  cache_read_ = true;
  if (cache_file_.empty()) return;
  std::ifstream in(cache_file_);
  if (!in) return;  // not written yet: the first run writes it
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      Choice c{j.at("algo").get<int>(), j.at("ws_bytes").get<size_t>(), j.at("math").get<int>(),
               j.value("ms", -1.f), j.value("deterministic", true)};
      if (j.value("api", std::string("legacy")) == "graph") {
        c.graph = true;
        c.knobs = j.at("knobs").get<std::vector<std::pair<int64_t, int64_t>>>();
      }
      entries_[j.at("entry").get<std::string>()] = {c, Source::cache};
      ++loaded_;
    } catch (const std::exception&) {
      ++skipped_;  // a damaged line (a run cut while appending): searched again
    }
  }
  if (skipped_ > 0)
    warn("cuda: {} damaged line(s) in RN50_CUDNN_CACHE file {} skipped (searched again)",
             skipped_, cache_file_);
}

std::optional<std::pair<Choice, ChoiceStore::Source>> ChoiceStore::find(
    const std::string& gpu, size_t cudnn_version, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  auto it = entries_.find(entry_key(gpu, cudnn_version, key));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void ChoiceStore::remember(const std::string& gpu, size_t cudnn_version, const std::string& key,
                           const Choice& c) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string e = entry_key(gpu, cudnn_version, key);
  entries_[e] = {c, Source::memo};
  if (cache_file_.empty()) return;
  // One line per choice, appended and flushed at once: several processes (ranks) may append
  // to the same file; a torn line is skipped on reading.
  std::ofstream out(cache_file_, std::ios::app);
  nlohmann::json j{{"entry", e},     {"algo", c.algo},
                   {"ws_bytes", c.ws_bytes}, {"math", c.math},
                   {"ms", c.ms},     {"deterministic", c.deterministic}};
  if (c.graph) {
    j["api"] = "graph";
    j["knobs"] = c.knobs;
  }
  out << j.dump() << '\n';
  if (!out)
    warn("cuda: could not append to RN50_CUDNN_CACHE file {} (the choice is kept for this "
             "process only)",
             cache_file_);
}

void ChoiceStore::log(const std::string& op, const std::string& key, const std::string& layout,
                      const std::string& source, const Choice& c, const std::string& rejected) {
  if (log_file_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::ofstream out(log_file_, std::ios::app);
  nlohmann::json j{{"op", op},         {"key", key},           {"layout", layout},
                   {"source", source}, {"algo", c.algo},       {"math", c.math},
                   {"ws_bytes", c.ws_bytes}, {"ms", c.ms},     {"deterministic", c.deterministic},
                   {"nondet_allowed", cudnn_nondeterministic()}};
  if (c.graph) {
    j["api"] = "graph";
    j["knobs"] = c.knobs;
  }
  if (!rejected.empty()) j["fastest_rejected"] = rejected;
  out << j.dump() << '\n';
}

}  // namespace rn50::cuda
