// rn50 serve: the server's counters, per model, written in the Prometheus text exposition
// format (version 0.0.4; hand-written: Debian has no prometheus-cpp) under Triton's metric
// names, so dashboards built for Triton read them:
//   nv_inference_request_success / nv_inference_request_failure{reason}   requests
//   nv_inference_count / nv_inference_exec_count     images inferred / engine calls (batches):
//                                                    their ratio is the average batch size
//   nv_inference_request_duration_us, nv_inference_queue_duration_us,
//   nv_inference_compute_infer_duration_us           cumulative microseconds
//   nv_inference_pending_request_count               requests queued or running now
// plus histograms rn50_request_duration_seconds, rn50_queue_duration_seconds and
// rn50_batch_size, and process_resident_memory_bytes. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rn50::serve {

/// Why a request failed, as the reason label of nv_inference_request_failure.
enum class Failure { bad_request, not_found, too_large, queue_full, timeout, internal };
/// "BAD_REQUEST", "NOT_FOUND", "TOO_LARGE", "QUEUE_FULL", "TIMEOUT", "INTERNAL".
const char* failure_name(Failure f);
/// The reason of an HTTP status: 400 bad_request, 404 not_found, 413 too_large, 503
/// queue_full, 504 timeout, anything else internal.
Failure failure_of_status(int status);

/// A Prometheus histogram with fixed upper bounds (le), cumulative when written.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  /// The _bucket, _sum and _count lines of `name` with `labels` ("model=\"m\"").
  std::string text(const std::string& name, const std::string& labels) const;
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  ///< per bucket, not cumulative; the last is +Inf
  int64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  /// Counters for `models` (each starts at zero, so every series exists from the start).
  explicit Metrics(const std::vector<std::string>& models);
  /// Counters for one more model (a no-op for one already counted).
  void add_model(const std::string& model);

  /// A request to `model` finished: successfully, or failed for `why`; `total_us` from its
  /// arrival to its response. A request for an unknown model counts under model "".
  void request_done(const std::string& model, bool success, Failure why, double total_us);
  /// A request waited `queue_us` in `model`'s queue before its batch ran.
  void queued(const std::string& model, double queue_us);
  /// An engine call of `model` ran `images` images in `compute_us`.
  void batch_done(const std::string& model, int64_t images, double compute_us);
  /// Requests of `model` queued or running: +1 when one is queued, -1 when it is answered.
  void pending(const std::string& model, int delta);

  /// The exposition text (Content-Type text/plain; version=0.0.4).
  std::string prometheus_text() const;
  /// `model`'s figures for the web page: requests (success, failure), inferences, executions,
  /// average batch, mean queue/compute/request milliseconds, pending.
  nlohmann::json stats(const std::string& model) const;

 private:
  struct PerModel {
    int64_t success = 0;
    std::array<int64_t, 6> failure{};
    int64_t inferences = 0, executions = 0, pending = 0;
    double request_us = 0, queue_us = 0, compute_us = 0;
    Histogram request_s{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
    Histogram queue_s{{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};
    Histogram batch{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
  };
  PerModel& at(const std::string& model);
  mutable std::mutex mu_;
  std::map<std::string, PerModel> models_;
  std::vector<std::string> order_;
};

/// The resident memory of this process, bytes (/proc/self/statm), or -1.
int64_t resident_memory_bytes();

}  // namespace rn50::serve
