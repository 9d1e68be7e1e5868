// rn50: `rn50 serve` — exported models behind KServe's Open Inference Protocol v2 (REST), the
// protocol NVIDIA Triton speaks, with Triton's dynamic batching, health, metrics and extensions
// (binary tensors, classification), a one-image /classify endpoint and a web page.
//
// Endpoints: GET / (the web page), GET /v2, /v2/health/live, /v2/health/ready,
// /v2/models/{m}, /v2/models/{m}/ready, /v2/models/{m}/stats, /metrics (Prometheus text),
// POST /v2/models/{m}/infer, POST /v2/models/{m}/classify. Errors are {"error": "..."} with a
// 4xx (the request's fault) or 503/504 (queue full, deadline passed); the server keeps serving.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace rn50 {

/// Options of a server (the flags of `rn50 serve`).
struct ServeOptions {
  /// --model: exported model folders (rn50 export --output), served under their folder names.
  std::vector<std::string> models;
  /// --model-repository: a folder whose sub-folders are exported models, each served under its
  /// sub-folder's name (Triton's model repository).
  std::string model_repository;
  std::string host = "127.0.0.1";  ///< --host
  int port = 8000;                 ///< --port; 0 = any free port (Server::port() tells which)
  std::string device = "auto";     ///< --device: the engines' (cpu, cuda[:N], auto)
  /// --precision: the engines' (EngineOptions::precision); empty = each model's own.
  std::string precision;
  int max_batch_size = 32;  ///< --max-batch-size: images per engine call
  /// --max-queue-delay-us: how long the oldest queued request waits for a fuller batch.
  int64_t max_queue_delay_us = 2000;
  int instances = 1;  ///< --instances: engines per model, each run by its own batching thread
  /// --max-queue-size: requests queued per model before new ones get 503; 0 = unbounded.
  int max_queue_size = 256;
  /// --request-timeout-ms: a request still queued this long after it arrived is answered 504
  /// at once (one running in a batch finishes); 0 = no deadline.
  int64_t request_timeout_ms = 0;
  /// --max-request-bytes: larger bodies get 413 before they are read (Triton's 64 MiB).
  int64_t max_request_bytes = int64_t(64) << 20;
  int decode_threads = 0;     ///< --decode-threads: image decode workers; 0 = the cores
  bool log_requests = false;  ///< --log-requests: one stderr line per request
  /// Seconds a connection may take to send its request (headers and body) before it is closed.
  int read_timeout_s = 5;
  /// HTTP worker threads: the connections served at once (idle keep-alive ones included).
  int http_threads = 512;
};

/// A server. Construction checks the options and binds the port (throws rn50::Error naming
/// the flag, or --host/--port when it cannot listen there); start() serves on background
/// threads until stop().
class Server {
 public:
  explicit Server(const ServeOptions& options);
  ~Server();  ///< stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The bound port (the chosen one for port 0).
  int port() const;
  /// Starts answering, then loads every model (/v2/health/ready answers 503 meanwhile, and the
  /// model endpoints 503 "loading"); returns once all are loaded and the server is ready.
  /// Throws rn50::Error naming the folder or flag when a model cannot be served (the server
  /// is stopped then).
  void start();
  /// Stops accepting connections, marks itself not ready, finishes the requests in flight
  /// (queued and running batches), then returns. Idempotent.
  void stop();
  /// The names of the served models, in order (none before start() has loaded them).
  std::vector<std::string> model_names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `rn50 serve`: a Server that prints "rn50 serve: listening on http://HOST:PORT" (and the
/// models) to stdout, serves until SIGTERM or SIGINT, then drains and returns 0. Throws
/// rn50::Error when the server cannot start.
int run_serve(const ServeOptions& options);

}  // namespace rn50
