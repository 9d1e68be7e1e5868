// The Open Inference Protocol layer of rn50 serve (src/serve/protocol.h) on its own: requests
// in JSON (flat and nested data) and in the binary extension parse into the same tensor;
// responses carry the logits as JSON, as binary data after the header, or as classification
// strings; base64; and each malformed request names its problem with status 400.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "serve/protocol.h"

namespace rn50::serve {
namespace {

using json = nlohmann::json;

std::string raw_floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(ServeProtocol, JsonFlatNestedAndBinaryGiveTheSameTensor) {
  const std::vector<float> v{0.5f, -1.25f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f, 12.f};
  json flat;
  flat["id"] = "x";
  flat["inputs"] = {{{"name", "in"}, {"datatype", "FP32"}, {"shape", {1, 3, 2, 2}}, {"data", v}}};
  const InferRequest a = parse_infer_request(flat.dump(), std::nullopt, 8);
  EXPECT_EQ(a.id, "x");
  EXPECT_EQ(a.input.f32, v);
  EXPECT_EQ(a.input.shape, (std::vector<int64_t>{1, 3, 2, 2}));
  json nested = flat;
  nested["inputs"][0]["data"] = {{{{0.5, -1.25}, {3, 4}}, {{5, 6}, {7, 8}}, {{9, 10}, {11, 12}}}};
  EXPECT_EQ(parse_infer_request(nested.dump(), std::nullopt, 8).input.f32, v);
  json head = flat;
  head["inputs"][0].erase("data");
  head["inputs"][0]["parameters"] = {{"binary_data_size", v.size() * 4}};
  const std::string h = head.dump();
  const InferRequest b =
      parse_infer_request(h + raw_floats(v), static_cast<int64_t>(h.size()), 8);
  EXPECT_EQ(b.input.f32, v);
}

TEST(ServeProtocol, BytesElementsAndBase64) {
  EXPECT_EQ(base64_decode("aGVsbG8=", "t"), "hello");
  EXPECT_EQ(base64_decode("aGVsbG8", "t"), "hello");
  EXPECT_EQ(base64_decode("", "t"), "");
  EXPECT_THROW(base64_decode("a$b=", "t"), HttpError);
  json j;
  j["inputs"] = {{{"name", "img"}, {"datatype", "BYTES"}, {"shape", {2}},
                  {"data", {"aGVsbG8=", "d29ybGQ="}}}};
  const InferRequest r = parse_infer_request(j.dump(), std::nullopt, 8);
  EXPECT_EQ(r.input.bytes, (std::vector<std::string>{"hello", "world"}));
  // Binary: 4-byte little-endian lengths.
  std::string raw;
  for (const std::string s : {"hello", "world!"}) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    raw.append(reinterpret_cast<const char*>(&n), 4);
    raw += s;
  }
  json h;
  h["inputs"] = {{{"name", "img"}, {"datatype", "BYTES"}, {"shape", {2}},
                  {"parameters", {{"binary_data_size", raw.size()}}}}};
  const std::string hs = h.dump();
  EXPECT_EQ(parse_infer_request(hs + raw, static_cast<int64_t>(hs.size()), 8).input.bytes,
            (std::vector<std::string>{"hello", "world!"}));
}

TEST(ServeProtocol, ResponsesJsonBinaryAndClassification) {
  const std::vector<float> logits{0.1f, 2.5f, -1.f, 0.7f, 0.7f, 0.2f};  // 2 x 3
  InferRequest r;
  r.id = "q";
  InferResponse j = make_infer_response("m", r, logits, 2, 3, {"a", "b", "c"});
  EXPECT_EQ(j.header_length, -1);
  const json jj = json::parse(j.body);
  EXPECT_EQ(jj["model_name"], "m");
  EXPECT_EQ(jj["id"], "q");
  EXPECT_EQ(jj["outputs"][0]["shape"], json::array({2, 3}));
  EXPECT_EQ(jj["outputs"][0]["data"].get<std::vector<float>>(), logits);
  r.outputs = {RequestOutput{"logits", true, 0}, RequestOutput{"logits", false, 2}};
  InferResponse b = make_infer_response("m", r, logits, 2, 3, {"a", "b"});
  ASSERT_GT(b.header_length, 0);
  const json bh = json::parse(b.body.substr(0, static_cast<size_t>(b.header_length)));
  EXPECT_EQ(bh["outputs"][0]["parameters"]["binary_data_size"], 24);
  std::vector<float> back(6);
  std::memcpy(back.data(), b.body.data() + b.header_length, 24);
  EXPECT_EQ(back, logits);
  // Top-2 per image, ties to the lower index; class 2 has no name: "score:index".
  EXPECT_EQ(bh["outputs"][1]["datatype"], "BYTES");
  EXPECT_EQ(bh["outputs"][1]["data"],
            json::array({"2.5:1:b", "0.1:0:a", "0.7:0:a", "0.7:1:b"}));
}

TEST(ServeProtocol, MalformedRequestsName400Problems) {
  struct Case {
    std::string body;
    std::optional<int64_t> header;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{", std::nullopt, "not valid JSON"},
      {R"({"inputs": {}})", std::nullopt, "no \"inputs\""},
      {R"({"inputs":[{"datatype":"FP32","shape":[1,3,1,1],"data":[1,2,3]}]})", std::nullopt,
       "no \"name\""},
      {R"({"inputs":[{"name":"x","datatype":"FP16","shape":[1],"data":[1]}]})", std::nullopt,
       "datatype 'FP16'"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,1],"data":[1]}]})", std::nullopt,
       "has 3 dimensions"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4,1,1],"data":[1,2,3,4]}]})",
       std::nullopt, "must be [N,3,H,W]"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,1.5,1],"data":[1]}]})",
       std::nullopt, "non-integer"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[9,3,1,1],"data":[1]}]})",
       std::nullopt, "over the server's --max-batch-size 8"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,1,1],"data":["a","b","c"]}]})",
       std::nullopt, "non-number"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,1,1]}]})", std::nullopt,
       "neither \"data\" nor a binary_data_size"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,1,1],)"
       R"("parameters":{"binary_data_size":12}}]})",
       std::nullopt, "without the Inference-Header-Content-Length"},
      {R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["AA=="]}],)"
       R"("outputs":[{"name":"logits","parameters":{"classification":0}}]})",
       std::nullopt, "classification 0"},
      {"{}", 10, "is past the body"},
  };
  for (const Case& c : cases) {
    try {
      parse_infer_request(c.body, c.header, 8);
      ADD_FAILURE() << "accepted: " << c.body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400) << c.body;
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
          << c.body << "\n" << e.what();
    }
  }
}

}  // namespace
}  // namespace rn50::serve
