// rn50 serve: the HTTP server (cpp-httplib, Debian's libcpp-httplib-dev) — routes, errors,
// readiness, draining — around the batchers (serve/batcher.h), the preprocessing
// (serve/served_model.h), the protocol (serve/protocol.h) and the metrics (serve/metrics.h).
#include <fmt/format.h>
#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <omp.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "core/check.h"
#include "model/logits.h"
#include "rn50/config.h"
#include "rn50/serve.h"
#include "serve/batcher.h"
#include "serve/metrics.h"
#include "serve/protocol.h"
#include "serve/served_model.h"
#include "serve/web_page.h"

namespace rn50 {

using serve::Clock;
using serve::HttpError;
using json = nlohmann::json;

namespace {

/// The request threads (httplib's pool) run their OpenMP regions (normalize_u8) on one thread:
/// teams of their own would spin on the cores the engine's threads compute on.
void single_threaded_openmp() {
  static thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

/// Marks a request expected by its model's batcher until it is submitted (or fails before).
class Expected {
 public:
  explicit Expected(serve::Batcher& b) : b_(b) { b_.expect(); }
  ~Expected() {
    if (!submitted_) b_.unexpect();
  }
  void submit(const std::shared_ptr<serve::Job>& job) {
    submitted_ = true;  // submit() ends the expectation even when it throws
    b_.submit(job);
  }

 private:
  serve::Batcher& b_;
  bool submitted_ = false;
};

std::vector<std::string> names_of(const std::vector<std::unique_ptr<serve::ServedModel>>& ms) {
  std::vector<std::string> n;
  for (const auto& m : ms) n.push_back(m->name);
  return n;
}

double micros_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

void json_reply(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace

struct Server::Impl {
  explicit Impl(const ServeOptions& o);
  void routes();
  /// Runs `handle` for a request of `model`, answering an HttpError (or any other exception,
  /// as 500) with its status and {"error": ...}; an inference request (`inference`) is counted
  /// in the metrics, under model "" when it names no served model.
  template <class F>
  void answer(const std::string& model, httplib::Response& res, bool inference, F&& handle);
  serve::ServedModel& model(const std::string& name);
  void infer(const httplib::Request& req, httplib::Response& res);
  void classify(const httplib::Request& req, httplib::Response& res);
  /// Queues `images` (n of them, arrived at `arrived`) for `m`'s batcher and waits for their
  /// logits; counts the request as pending meanwhile.
  serve::JobResult run_job(serve::ServedModel& m, Expected& expected, Tensor images, int64_t n,
                           Clock::time_point arrived);
  json metadata(const serve::ServedModel& m) const;

  /// Loads the models (the listener already answers: not ready meanwhile) and their batchers.
  void load();

  ServeOptions opt;
  /// Written by load() before `loaded` is set, read only after it is seen set.
  std::atomic<bool> loaded{false};
  std::vector<std::unique_ptr<serve::ServedModel>> models;
  std::map<std::string, serve::ServedModel*> by_name;
  serve::Metrics metrics;
  std::unique_ptr<Backend> host;  ///< oneDNN: normalize_u8, as rn50 predict
  serve::DecodePool decode;
  std::map<std::string, std::unique_ptr<serve::Batcher>> batchers;
  httplib::Server http;
  std::thread listener;
  std::atomic<bool> ready{false};
  bool stopped = false;
  int port = 0;
  int listen_fd = -1;  ///< the listening socket (its backlog raised after httplib binds it)
};

Server::Impl::Impl(const ServeOptions& o)
    : opt(o),
      metrics({}),
      host(make_backend("onednn")),
      decode(o.decode_threads) {
  RN50_CHECK(opt.max_batch_size >= 1, "--max-batch-size {}: must be >= 1", opt.max_batch_size);
  RN50_CHECK(opt.max_queue_delay_us >= 0, "--max-queue-delay-us {}: must be >= 0",
             opt.max_queue_delay_us);
  RN50_CHECK(opt.max_queue_size >= 0, "--max-queue-size {}: must be >= 0 (0: unbounded)",
             opt.max_queue_size);
  RN50_CHECK(opt.request_timeout_ms >= 0, "--request-timeout-ms {}: must be >= 0 (0: none)",
             opt.request_timeout_ms);
  RN50_CHECK(opt.max_request_bytes >= 1024, "--max-request-bytes {}: must be >= 1024",
             opt.max_request_bytes);
  const int threads = std::max(4, opt.http_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(static_cast<size_t>(opt.max_request_bytes));
  http.set_read_timeout(opt.read_timeout_s, 0);
  http.set_write_timeout(opt.read_timeout_s, 0);
  http.set_keep_alive_timeout(opt.read_timeout_s);
  http.set_keep_alive_max_count(100000);
  http.set_tcp_nodelay(true);
  routes();
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of new
  // connections would see SYNs dropped and retried a second later. The socket is taken as it
  // is made, and listen() is called again with the system's maximum once it is bound.
  http.set_socket_options([this](socket_t sock) {
    if (listen_fd < 0) listen_fd = sock;
    httplib::default_socket_options(sock);
  });
  port = opt.port == 0 ? http.bind_to_any_port(opt.host)
                       : (http.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  RN50_CHECK(port > 0,
             "--host {} --port {}: cannot listen there (the port is in use, or the address is "
             "not this machine's); pick another --port, or --port 0 for any free one",
             opt.host, opt.port);
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
}

void Server::Impl::load() {
  models = serve::load_models(opt);
  for (auto& m : models) {
    by_name[m->name] = m.get();
    metrics.add_model(m->name);
    batchers[m->name] = std::make_unique<serve::Batcher>(*m, opt, metrics);
  }
  loaded = true;
}

serve::ServedModel& Server::Impl::model(const std::string& name) {
  if (!loaded) throw HttpError(503, "the models are still loading; retry when /v2/health/ready");
  auto it = by_name.find(name);
  if (it == by_name.end())
    throw HttpError(404, fmt::format("unknown model '{}' (served: {})", name,
                                     fmt::join(names_of(models), ", ")));
  return *it->second;
}

template <class F>
void Server::Impl::answer(const std::string& model_name, httplib::Response& res, bool inference,
                          F&& handle) {
  const Clock::time_point t0 = Clock::now();
  const std::string counted = loaded && by_name.count(model_name) ? model_name : std::string();
  try {
    handle();
    if (inference)
      metrics.request_done(counted, true, serve::Failure::internal, micros_since(t0));
  } catch (const HttpError& e) {
    json_reply(res, e.status(), json{{"error", e.what()}});
    if (inference)
      metrics.request_done(counted, false, serve::failure_of_status(e.status()),
                           micros_since(t0));
  } catch (const std::exception& e) {
    json_reply(res, 500, json{{"error", e.what()}});
    if (inference) metrics.request_done(counted, false, serve::Failure::internal, micros_since(t0));
  }
}

json Server::Impl::metadata(const serve::ServedModel& m) const {
  const int64_t c = m.crop();
  json j;
  j["name"] = m.name;
  j["versions"] = {"1"};
  j["platform"] = "rn50";
  j["inputs"] = {{{"name", "input"}, {"datatype", "FP32"}, {"shape", {-1, 3, c, c}}}};
  j["outputs"] = {{{"name", "logits"}, {"datatype", "FP32"}, {"shape", {-1, m.num_classes}}}};
  j["parameters"] = {
      {"arch", m.arch},
      {"precision", m.precision},
      {"device", m.device},
      {"max_batch_size", opt.max_batch_size},
      {"classes", m.info.classes.size()},
      {"preprocessing", {{"resize_short", m.info.resize_short}, {"crop_size", c},
                         {"mean", m.info.mean}, {"std", m.info.std}}},
      {"accepted_inputs", {"FP32 [N,3,crop,crop] normalised, NCHW",
                           "UINT8 [N,H,W,3] RGB pixels (resized, cropped, normalised here)",
                           "BYTES [N] JPEG or PNG files (decoded and preprocessed here)"}}};
  return j;
}

void Server::Impl::infer(const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point arrived = Clock::now();
  serve::ServedModel& m = model(req.matches[1]);
  single_threaded_openmp();
  Expected expected(*batchers.at(m.name));
  std::optional<int64_t> header_length;
  if (req.has_header("Inference-Header-Content-Length")) {
    const std::string v = req.get_header_value("Inference-Header-Content-Length");
    try {
      size_t used = 0;
      header_length = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      throw HttpError(400, fmt::format("Inference-Header-Content-Length '{}' is not a number", v));
    }
  }
  const serve::InferRequest r =
      serve::parse_infer_request(req.body, header_length, opt.max_batch_size);
  const serve::JobResult jr = run_job(m, expected, serve::request_images(r.input, m, decode, *host),
                                      r.input.batch(), arrived);
  const serve::InferResponse out = serve::make_infer_response(
      m.name, r, jr.logits, r.input.batch(), m.num_classes, m.info.classes);
  res.status = 200;
  if (out.header_length >= 0) {
    res.set_header("Inference-Header-Content-Length", std::to_string(out.header_length));
    res.set_content(out.body, "application/octet-stream");
  } else {
    res.set_content(out.body, "application/json");
  }
}

serve::JobResult Server::Impl::run_job(serve::ServedModel& m, Expected& expected, Tensor images,
                                       int64_t n, Clock::time_point arrived) {
  auto job = std::make_shared<serve::Job>();
  job->images = std::move(images);
  job->n = n;
  job->arrived = Clock::now();
  if (opt.request_timeout_ms > 0)
    job->deadline = arrived + std::chrono::milliseconds(opt.request_timeout_ms);
  metrics.pending(m.name, 1);
  struct Done {
    serve::Metrics& metrics;
    const std::string& name;
    ~Done() { metrics.pending(name, -1); }
  } done{metrics, m.name};
  expected.submit(job);
  return batchers.at(m.name)->wait(job);
}

void Server::Impl::classify(const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point arrived = Clock::now();
  serve::ServedModel& m = model(req.matches[1]);
  single_threaded_openmp();
  Expected expected(*batchers.at(m.name));
  int64_t top = 5;
  if (req.has_param("top_k")) {
    const std::string v = req.get_param_value("top_k");
    try {
      top = std::stoll(v);
    } catch (const std::exception&) {
      top = -1;
    }
    if (top < 1) throw HttpError(400, fmt::format("top_k '{}' must be an integer >= 1", v));
  }
  if (req.body.empty())
    throw HttpError(400, "the body is empty: POST the image file itself (Content-Type "
                         "image/jpeg or image/png)");
  const serve::JobResult jr =
      run_job(m, expected, serve::image_file_input(req.body, m, decode, *host), 1, arrived);
  std::vector<float> probs(static_cast<size_t>(m.num_classes));
  softmax_row(jr.logits.data(), m.num_classes, probs.data());
  json preds = json::array();
  for (int64_t i : topk_indices(probs.data(), m.num_classes, std::min(top, m.num_classes))) {
    json p;
    p["index"] = i;
    p["label"] = i < static_cast<int64_t>(m.info.classes.size()) ? m.info.classes[i] : "";
    p["probability"] = probs[static_cast<size_t>(i)];
    p["logit"] = jr.logits[static_cast<size_t>(i)];
    preds.push_back(p);
  }
  json_reply(res, 200, json{{"model_name", m.name},
                            {"predictions", preds},
                            {"server_ms", micros_since(arrived) * 1e-3},
                            {"queue_ms", jr.queue_us * 1e-3},
                            {"compute_ms", jr.compute_us * 1e-3},
                            {"batch", jr.batch_images}});
}

void Server::Impl::routes() {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  http.Get("/", [](Req, Res res) {
    res.set_content(serve::kWebPage, "text/html; charset=utf-8");
  });
  http.Get("/v2", [](Req, Res res) {
    json_reply(res, 200, json{{"name", "rn50"},
                              {"version", kRn50Version},
                              {"extensions", {"binary_tensor_data", "classification",
                                              "model_repository", "statistics"}}});
  });
  http.Get("/v2/health/live", [](Req, Res res) { json_reply(res, 200, json::object()); });
  http.Get("/v2/health/ready", [this](Req, Res res) {
    json_reply(res, ready ? 200 : 503, json{{"ready", ready.load()}});
  });
  auto index = [this](Req, Res res) {
    json list = json::array();
    if (loaded)
      for (const auto& m : models)
        list.push_back(
          {{"name", m->name}, {"version", "1"}, {"state", ready ? "READY" : "UNAVAILABLE"}});
    json_reply(res, 200, list);
  };
  http.Post("/v2/repository/index", index);
  http.Get("/v2/repository/index", index);
  http.Get(R"(/v2/models/([^/]+))", [this](Req req, Res res) {
    answer(req.matches[1], res, false,
           [&] { json_reply(res, 200, metadata(model(req.matches[1]))); });
  });
  http.Get(R"(/v2/models/([^/]+)/ready)", [this](Req req, Res res) {
    answer(req.matches[1], res, false, [&] {
      model(req.matches[1]);
      json_reply(res, ready ? 200 : 503, json{{"name", req.matches[1]}, {"ready", ready.load()}});
    });
  });
  http.Get(R"(/v2/models/([^/]+)/stats)", [this](Req req, Res res) {
    answer(req.matches[1], res, false,
           [&] { json_reply(res, 200, metrics.stats(model(req.matches[1]).name)); });
  });
  http.Post(R"(/v2/models/([^/]+)/infer)", [this](Req req, Res res) {
    answer(req.matches[1], res, true, [&] { infer(req, res); });
  });
  http.Post(R"(/v2/models/([^/]+)/classify)", [this](Req req, Res res) {
    answer(req.matches[1], res, true, [&] { classify(req, res); });
  });
  http.Get("/metrics", [this](Req, Res res) {
    res.set_content(metrics.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // A body over --max-request-bytes is refused from its Content-Length, before it is read
  // (the pre-routing handler runs between the headers and the body).
  http.set_pre_routing_handler([this](Req req, Res res) {
    if (!req.has_header("Content-Length")) return httplib::Server::HandlerResponse::Unhandled;
    uint64_t len = 0;
    try {
      len = std::stoull(req.get_header_value("Content-Length"));
    } catch (const std::exception&) {
      json_reply(res, 400, json{{"error", "Content-Length is not a number"}});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (len <= static_cast<uint64_t>(opt.max_request_bytes))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    json_reply(res, 413, json{{"error", fmt::format("the body's {} bytes are over "
                                                    "--max-request-bytes {}",
                                                    len, opt.max_request_bytes)}});
    static const std::regex inference(R"(/v2/models/([^/]+)/(infer|classify))");
    std::smatch m;
    const std::string model_name =
        loaded && std::regex_match(req.path, m, inference) && by_name.count(m[1]) ? m[1].str()
                                                                                  : "";
    metrics.request_done(model_name, false, serve::Failure::too_large, 0);
    return httplib::Server::HandlerResponse::Handled;
  });
  // What httplib answers itself (no route, 413 for a body over --max-request-bytes, a
  // malformed request line) gets a JSON body naming the problem too.
  http.set_error_handler([this](Req req, Res res) {
    if (!res.body.empty()) return;
    std::string why;
    switch (res.status) {
      case 404: why = fmt::format("no such path: {} {}", req.method, req.path); break;
      case 413:
        // httplib parses form-urlencoded bodies (curl --data's default type) and refuses them
        // over 8 KiB; every other body reaches here only over --max-request-bytes.
        why = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded",
                                                          0) == 0
                  ? std::string("a form-urlencoded body over 8 KiB is refused: send it as "
                                "Content-Type application/octet-stream (binary tensors, "
                                "images) or application/json")
                  : fmt::format("the body is over --max-request-bytes {} bytes",
                                opt.max_request_bytes);
        break;
      default: why = fmt::format("HTTP {}", res.status);
    }
    json_reply(res, res.status, json{{"error", why}});
  });
  http.set_exception_handler([](Req, Res res, std::exception_ptr ep) {
    std::string why = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    json_reply(res, 500, json{{"error", why}});
  });
  if (opt.log_requests)
    http.set_logger([](Req req, const httplib::Response& res) {
      std::cerr << fmt::format("rn50 serve: {} {} {} -> {} ({} bytes)\n", req.remote_addr,
                               req.method, req.path, res.status, res.body.size());
    });
}

Server::Server(const ServeOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Server::~Server() { stop(); }

int Server::port() const { return impl_->port; }

std::vector<std::string> Server::model_names() const {
  return impl_->loaded ? names_of(impl_->models) : std::vector<std::string>{};
}

void Server::start() {
  Impl& s = *impl_;
  if (s.listener.joinable()) return;
  // Listening before loading: /v2/health/ready answers 503 while the models load.
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  while (!s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  try {
    s.load();
  } catch (...) {
    stop();
    throw;
  }
  s.ready = true;
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  s.ready = false;
  s.http.stop();  // no new connections; the connections in flight finish their request
  if (s.listener.joinable()) s.listener.join();
  for (auto& [name, b] : s.batchers) b->drain();
}

int run_serve(const ServeOptions& options) {
  // SIGTERM and SIGINT are taken by sigwait below: blocked before any thread starts, so that
  // no server thread receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Server server(options);
  server.start();
  std::cout << fmt::format("rn50 serve: listening on http://{}:{} (models: {}); SIGTERM or "
                           "Ctrl-C drains and stops\n",
                           options.host, server.port(), fmt::join(server.model_names(), ", "))
            << std::flush;
  int sig = 0;
  sigwait(&signals, &sig);
  std::cout << fmt::format("rn50 serve: {}: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT")
            << std::flush;
  server.stop();
  std::cout << "rn50 serve: stopped\n" << std::flush;
  return 0;
}

}  // namespace rn50
