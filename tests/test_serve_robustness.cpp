// rn50 serve under bad input and load, on loopback: every kind of bad request gets a 4xx with a
// JSON error naming the problem while the server keeps answering; slow and idle connections do
// not block others; a full queue answers 503 and a request whose deadline passes while queued
// is answered 504 before the running batch ends; /metrics is valid Prometheus text
// (promtool check metrics, Debian's prometheus package).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "data_test_util.h"
#include "require.h"
#include "serve_test_util.h"
#include "test_train_util.h"

using namespace rn50_test;
using rn50::testutil::make_jpeg;
using rn50::testutil::make_png;
using rn50::testutil::read_bytes;
using rn50::testutil::write_jpeg;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kCrop = 32;

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// What a connection receives until the server closes it (or 5 s pass).
std::string read_until_closed(int fd) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) all.append(buf, static_cast<size_t>(n));
  return all;
}

/// One HTTP response read from a connection: its headers and Content-Length bytes of body.
std::string read_response(int fd) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string all;
  char buf[4096];
  while (true) {
    const size_t head = all.find("\r\n\r\n");
    if (head != std::string::npos) {
      const size_t cl = all.find("Content-Length: ");
      const size_t len = cl == std::string::npos ? 0 : std::stoul(all.substr(cl + 16));
      if (all.size() >= head + 4 + len) return all;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return all;
    all.append(buf, static_cast<size_t>(n));
  }
}

std::string zeros_fp32(int64_t n, int crop) {
  return std::string(static_cast<size_t>(n * 3 * crop * crop * 4), '\0');
}

}  // namespace

TEST(ServeRobustness, BadRequestsGet4xxAndTheServerGoesOn) {
  TempDir tmp("serve_bad");
  const std::string dir = (tmp.path / "tiny").string();
  write_model(dir, "resnet18", 10, kCrop, 36);
  rn50::ServeOptions o;
  o.models = {dir};
  o.max_batch_size = 4;
  o.max_request_bytes = 1 << 20;
  TestServer t(o);
  const std::vector<uint8_t> jpeg = make_jpeg(40, 40, 5);
  const std::string jb(jpeg.begin(), jpeg.end());
  std::string huge_header = jb;  // the SOF0 frame header patched to claim 60000 x 60000
  for (size_t i = 0; i + 8 < huge_header.size(); ++i)
    if (uint8_t(huge_header[i]) == 0xFF && uint8_t(huge_header[i + 1]) == 0xC0) {
      huge_header[i + 5] = huge_header[i + 7] = char(0xEA);
      huge_header[i + 6] = huge_header[i + 8] = char(0x60);
      break;
    }
  auto fp32 = [](const json& shape, const json& data) {
    json r;
    r["inputs"] = {{{"name", "x"}, {"datatype", "FP32"}, {"shape", shape}, {"data", data}}};
    return r.dump();
  };
  struct Case {
    std::string what, path, body;
    httplib::Headers headers;
    int status;
    std::string expect;  // in the error message
  };
  const std::string infer = "/v2/models/tiny/infer";
  std::vector<Case> cases = {
      {"malformed JSON", infer, "{\"inputs\": [", {}, 400, "not valid JSON"},
      {"not an object", infer, "[1,2]", {}, 400, "JSON object"},
      {"unknown model", "/v2/models/nope/infer", fp32({1, 3, 32, 32}, {0}), {}, 404,
       "unknown model 'nope'"},
      {"wrong datatype", infer,
       R"({"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[1]}]})", {}, 400,
       "datatype 'INT64'"},
      {"negative dimension", infer, fp32({1, 3, -32, 32}, {0}), {}, 400, "dimension < 1"},
      {"overflowing dimensions", infer, fp32({4, 3, 1LL << 40, 1LL << 40}, {0}), {}, 400,
       "too many elements"},
      {"empty batch", infer, fp32({0, 3, 32, 32}, json::array()), {}, 400, "empty batch"},
      {"batch over the maximum", infer, fp32({5, 3, 32, 32}, {0}), {}, 400,
       "over the server's --max-batch-size 4"},
      {"data shorter than the shape", infer, fp32({1, 3, 32, 32}, {1, 2, 3}), {}, 400,
       "holds 3 elements"},
      {"wrong crop size", infer, fp32({1, 3, 2, 2}, json(std::vector<float>(12, 0.f))), {}, 400,
       "must be [N,3,32,32]"},
      {"two inputs", infer,
       R"({"inputs":[{"name":"a","datatype":"BYTES","shape":[1],"data":["AA=="]},)"
       R"({"name":"b","datatype":"BYTES","shape":[1],"data":["AA=="]}]})",
       {}, 400, "2 inputs given"},
      {"UINT8 out of range", infer,
       R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[1,1,1,3],"data":[1,2,300]}]})", {},
       400, "not an integer 0..255"},
      {"unknown output", infer,
       R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["AA=="]}],)"
       R"("outputs":[{"name":"probs"}]})",
       {}, 400, "one output, 'logits'"},
  };
  {  // binary forms
    BinaryRequest size_mismatch = binary_request("FP32", {1, 3, 32, 32}, zeros_fp32(1, 32));
    size_mismatch.body.resize(size_mismatch.body.size() - 4);  // one float short
    cases.push_back({"binary size past the data", infer, size_mismatch.body,
                     size_mismatch.headers, 400, "past the end of the binary data"});
    BinaryRequest short_shape = binary_request("FP32", {2, 3, 32, 32}, zeros_fp32(1, 32));
    cases.push_back({"binary size not matching the shape", infer, short_shape.body,
                     short_shape.headers, 400, "does not match shape"});
    BinaryRequest past = binary_request("FP32", {1, 3, 32, 32}, zeros_fp32(1, 32));
    past.headers = {{"Inference-Header-Content-Length", std::to_string(past.body.size() + 10)}};
    cases.push_back({"header length past the body", infer, past.body, past.headers, 400,
                     "is past the body"});
    const BinaryRequest text = binary_request("BYTES", {1}, bytes_elements({"hello, world"}));
    cases.push_back({"non-image bytes", infer, text.body, text.headers, 400,
                     "not a JPEG or PNG image"});
    const BinaryRequest cut =
        binary_request("BYTES", {1}, bytes_elements({jb.substr(0, jb.size() * 2 / 3)}));
    cases.push_back({"truncated JPEG", infer, cut.body, cut.headers, 400, "cannot be decoded"});
    const BinaryRequest big = binary_request("BYTES", {1}, bytes_elements({huge_header}));
    cases.push_back({"60000x60000 header", infer, big.body, big.headers, 400, "60000x60000"});
    const BinaryRequest count = binary_request("BYTES", {2}, bytes_elements({jb}));
    cases.push_back({"BYTES count not the shape", infer, count.body, count.headers, 400,
                     "1 BYTES elements for shape [2]"});
  }
  cases.push_back({"classify without a body", "/v2/models/tiny/classify", "", {}, 400,
                   "the body is empty"});
  cases.push_back({"classify a text file", "/v2/models/tiny/classify", "not an image", {}, 400,
                   "not a JPEG or PNG image"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto res = t.client->Post(c.path, c.headers, c.body, "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, c.status) << res->body;
    json err;
    ASSERT_NO_THROW(err = json::parse(res->body)) << res->body;
    EXPECT_NE(err.value("error", std::string()).find(c.expect), std::string::npos) << res->body;
    auto live = t.client->Get("/v2/health/live");
    ASSERT_TRUE(live);
    EXPECT_EQ(live->status, 200);
  }
  // A body over --max-request-bytes is refused from its Content-Length, before it is read: the
  // client has sent 1 KiB of the 2 MiB it announced when the 413 arrives.
  {
    const int fd = connect_loopback(t.port());
    ASSERT_GE(fd, 0);
    const std::string head = "POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
                             "Content-Type: application/octet-stream\r\nContent-Length: " +
                             std::to_string(2 << 20) + "\r\n\r\n" + std::string(1024, 'x');
    ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const auto t413 = Clock::now();
    const std::string reply = read_response(fd);
    ::close(fd);
    EXPECT_LT(ms_since(t413), 1000.0) << "the 413 waited for the body";
    EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
    EXPECT_NE(reply.find("over --max-request-bytes"), std::string::npos) << reply;
    EXPECT_EQ(t.client->Get("/v2/health/live")->status, 200);
  }
  // The failures are counted by reason.
  const std::string m = t.client->Get("/metrics")->body;
  const std::string tiny_bad =
      "nv_inference_request_failure{model=\"tiny\",version=\"1\",reason=\"BAD_REQUEST\"} ";
  ASSERT_NE(m.find(tiny_bad), std::string::npos) << m;
  EXPECT_NE(m.find(tiny_bad + "0\n"), m.find(tiny_bad)) << m;
  EXPECT_NE(m.find("reason=\"TOO_LARGE\"} 1\n"), std::string::npos) << m;
}

TEST(ServeRobustness, SlowAndIdleConnectionsDoNotBlockOthers) {
  TempDir tmp("serve_idle");
  const std::string dir = (tmp.path / "tiny").string();
  write_model(dir, "resnet18", 10, kCrop, 36);
  rn50::ServeOptions o;
  o.models = {dir};
  o.read_timeout_s = 1;
  TestServer t(o);
  // A client that never finishes its headers is cut off after the read timeout.
  const int slow = connect_loopback(t.port());
  ASSERT_GE(slow, 0);
  const std::string partial = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(::send(slow, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  // Hundreds of idle connections.
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_loopback(t.port());
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_EQ(idle.size(), 300u);
  const auto t0 = Clock::now();
  auto live = t.make_client()->Get("/v2/health/live");
  ASSERT_TRUE(live) << httplib::to_string(live.error());
  EXPECT_EQ(live->status, 200);
  EXPECT_LT(ms_since(t0), 500.0) << "a request waited behind idle connections";
  // Cut off after the read timeout: closed, at most with a 400 for the unfinished request.
  const auto t1 = Clock::now();
  const std::string got = read_until_closed(slow);
  EXPECT_TRUE(got.empty() || got.rfind("HTTP/1.1 400", 0) == 0) << got;
  EXPECT_LT(ms_since(t1), 4000.0) << "the slow connection was not closed";
  ::close(slow);
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(t.make_client()->Get("/v2/health/live")->status, 200);
}

/// A resnet50 at 224 px: an 8-image batch runs for a few hundred ms on this machine's cores,
/// long enough to queue requests behind it.
struct SlowModel {
  TempDir tmp{"serve_slow"};
  std::string dir = (tmp.path / "slow").string();
  SlowModel() { write_model(dir, "resnet50", 1000, 224, 256); }
};

/// Waits until `n` requests of model "slow" are queued or running (/v2/models/slow/stats).
void wait_pending(const TestServer& t, int n) {
  auto c = t.make_client();
  for (int i = 0; i < 2000; ++i) {
    const auto r = c->Get("/v2/models/slow/stats");
    if (r && json::parse(r->body).value("pending", 0) >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL() << n << " requests never became pending";
}

/// One request of `n` zero images, so that later timings do not include building the
/// engine's primitives for that batch size.
void warm_up(const TestServer& t, int64_t n) {
  const std::string raw = zeros_fp32(n, 224);
  const BinaryRequest r = binary_request("FP32", {n, 3, 224, 224}, raw);
  const auto res = t.make_client()->Post("/v2/models/slow/infer", r.headers, r.body,
                                         "application/octet-stream");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
}

/// A response and when it arrived.
struct Timed {
  httplib::Result result;
  Clock::time_point at;
};

/// `n` images `raw` (FP32, 224 px) to model "slow"; the response and when it arrived.
Timed post(const TestServer& t, const std::string& raw, int64_t n) {
  const BinaryRequest r = binary_request("FP32", {n, 3, 224, 224}, raw);
  auto res =
      t.make_client()->Post("/v2/models/slow/infer", r.headers, r.body, "application/octet-stream");
  return Timed{std::move(res), Clock::now()};
}

std::future<Timed> post_async(const TestServer& t, const std::string& raw, int64_t n) {
  return std::async(std::launch::async, [&t, raw, n] { return post(t, raw, n); });
}

/// A server of SlowModel `s`: batches of up to 8, no queue delay, then `tweak`; warmed up at
/// batch 8 and 1.
std::unique_ptr<TestServer> slow_server(const SlowModel& s,
                                        const std::function<void(rn50::ServeOptions&)>& tweak) {
  rn50::ServeOptions o;
  o.models = {s.dir};
  o.max_batch_size = 8;
  o.max_queue_delay_us = 0;
  tweak(o);
  auto t = std::make_unique<TestServer>(o);
  warm_up(*t, 8);
  warm_up(*t, 1);
  return t;
}

TEST(ServeRobustness, FullQueueAnswers503) {
  SlowModel s;
  const auto server = slow_server(s, [](rn50::ServeOptions& o) { o.max_queue_size = 1; });
  const TestServer& t = *server;
  const std::string big = zeros_fp32(8, 224), one = zeros_fp32(1, 224);
  auto a = post_async(t, big, 8);  // runs at once
  wait_pending(t, 1);
  auto b = post_async(t, one, 1);  // waits in the queue: it is full now
  wait_pending(t, 2);
  const httplib::Result c = post(t, one, 1).result;
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 503) << c->body;
  EXPECT_NE(c->body.find("queue is full"), std::string::npos) << c->body;
  EXPECT_EQ(a.get().result->status, 200);
  EXPECT_EQ(b.get().result->status, 200);
  const std::string m = t.client->Get("/metrics")->body;
  EXPECT_NE(m.find("reason=\"QUEUE_FULL\"} 1\n"), std::string::npos) << m;
}

TEST(ServeRobustness, DeadlinePassingInTheQueueIsAnsweredAtOnce) {
  SlowModel s;
  const auto server = slow_server(s, [](rn50::ServeOptions& o) { o.request_timeout_ms = 100; });
  const TestServer& t = *server;
  const std::string big = zeros_fp32(8, 224), one = zeros_fp32(1, 224);
  auto a = post_async(t, big, 8);
  wait_pending(t, 1);  // A's batch is running
  const auto tb = Clock::now();
  const Timed tb_result = post(t, one, 1);
  const httplib::Result& b = tb_result.result;
  const auto b_done = tb_result.at;
  ASSERT_TRUE(b);
  const Timed ra = a.get();
  EXPECT_EQ(ra.result->status, 200) << "a request already running finishes";
  EXPECT_EQ(b->status, 504) << b->body;
  EXPECT_NE(b->body.find("past its deadline"), std::string::npos) << b->body;
  const double b_ms = std::chrono::duration<double, std::milli>(b_done - tb).count();
  EXPECT_GE(b_ms, 90.0);
  EXPECT_LT(b_done, ra.at) << "the 504 came only after the running batch ended";
}

TEST(ServeRobustness, MetricsPassPromtool) {
  TempDir tmp("serve_metrics");
  const std::string dir = (tmp.path / "tiny").string();
  write_model(dir, "resnet18", 10, kCrop, 36);
  rn50::ServeOptions o;
  o.models = {dir};
  TestServer t(o);
  const std::vector<uint8_t> jpeg = make_jpeg(40, 40, 5);
  t.client->Post("/v2/models/tiny/classify", std::string(jpeg.begin(), jpeg.end()), "image/jpeg");
  t.client->Post("/v2/models/tiny/infer", "{", "application/json");
  const std::string text = t.client->Get("/metrics")->body;
  for (const char* family :
       {"nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
        "nv_inference_exec_count", "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us", "nv_inference_pending_request_count",
        "rn50_request_duration_seconds_bucket", "process_resident_memory_bytes"})
    EXPECT_NE(text.find(family), std::string::npos) << family;
  const bool have = run_command("command -v promtool > /dev/null") == 0;
  RN50_REQUIRE_OR_SKIP("serve", have, "promtool not found (Debian's prometheus package)");
  const std::string file = (tmp.path / "metrics.txt").string();
  std::ofstream(file) << text;
  std::string out;
  const int rc = run_command("promtool check metrics < " + sh_quote(file), &out);
  // 0: clean; 3: lint remarks only. Triton's names (nv_*) draw naming remarks that rn50 keeps
  // for compatibility with Triton dashboards; anything else is a failure.
  EXPECT_TRUE(rc == 0 || rc == 3) << out;
  EXPECT_EQ(out.find("error"), std::string::npos) << out;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);)
    EXPECT_EQ(l.rfind("nv_inference_", 0), 0u) << "a lint remark about rn50's own metrics: " << l;
}
