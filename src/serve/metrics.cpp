#include "serve/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace rn50::serve {

const char* failure_name(Failure f) {
  switch (f) {
    case Failure::bad_request: return "BAD_REQUEST";
    case Failure::not_found: return "NOT_FOUND";
    case Failure::too_large: return "TOO_LARGE";
    case Failure::queue_full: return "QUEUE_FULL";
    case Failure::timeout: return "TIMEOUT";
    case Failure::internal: return "INTERNAL";
  }
  return "INTERNAL";
}

Failure failure_of_status(int status) {
  switch (status) {
    case 400: return Failure::bad_request;
    case 404: return Failure::not_found;
    case 413: return Failure::too_large;
    case 503: return Failure::queue_full;
    case 504: return Failure::timeout;
    default: return Failure::internal;
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += v;
}

std::string Histogram::text(const std::string& name, const std::string& labels) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? fmt::format("{}", bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
  }
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
  return out;
}

Metrics::Metrics(const std::vector<std::string>& models) {
  for (const std::string& m : models) at(m);
}

void Metrics::add_model(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  at(model);
}

Metrics::PerModel& Metrics::at(const std::string& model) {
  auto it = models_.find(model);
  if (it != models_.end()) return it->second;
  order_.push_back(model);
  return models_[model];
}

void Metrics::request_done(const std::string& model, bool success, Failure why, double total_us) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& m = at(model);
  if (success) {
    ++m.success;
  } else {
    ++m.failure[static_cast<size_t>(why)];
  }
  m.request_us += total_us;
  m.request_s.observe(total_us * 1e-6);
}

void Metrics::queued(const std::string& model, double queue_us) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& m = at(model);
  m.queue_us += queue_us;
  m.queue_s.observe(queue_us * 1e-6);
}

void Metrics::batch_done(const std::string& model, int64_t images, double compute_us) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& m = at(model);
  m.inferences += images;
  ++m.executions;
  m.compute_us += compute_us;
  m.batch.observe(static_cast<double>(images));
}

void Metrics::pending(const std::string& model, int delta) {
  std::lock_guard<std::mutex> lock(mu_);
  at(model).pending += delta;
}

std::string Metrics::prometheus_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const std::string& model : order_) {
      const PerModel& m = models_.at(model);
      out += value(fmt::format("model=\"{}\",version=\"1\"", model), m);
    }
  };
  auto line = [](const char* name, auto get) {
    return [name, get](const std::string& labels, const PerModel& m) {
      return fmt::format("{}{{{}}} {}\n", name, labels, get(m));
    };
  };
  family("nv_inference_request_success", "counter", "Number of successful inference requests",
         line("nv_inference_request_success", [](const PerModel& m) { return m.success; }));
  family("nv_inference_request_failure", "counter",
         "Number of failed inference requests, by reason",
         [](const std::string& labels, const PerModel& m) {
           std::string s;
           for (size_t r = 0; r < m.failure.size(); ++r)
             s += fmt::format("nv_inference_request_failure{{{},reason=\"{}\"}} {}\n", labels,
                              failure_name(static_cast<Failure>(r)), m.failure[r]);
           return s;
         });
  family("nv_inference_count", "counter", "Number of images inferred",
         line("nv_inference_count", [](const PerModel& m) { return m.inferences; }));
  family("nv_inference_exec_count", "counter",
         "Number of engine executions (batches); count / exec_count = average batch size",
         line("nv_inference_exec_count", [](const PerModel& m) { return m.executions; }));
  family("nv_inference_request_duration_us", "counter",
         "Cumulative request duration from arrival to response, microseconds",
         line("nv_inference_request_duration_us",
              [](const PerModel& m) { return static_cast<int64_t>(m.request_us); }));
  family("nv_inference_queue_duration_us", "counter",
         "Cumulative time requests waited in the batching queue, microseconds",
         line("nv_inference_queue_duration_us",
              [](const PerModel& m) { return static_cast<int64_t>(m.queue_us); }));
  family("nv_inference_compute_infer_duration_us", "counter",
         "Cumulative engine execution time, microseconds",
         line("nv_inference_compute_infer_duration_us",
              [](const PerModel& m) { return static_cast<int64_t>(m.compute_us); }));
  family("nv_inference_pending_request_count", "gauge",
         "Requests queued or running, not yet answered",
         line("nv_inference_pending_request_count", [](const PerModel& m) { return m.pending; }));
  family("rn50_request_duration_seconds", "histogram", "Request duration, arrival to response",
         [](const std::string& labels, const PerModel& m) {
           return m.request_s.text("rn50_request_duration_seconds", labels);
         });
  family("rn50_queue_duration_seconds", "histogram", "Time a request waited for its batch",
         [](const std::string& labels, const PerModel& m) {
           return m.queue_s.text("rn50_queue_duration_seconds", labels);
         });
  family("rn50_batch_size", "histogram", "Images per engine execution",
         [](const std::string& labels, const PerModel& m) {
           return m.batch.text("rn50_batch_size", labels);
         });
  out += "# HELP process_resident_memory_bytes Resident memory size in bytes\n"
         "# TYPE process_resident_memory_bytes gauge\n";
  out += fmt::format("process_resident_memory_bytes {}\n", resident_memory_bytes());
  return out;
}

nlohmann::json Metrics::stats(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json j;
  auto it = models_.find(model);
  if (it == models_.end()) return j;
  const PerModel& m = it->second;
  int64_t failures = 0;
  for (int64_t f : m.failure) failures += f;
  const int64_t requests = m.success + failures;
  j["model"] = model;
  j["requests_success"] = m.success;
  j["requests_failure"] = failures;
  j["inference_count"] = m.inferences;
  j["execution_count"] = m.executions;
  j["average_batch"] = m.executions ? static_cast<double>(m.inferences) / m.executions : 0.0;
  j["mean_request_ms"] = requests ? m.request_us * 1e-3 / static_cast<double>(requests) : 0.0;
  j["mean_queue_ms"] = m.queue_s.count() ? m.queue_us * 1e-3 / m.queue_s.count() : 0.0;
  j["mean_compute_ms"] = m.executions ? m.compute_us * 1e-3 / m.executions : 0.0;
  j["pending"] = m.pending;
  j["resident_memory_bytes"] = resident_memory_bytes();
  return j;
}

int64_t resident_memory_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return -1;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace rn50::serve
