// rn50 CUDA backend: what happens around cuDNN's convolution algorithm search (conv.cpp), in
// one place: which result is taken, the choices remembered for the process and, on request,
// persisted between processes and logged. Three switches, read once per process from the
// environment (what a GPU window compares in one call, scripts/gpu-window.sh):
//   RN50_CUDNN_NONDET=1     take the fastest acceptable result, deterministic or not (PyTorch's
//                           cudnn.benchmark without cudnn.deterministic); default 0: the fastest
//                           deterministic one, a non-deterministic one only when none qualifies
//   RN50_CUDNN_LOG=FILE     append one JSON line per convolution plan: direction, shapes,
//                           compute layout, where the choice came from (search, the process's
//                           memo, the cache file), algorithm, math type, workspace, time, and
//                           the fastest result the policy rejected with the reason
//   RN50_CUDNN_CACHE=FILE   persist the choices (JSON lines keyed by GPU name, cuDNN version,
//                           the non-determinism switch and the plan's key), so that a second
//                           run skips the search; lines of another GPU or cuDNN are ignored
// The graph API's choices (conv_graph.h) live in the same store under keys of their own
// (starting "graph "), so that a legacy and a graph choice never stand for one another; their
// cache and log lines carry "api":"graph" and the engine's knobs.
// No CUDA or cuDNN call here: the search itself stays in conv.cpp, these functions see its
// results as plain records (so the host-logic tests exercise them without a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rn50::cuda {

/// One result of a cudnnFind*AlgorithmEx search, as the policy sees it.
struct SearchResult {
  int algo = 0;             ///< the direction's cudnn*Algo_t
  bool ok = false;          ///< status success
  std::string status;       ///< cudnnGetErrorString of the status
  size_t ws_bytes = 0;      ///< workspace it needs
  float ms = -1.f;          ///< measured time (negative: not timed)
  int math = 0;             ///< cudnnMathType_t it was timed with
  bool math_allowed = true; ///< the math type is acceptable for the dtype and TF32 setting
  bool deterministic = true;
};

/// A choice: what the convolution runs. On the legacy API an algorithm and a math type; on the
/// graph API (RN50_CUDNN_API=graph, conv_graph.h; `graph` true) an engine and its knobs.
struct Choice {
  int algo = 0;          ///< the direction's cudnn*Algo_t; graph: the engine's global index
  size_t ws_bytes = 0;   ///< workspace it needs
  int math = 0;          ///< cudnnMathType_t it was timed with; graph: the engine's numerical
                         ///< notes as a bit mask (bit n: cudnnBackendNumericalNote_t n)
  float ms = -1.f;       ///< its time in the search that chose it (-1: unknown)
  bool deterministic = true;
  bool graph = false;    ///< a graph-API choice (persisted and logged with "api":"graph")
  /// graph: the engine config's knob choices (cudnnBackendKnobType_t, value), in the order the
  /// heuristics gave them.
  std::vector<std::pair<int64_t, int64_t>> knobs = {};
};

/// The policy's pick among `results` (the first `n`): the fastest acceptable one (ok, timed,
/// workspace <= `ws_cap`, math allowed), deterministic unless `allow_nondeterministic` or none
/// of the deterministic ones is acceptable. nullopt when none is acceptable; `rejected`
/// receives the fastest result faster than the pick that the policy turned down, with the
/// reason ("non-deterministic", "workspace", "math type"), or is left empty; `why` lists every
/// result (for the error message when nothing qualifies).
std::optional<Choice> pick_result(const std::vector<SearchResult>& results, size_t ws_cap,
                                  bool allow_nondeterministic, std::string* rejected,
                                  std::string* why);

/// RN50_CUDNN_NONDET as read once (tests may override it with set_cudnn_nondeterministic).
bool cudnn_nondeterministic();
/// Overrides RN50_CUDNN_NONDET for the searches after the call; nullopt: the environment's.
void set_cudnn_nondeterministic(std::optional<bool> v);

/// The choices of the process, shared by every backend: the memo of earlier searches and the
/// entries of RN50_CUDNN_CACHE for this GPU and cuDNN. Thread-safe.
class ChoiceStore {
 public:
  /// The process's store (reads RN50_CUDNN_CACHE and RN50_CUDNN_LOG on first use).
  static ChoiceStore& instance();
  /// Test seam (tests/cuda_seam/test_cuda_host_calls.cpp): makes instance() return `store`
  /// until called again with nullptr (the process's own store again), so that a test can give
  /// the convolutions a store on its own files, or a fresh one standing for the next process.
  /// Not synchronised with searches running meanwhile; nothing but tests calls it.
  static void set_instance_for_tests(ChoiceStore* store);
  /// A store on explicit files ("" = none), for tests.
  ChoiceStore(std::string cache_file, std::string log_file);

  /// Where a looked-up choice came from.
  enum class Source { memo, cache };
  /// The remembered choice for `key` on `gpu` (device name) with `cudnn_version`
  /// (cudnnGetVersion()); loads the cache file on the first call.
  std::optional<std::pair<Choice, Source>> find(const std::string& gpu, size_t cudnn_version,
                                                const std::string& key);
  /// Remembers a searched choice (and appends it to the cache file, if any).
  void remember(const std::string& gpu, size_t cudnn_version, const std::string& key,
                const Choice& c);
  /// Appends the log line of one plan when RN50_CUDNN_LOG is set: `op` the direction,
  /// `key` the plan's key, `layout` its compute layout, `source` "search", "memo" or "cache",
  /// `rejected` pick_result's.
  void log(const std::string& op, const std::string& key, const std::string& layout,
           const std::string& source, const Choice& c, const std::string& rejected);
  /// Entries read from the cache file (for any GPU and cuDNN), and lines that were not
  /// entries (damaged: skipped).
  int cache_loaded() const { return loaded_; }
  int cache_skipped() const { return skipped_; }

 private:
  /// The store's key of a choice: GPU, cuDNN version, the non-determinism switch, plan key.
  static std::string entry_key(const std::string& gpu, size_t cudnn_version,
                               const std::string& key);
  void load_locked();
  std::string cache_file_, log_file_;
  std::mutex mu_;
  bool cache_read_ = false;
  int loaded_ = 0, skipped_ = 0;
  std::map<std::string, std::pair<Choice, Source>> entries_;
};

}  // namespace rn50::cuda
