// rn50 serve on loopback (an in-process Server, httplib's client): every endpoint; the /infer
// request as JSON and in the binary extension, FP32 / UINT8 / BYTES inputs, binary and
// classification outputs; /classify; and that batching forms batches under concurrency whose
// answers equal each image run alone through the engine, bit for bit.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "data_test_util.h"
#include "serve_test_util.h"
#include "test_train_util.h"

using namespace rn50_test;
using rn50::testutil::make_jpeg;
using rn50::testutil::make_png;
using rn50::testutil::read_bytes;
using rn50::testutil::write_jpeg;

namespace {

constexpr int kCrop = 32, kResize = 36, kClasses = 10;

/// One tiny resnet18 model folder per test binary, and a server for it.
struct Served {
  TempDir tmp{"serve_http"};
  std::string dir = (tmp.path / "tiny").string();
  Served() { write_model(dir, "resnet18", kClasses, kCrop, kResize); }
};

std::vector<float> random_input(uint64_t seed) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::normal_distribution<float> d;
  std::vector<float> x(3 * kCrop * kCrop);
  for (float& v : x) v = d(g);
  return x;
}

std::string raw_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> floats_of(const std::string& raw) {
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

}  // namespace

TEST(ServeHttp, Endpoints) {
  Served s;
  rn50::ServeOptions o;
  o.models = {s.dir};
  TestServer t(o);
  auto& c = *t.client;
  auto v2 = c.Get("/v2");
  ASSERT_TRUE(v2) << httplib::to_string(v2.error());
  EXPECT_EQ(v2->status, 200);
  const json j = json::parse(v2->body);
  EXPECT_EQ(j["name"], "rn50");
  EXPECT_NE(j["extensions"].dump().find("binary_tensor_data"), std::string::npos);
  EXPECT_NE(j["extensions"].dump().find("classification"), std::string::npos);
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  auto meta = c.Get("/v2/models/tiny");
  ASSERT_EQ(meta->status, 200) << meta->body;
  const json m = json::parse(meta->body);
  EXPECT_EQ(m["name"], "tiny");
  EXPECT_EQ(m["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(m["inputs"][0]["shape"], json::array({-1, 3, kCrop, kCrop}));
  EXPECT_EQ(m["outputs"][0]["name"], "logits");
  EXPECT_EQ(m["outputs"][0]["shape"], json::array({-1, kClasses}));
  EXPECT_EQ(c.Get("/v2/models/tiny/ready")->status, 200);
  EXPECT_EQ(c.Get("/v2/models/tiny/stats")->status, 200);
  auto index = c.Post("/v2/repository/index", "", "application/json");
  ASSERT_EQ(index->status, 200);
  EXPECT_EQ(json::parse(index->body)[0]["name"], "tiny");
  auto page = c.Get("/");
  ASSERT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("rn50 serve"), std::string::npos);
  auto missing = c.Get("/v2/models/nope");
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(json::parse(missing->body)["error"].get<std::string>().find("unknown model 'nope'"),
            std::string::npos);
  auto nopath = c.Get("/v3/whatever");
  EXPECT_EQ(nopath->status, 404);
  EXPECT_TRUE(json::parse(nopath->body).contains("error"));
  auto metrics = c.Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("nv_inference_request_success{model=\"tiny\",version=\"1\"} 0"),
            std::string::npos)
      << metrics->body;
}

TEST(ServeHttp, JsonAndBinaryFp32EqualTheEngineAlone) {
  Served s;
  rn50::ServeOptions o;
  o.models = {s.dir};
  TestServer t(o);
  const std::vector<float> a = random_input(1), b = random_input(2);
  const std::vector<float> want_a = engine_logits(s.dir, a, kCrop),
                           want_b = engine_logits(s.dir, b, kCrop);
  // JSON: a batch of two, nested data, the logits as JSON numbers.
  std::vector<float> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  json req;
  req["id"] = "r1";
  req["inputs"] = {{{"name", "input"},
                    {"datatype", "FP32"},
                    {"shape", {2, 3, kCrop, kCrop}},
                    {"data", ab}}};
  auto res = t.client->Post("/v2/models/tiny/infer", req.dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  const json r = json::parse(res->body);
  EXPECT_EQ(r["id"], "r1");
  EXPECT_EQ(r["model_name"], "tiny");
  EXPECT_EQ(r["outputs"][0]["shape"], json::array({2, kClasses}));
  const std::vector<float> got = r["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(got.size(), 2u * kClasses);
  for (int k = 0; k < kClasses; ++k) {
    EXPECT_EQ(got[k], want_a[k]) << k;
    EXPECT_EQ(got[kClasses + k], want_b[k]) << k;
  }
  // Binary in, binary out.
  const BinaryRequest br = binary_request("FP32", {1, 3, kCrop, kCrop}, raw_of(b),
                                          json::array({{{"name", "logits"},
                                                        {"parameters", {{"binary_data", true}}}}}));
  auto bres = t.client->Post("/v2/models/tiny/infer", br.headers, br.body,
                             "application/octet-stream");
  ASSERT_EQ(bres->status, 200) << bres->body;
  EXPECT_EQ(floats_of(binary_part(bres)), want_b);
  const json bh = json::parse(
      bres->body.substr(0, std::stoul(bres->get_header_value("Inference-Header-Content-Length"))));
  EXPECT_EQ(bh["outputs"][0]["parameters"]["binary_data_size"], 4 * kClasses);
}

TEST(ServeHttp, ImagesAsBytesAndUint8EqualPredictsPreprocessing) {
  Served s;
  rn50::ServeOptions o;
  o.models = {s.dir};
  TestServer t(o);
  const std::vector<uint8_t> jpeg = make_jpeg(80, 60, 3);
  const std::vector<uint8_t> png = make_png(50, 70, 4);
  const std::string jb(jpeg.begin(), jpeg.end()), pb(png.begin(), png.end());
  const std::vector<float> want_j = engine_logits(s.dir, predict_input(jb, kResize, kCrop), kCrop);
  const std::vector<float> want_p = engine_logits(s.dir, predict_input(pb, kResize, kCrop), kCrop);
  // BYTES, binary form, two files of two formats in one request.
  const BinaryRequest br = binary_request("BYTES", {2}, bytes_elements({jb, pb}));
  auto res = t.client->Post("/v2/models/tiny/infer", br.headers, br.body,
                            "application/octet-stream");
  ASSERT_EQ(res->status, 200) << res->body;
  const std::vector<float> got = json::parse(res->body)["outputs"][0]["data"];
  for (int k = 0; k < kClasses; ++k) {
    EXPECT_EQ(got[k], want_j[k]);
    EXPECT_EQ(got[kClasses + k], want_p[k]);
  }
  // UINT8: the decoded pixels of the JPEG, resized and cropped by the server.
  rn50::Image img;
  rn50::data::decode_image(jpeg.data(), jpeg.size(), "jpeg", img);
  const std::string px(img.pixels.begin(), img.pixels.end());
  const BinaryRequest ur = binary_request("UINT8", {1, img.height, img.width, 3}, px);
  auto ures = t.client->Post("/v2/models/tiny/infer", ur.headers, ur.body,
                             "application/octet-stream");
  ASSERT_EQ(ures->status, 200) << ures->body;
  EXPECT_EQ(json::parse(ures->body)["outputs"][0]["data"].get<std::vector<float>>(), want_j);
  // BYTES as JSON: base64 strings.
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string enc;
  for (size_t i = 0; i < jb.size(); i += 3) {
    const uint32_t n = (uint8_t(jb[i]) << 16) | (i + 1 < jb.size() ? uint8_t(jb[i + 1]) << 8 : 0) |
                       (i + 2 < jb.size() ? uint8_t(jb[i + 2]) : 0);
    enc += b64[(n >> 18) & 63];
    enc += b64[(n >> 12) & 63];
    enc += i + 1 < jb.size() ? b64[(n >> 6) & 63] : '=';
    enc += i + 2 < jb.size() ? b64[n & 63] : '=';
  }
  json jr;
  jr["inputs"] = {{{"name", "image"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {enc}}}};
  auto jres = t.client->Post("/v2/models/tiny/infer", jr.dump(), "application/json");
  ASSERT_EQ(jres->status, 200) << jres->body;
  EXPECT_EQ(json::parse(jres->body)["outputs"][0]["data"].get<std::vector<float>>(), want_j);
}

TEST(ServeHttp, ClassificationExtensionAndClassify) {
  Served s;
  rn50::ServeOptions o;
  o.models = {s.dir};
  TestServer t(o);
  const std::vector<uint8_t> jpeg = make_jpeg(64, 64, 9);
  const std::string jb(jpeg.begin(), jpeg.end());
  const std::vector<float> want = engine_logits(s.dir, predict_input(jb, kResize, kCrop), kCrop);
  const int best = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
  const BinaryRequest br = binary_request(
      "BYTES", {1}, bytes_elements({jb}),
      json::array({{{"name", "logits"}, {"parameters", {{"classification", 3}}}}}));
  auto res = t.client->Post("/v2/models/tiny/infer", br.headers, br.body,
                            "application/octet-stream");
  ASSERT_EQ(res->status, 200) << res->body;
  const json out = json::parse(res->body)["outputs"][0];
  EXPECT_EQ(out["datatype"], "BYTES");
  EXPECT_EQ(out["shape"], json::array({1, 3}));
  const std::string top = out["data"][0];
  // "score:index:label": the best logit, its index and class name.
  const std::string expect_tail = ":" + std::to_string(best) + ":c" + std::to_string(best);
  EXPECT_EQ(top.substr(top.size() - expect_tail.size()), expect_tail) << top;
  EXPECT_EQ(std::stof(top.substr(0, top.find(':'))), want[best]) << top;
  // /classify: the raw image body, top-k with names and probabilities.
  auto cres = t.client->Post("/v2/models/tiny/classify?top_k=4", jb, "image/jpeg");
  ASSERT_EQ(cres->status, 200) << cres->body;
  const json c = json::parse(cres->body);
  ASSERT_EQ(c["predictions"].size(), 4u);
  EXPECT_EQ(c["predictions"][0]["index"], best);
  EXPECT_EQ(c["predictions"][0]["label"], "c" + std::to_string(best));
  EXPECT_EQ(c["predictions"][0]["logit"].get<float>(), want[best]);
  double last = 2;
  for (const json& p : c["predictions"]) {
    EXPECT_LE(p["probability"].get<double>(), last);
    last = p["probability"].get<double>();
  }
  EXPECT_GT(c["server_ms"].get<double>(), 0.0);
}

TEST(ServeHttp, ConcurrentRequestsFormBatchesWithTheSameAnswers) {
  Served s;
  rn50::ServeOptions o;
  o.models = {s.dir};
  o.max_batch_size = 16;
  o.max_queue_delay_us = 50000;  // 50 ms: the requests of 8 clients meet in the queue
  TestServer t(o);
  constexpr int kClients = 8, kEach = 3;
  std::vector<std::vector<float>> inputs, want;
  for (int i = 0; i < kClients * kEach; ++i) {
    inputs.push_back(random_input(100 + i));
    want.push_back(engine_logits(s.dir, inputs.back(), kCrop));
  }
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      auto cli = t.make_client();
      for (int r = 0; r < kEach; ++r) {
        const int i = c * kEach + r;
        const BinaryRequest br = binary_request(
            "FP32", {1, 3, kCrop, kCrop}, raw_of(inputs[i]),
            json::array({{{"name", "logits"}, {"parameters", {{"binary_data", true}}}}}));
        auto res = cli->Post("/v2/models/tiny/infer", br.headers, br.body,
                             "application/octet-stream");
        if (!res || res->status != 200) {
          ++failures;
          continue;
        }
        if (floats_of(binary_part(res)) != want[i]) ++mismatches;
      }
    });
  for (auto& th : clients) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "a batched answer differs from the image run alone";
  const json stats = json::parse(t.client->Get("/v2/models/tiny/stats")->body);
  EXPECT_EQ(stats["inference_count"], kClients * kEach);
  EXPECT_GT(stats["average_batch"].get<double>(), 1.0) << stats.dump();
  EXPECT_EQ(stats["requests_success"], kClients * kEach);
}

TEST(ServeHttp, NotReadyWhileLoading) {
  TempDir tmp("serve_loading");
  const std::string dir = (tmp.path / "big").string();
  write_model(dir, "resnet50", 1000, 224, 256);
  rn50::ServeOptions o;
  o.models = {dir};
  o.instances = 2;
  o.host = "127.0.0.1";
  o.port = 0;
  rn50::Server server(o);  // bound: connections wait in the backlog until start() listens
  std::vector<int> statuses;
  std::thread poller([&] {
    httplib::Client c("127.0.0.1", server.port());
    for (int i = 0; i < 20000; ++i) {
      const auto r = c.Get("/v2/health/ready");
      if (r) statuses.push_back(r->status);
      if (r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  server.start();
  poller.join();
  ASSERT_FALSE(statuses.empty());
  EXPECT_EQ(statuses.front(), 503) << "ready before its models were loaded";
  EXPECT_EQ(statuses.back(), 200);
  httplib::Client c("127.0.0.1", server.port());
  EXPECT_EQ(c.Get("/v2/models/big/ready")->status, 200);
}
