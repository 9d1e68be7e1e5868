// Helpers of the server tests (test_serve_*.cpp): a small exported model written by the test,
// an in-process server on a free loopback port, requests in the protocol's JSON and binary
// forms, and the logits the engine gives one image alone (what a served answer must equal).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/decode.h"
#include "data/transforms.h"
#include "rn50/backend.h"
#include "rn50/inference.h"
#include "rn50/model.h"
#include "rn50/serve.h"

namespace rn50_test {

using nlohmann::json;

/// Writes an exported `arch` model (random Kaiming weights, BN folded) with `classes` outputs
/// named "c0", "c1", ..., eval preprocessing resize_short / crop, to `dir`.
inline void write_model(const std::string& dir, const std::string& arch, int classes, int crop,
                        int resize_short, uint64_t seed = 7) {
  auto be = rn50::make_backend("ref");
  rn50::ModelOptions mo;
  mo.num_classes = classes;
  rn50::ResNet model(*be, rn50::arch_from_name(arch), mo);
  model.init(seed);
  std::map<std::string, rn50::Tensor> sd;
  for (auto& [k, t] : model.state_dict()) sd.emplace(k, t);
  rn50::InferenceModel m;
  m.program = rn50::fold_network(model.desc(), sd);
  for (int c = 0; c < classes; ++c) m.info.classes.push_back("c" + std::to_string(c));
  m.info.crop_size = crop;
  m.info.resize_short = resize_short;
  rn50::save_inference_model(m, dir);
}

/// A server of `opt` started on a free port of 127.0.0.1, and a client for it.
struct TestServer {
  std::unique_ptr<rn50::Server> server;
  std::unique_ptr<httplib::Client> client;
  explicit TestServer(rn50::ServeOptions opt) {
    opt.host = "127.0.0.1";
    opt.port = 0;
    server = std::make_unique<rn50::Server>(opt);
    server->start();
    client = make_client();
  }
  std::unique_ptr<httplib::Client> make_client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    c->set_read_timeout(60, 0);
    c->set_write_timeout(60, 0);
    return c;
  }
  int port() const { return server->port(); }
};

/// The body and header of a binary-extension request with one input of `datatype` and
/// `shape` whose raw little-endian bytes are `raw`, asking for `outputs` (JSON array).
struct BinaryRequest {
  std::string body;
  httplib::Headers headers;
};
inline BinaryRequest binary_request(const std::string& datatype, const std::vector<int64_t>& shape,
                                    const std::string& raw, const json& outputs = nullptr) {
  json h;
  h["inputs"] = {{{"name", "input"},
                  {"datatype", datatype},
                  {"shape", shape},
                  {"parameters", {{"binary_data_size", raw.size()}}}}};
  if (!outputs.is_null()) h["outputs"] = outputs;
  BinaryRequest r;
  const std::string header = h.dump();
  r.body = header + raw;
  r.headers = {{"Inference-Header-Content-Length", std::to_string(header.size())}};
  return r;
}

/// BYTES elements in the binary form: each a 4-byte little-endian length and its bytes.
inline std::string bytes_elements(const std::vector<std::string>& items) {
  std::string raw;
  for (const std::string& s : items) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    raw.append(reinterpret_cast<const char*>(&n), 4);
    raw += s;
  }
  return raw;
}

/// The binary section of a response whose header declares Inference-Header-Content-Length.
inline std::string binary_part(const httplib::Result& res) {
  const size_t h = std::stoul(res->get_header_value("Inference-Header-Content-Length"));
  return res->body.substr(h);
}

/// The engine of the model in `dir` (fp32, CPU) at batch 1 on normalised NCHW `x` (3 x crop x
/// crop): the logits a served request must reproduce bit for bit.
inline std::vector<float> engine_logits(const std::string& dir, const std::vector<float>& x,
                                        int crop) {
  static std::map<std::string, std::unique_ptr<rn50::InferenceEngine>> engines;
  auto& e = engines[dir];
  rn50::EngineOptions eo;
  eo.batch_invariant = true;  // as rn50 serve's engines
  if (!e) e = rn50::make_inference_engine(rn50::load_inference_model(dir).program, eo);
  rn50::Tensor t = rn50::Tensor::empty({1, 3, crop, crop}, rn50::DType::f32, rn50::Layout::NCHW);
  std::memcpy(t.data_as<float>(), x.data(), x.size() * sizeof(float));
  const rn50::Tensor y = e->run(t);
  return std::vector<float>(y.data_as<const float>(), y.data_as<const float>() + y.numel());
}

/// rn50 predict's preprocessing of an encoded image (decode, Resize + CenterCrop, ImageNet
/// normalisation on the oneDNN backend), as normalised NCHW values.
inline std::vector<float> predict_input(const std::string& file_bytes, int resize_short,
                                        int crop) {
  rn50::Image img;
  rn50::data::decode_image(reinterpret_cast<const uint8_t*>(file_bytes.data()), file_bytes.size(),
                           "test image", img);
  rn50::Tensor u8 = rn50::Tensor::empty({1, 3, crop, crop}, rn50::DType::u8, rn50::Layout::NHWC);
  rn50::data::eval_transform(img, resize_short, crop, u8.data_as<uint8_t>());
  rn50::Tensor x = rn50::Tensor::empty({1, 3, crop, crop}, rn50::DType::f32, rn50::Layout::NHWC);
  const rn50::Normalization n;
  rn50::make_backend("onednn")->normalize_u8(u8, n.mean, n.std, x);
  const rn50::Tensor nchw = x.to_layout(rn50::Layout::NCHW);
  return std::vector<float>(nchw.data_as<const float>(),
                            nchw.data_as<const float>() + nchw.numel());
}

}  // namespace rn50_test
