#include "serve/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/json_value.h"

namespace rn50::serve {

namespace {

using json = nlohmann::json;

/// The most elements one input may hold (2^31: 8 GiB of FP32, far over --max-request-bytes).
constexpr int64_t kMaxElements = int64_t(1) << 31;

[[noreturn]] void bad(const std::string& message) { throw HttpError(400, message); }

DataType parse_datatype(const json& v, const std::string& input) {
  if (!v.is_string()) bad(fmt::format("input '{}': \"datatype\" must be a string", input));
  const std::string d = v.get<std::string>();
  if (d == "FP32") return DataType::fp32;
  if (d == "UINT8") return DataType::uint8;
  if (d == "BYTES") return DataType::bytes;
  bad(fmt::format("input '{}': datatype '{}' is not one rn50 models take: FP32 [N,3,H,W] "
                  "(normalised), UINT8 [N,H,W,3] (RGB pixels) or BYTES [N] (JPEG/PNG files)",
                  input, d));
}

/// The shape's dimensions, checked: integers >= 1, the datatype's rank, the product in range.
std::vector<int64_t> parse_shape(const json& v, DataType t, const std::string& input,
                                 int64_t* elements) {
  if (!v.is_array()) bad(fmt::format("input '{}': \"shape\" must be an array of integers", input));
  const size_t rank = t == DataType::bytes ? 1 : 4;
  const char* want = t == DataType::fp32    ? "[N,3,H,W]"
                     : t == DataType::uint8 ? "[N,H,W,3]"
                                            : "[N]";
  if (v.size() != rank)
    bad(fmt::format("input '{}': shape {} has {} dimensions; {} takes {}", input, v.dump(),
                    v.size(), datatype_name(t), want));
  std::vector<int64_t> shape;
  int64_t n = 1;
  for (const json& d : v) {
    if (!d.is_number_integer())
      bad(fmt::format("input '{}': shape {} holds a non-integer", input, v.dump()));
    const int64_t x = d.get<int64_t>();
    if (x == 0 && shape.empty()) bad(fmt::format("input '{}': empty batch (shape {})", input, v.dump()));
    if (x < 1) bad(fmt::format("input '{}': shape {} has a dimension < 1", input, v.dump()));
    if (x > kMaxElements / n)
      bad(fmt::format("input '{}': shape {} has too many elements (over 2^31)", input, v.dump()));
    n *= x;
    shape.push_back(x);
  }
  if (t == DataType::fp32 && shape[1] != 3)
    bad(fmt::format("input '{}': FP32 shape {} must be [N,3,H,W] (NCHW, RGB)", input, v.dump()));
  if (t == DataType::uint8 && shape[3] != 3)
    bad(fmt::format("input '{}': UINT8 shape {} must be [N,H,W,3] (HWC, RGB)", input, v.dump()));
  *elements = n;
  return shape;
}

/// Appends the numbers of a (possibly nested) JSON array to `out`, at most `limit`.
void flatten(const json& v, std::vector<const json*>& out, size_t limit, const std::string& input) {
  if (!v.is_array()) {
    if (out.size() >= limit)
      bad(fmt::format("input '{}': \"data\" holds more elements than the shape", input));
    out.push_back(&v);
    return;
  }
  for (const json& e : v) flatten(e, out, limit, input);
}

uint32_t read_u32le(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // x86-64 and aarch64 are little-endian, as the protocol
}

/// The binary section, read in input order.
struct BinaryReader {
  std::string_view data;
  size_t offset = 0;
  std::string_view take(int64_t n, const std::string& what) {
    if (n < 0 || static_cast<uint64_t>(n) > data.size() - offset)
      bad(fmt::format("{}: binary_data_size {} is past the end of the binary data ({} bytes "
                      "left after the JSON header)",
                      what, n, data.size() - offset));
    std::string_view s = data.substr(offset, static_cast<size_t>(n));
    offset += static_cast<size_t>(n);
    return s;
  }
};

void read_binary(RequestInput& in, std::string_view raw, int64_t elements) {
  const std::string what = fmt::format("input '{}'", in.name);
  switch (in.datatype) {
    case DataType::fp32:
      if (static_cast<int64_t>(raw.size()) != elements * 4)
        bad(fmt::format("{}: binary_data_size {} does not match shape {} (FP32: {} bytes)", what,
                        raw.size(), json(in.shape).dump(), elements * 4));
      in.f32.resize(static_cast<size_t>(elements));
      std::memcpy(in.f32.data(), raw.data(), raw.size());
      return;
    case DataType::uint8:
      if (static_cast<int64_t>(raw.size()) != elements)
        bad(fmt::format("{}: binary_data_size {} does not match shape {} (UINT8: {} bytes)", what,
                        raw.size(), json(in.shape).dump(), elements));
      in.u8.assign(raw.begin(), raw.end());
      return;
    case DataType::bytes: {
      size_t at = 0;
      while (at < raw.size()) {
        if (raw.size() - at < 4)
          bad(fmt::format("{}: a BYTES element's 4-byte length is cut off", what));
        const uint32_t len = read_u32le(raw.data() + at);
        at += 4;
        if (len > raw.size() - at)
          bad(fmt::format("{}: BYTES element {} claims {} bytes, {} are left", what,
                          in.bytes.size(), len, raw.size() - at));
        in.bytes.emplace_back(raw.substr(at, len));
        at += len;
      }
      if (static_cast<int64_t>(in.bytes.size()) != elements)
        bad(fmt::format("{}: {} BYTES elements for shape {}", what, in.bytes.size(),
                        json(in.shape).dump()));
      return;
    }
  }
}

void read_json_data(RequestInput& in, const json& data, int64_t elements) {
  const std::string what = fmt::format("input '{}'", in.name);
  std::vector<const json*> items;
  items.reserve(static_cast<size_t>(std::min<int64_t>(elements, 1 << 20)));
  flatten(data, items, static_cast<size_t>(elements), in.name);
  if (static_cast<int64_t>(items.size()) != elements)
    bad(fmt::format("{}: \"data\" holds {} elements, shape {} needs {}", what, items.size(),
                    json(in.shape).dump(), elements));
  switch (in.datatype) {
    case DataType::fp32:
      in.f32.reserve(items.size());
      for (const json* e : items) {
        if (!e->is_number()) bad(fmt::format("{}: FP32 \"data\" holds a non-number", what));
        in.f32.push_back(e->get<float>());
      }
      return;
    case DataType::uint8:
      in.u8.reserve(items.size());
      for (const json* e : items) {
        if (!e->is_number_integer() || e->get<int64_t>() < 0 || e->get<int64_t>() > 255)
          bad(fmt::format("{}: UINT8 \"data\" holds {}, not an integer 0..255", what, e->dump()));
        in.u8.push_back(static_cast<uint8_t>(e->get<int64_t>()));
      }
      return;
    case DataType::bytes:
      for (const json* e : items) {
        if (!e->is_string())
          bad(fmt::format("{}: BYTES \"data\" holds {}, not a base64 string", what, e->dump()));
        in.bytes.push_back(base64_decode(e->get<std::string>(),
                                         fmt::format("{} element {}", what, in.bytes.size())));
      }
      return;
  }
}

RequestOutput parse_output(const json& o, bool binary_default) {
  if (!o.is_object()) bad("\"outputs\" must hold objects");
  RequestOutput out;
  out.binary = binary_default;
  if (!o.contains("name") || !o["name"].is_string()) bad("an output has no \"name\"");
  out.name = o["name"].get<std::string>();
  if (out.name != "logits")
    bad(fmt::format("output '{}': rn50 models have one output, 'logits'", out.name));
  if (o.contains("parameters")) {
    const json& p = o["parameters"];
    if (!p.is_object()) bad("output 'logits': \"parameters\" must be an object");
    if (p.contains("binary_data")) {
      if (!p["binary_data"].is_boolean()) bad("output 'logits': binary_data must be true or false");
      out.binary = p["binary_data"].get<bool>();
    }
    if (p.contains("classification")) {
      const json& k = p["classification"];
      if (!k.is_number_integer() || k.get<int64_t>() < 1 || k.get<int64_t>() > (1 << 20))
        bad(fmt::format("output 'logits': classification {} must be an integer >= 1", k.dump()));
      out.classification = static_cast<int>(k.get<int64_t>());
    }
  }
  return out;
}

}  // namespace

const char* datatype_name(DataType t) {
  switch (t) {
    case DataType::fp32: return "FP32";
    case DataType::uint8: return "UINT8";
    case DataType::bytes: return "BYTES";
  }
  return "?";
}

std::string base64_decode(std::string_view text, const std::string& what) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) bad(fmt::format("{}: not base64 (bad length)", what));
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) bad(fmt::format("{}: not base64 (character '{}')", what, c));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

InferRequest parse_infer_request(std::string_view body, std::optional<int64_t> header_length,
                                 int64_t max_batch) {
  std::string_view json_text = body;
  BinaryReader bin;
  if (header_length) {
    if (*header_length < 0 || static_cast<uint64_t>(*header_length) > body.size())
      bad(fmt::format("Inference-Header-Content-Length {} is past the body's {} bytes",
                      *header_length, body.size()));
    json_text = body.substr(0, static_cast<size_t>(*header_length));
    bin.data = body.substr(static_cast<size_t>(*header_length));
  }
  json j;
  try {
    // Nesting is bounded: copying or dumping a value recurses (a body of a million '[' would
    // overflow the stack in flatten() or in an error message's dump()).
    j = json::parse(json_text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        bad(fmt::format("the request's JSON is nested deeper than {} levels", kMaxJsonDepth));
      return true;
    });
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    bad(fmt::format("the request is not valid JSON ({}){}", e.what(),
                    header_length ? "" : "; binary tensors need the Inference-Header-Content-Length "
                                         "header"));
  }
  if (!j.is_object()) bad("the request must be a JSON object with \"inputs\"");
  InferRequest r;
  if (j.contains("id")) {
    if (!j["id"].is_string()) bad("\"id\" must be a string");
    r.id = j["id"].get<std::string>();
  }
  if (!j.contains("inputs") || !j["inputs"].is_array() || j["inputs"].empty())
    bad("the request has no \"inputs\" (an array with one input tensor)");
  if (j["inputs"].size() != 1)
    bad(fmt::format("{} inputs given; rn50 models take one (FP32, UINT8 or BYTES)",
                    j["inputs"].size()));
  const json& i = j["inputs"][0];
  if (!i.is_object()) bad("an input must be an object with name, datatype, shape and data");
  RequestInput& in = r.input;
  if (!i.contains("name") || !i["name"].is_string()) bad("the input has no \"name\"");
  in.name = i["name"].get<std::string>();
  if (!i.contains("datatype")) bad(fmt::format("input '{}' has no \"datatype\"", in.name));
  in.datatype = parse_datatype(i["datatype"], in.name);
  if (!i.contains("shape")) bad(fmt::format("input '{}' has no \"shape\"", in.name));
  int64_t elements = 0;
  in.shape = parse_shape(i["shape"], in.datatype, in.name, &elements);
  if (in.shape[0] > max_batch)
    bad(fmt::format("input '{}': batch {} is over the server's --max-batch-size {}", in.name,
                    in.shape[0], max_batch));
  const json* params = i.contains("parameters") ? &i["parameters"] : nullptr;
  if (params && !params->is_object())
    bad(fmt::format("input '{}': \"parameters\" must be an object", in.name));
  if (params && params->contains("binary_data_size")) {
    const json& s = (*params)["binary_data_size"];
    if (!header_length)
      bad(fmt::format("input '{}': binary_data_size without the Inference-Header-Content-Length "
                      "header",
                      in.name));
    if (!s.is_number_integer())
      bad(fmt::format("input '{}': binary_data_size must be an integer", in.name));
    read_binary(in, bin.take(s.get<int64_t>(), fmt::format("input '{}'", in.name)), elements);
  } else {
    if (!i.contains("data"))
      bad(fmt::format("input '{}' has neither \"data\" nor a binary_data_size", in.name));
    read_json_data(in, i["data"], elements);
  }
  if (bin.offset != bin.data.size())
    bad(fmt::format("{} bytes follow the inputs' binary data", bin.data.size() - bin.offset));
  bool binary_default = false;
  if (j.contains("parameters")) {
    const json& p = j["parameters"];
    if (!p.is_object()) bad("\"parameters\" must be an object");
    if (p.contains("binary_data_output")) {
      if (!p["binary_data_output"].is_boolean()) bad("binary_data_output must be true or false");
      binary_default = p["binary_data_output"].get<bool>();
    }
  }
  if (j.contains("outputs")) {
    if (!j["outputs"].is_array()) bad("\"outputs\" must be an array");
    for (const json& o : j["outputs"]) r.outputs.push_back(parse_output(o, binary_default));
  } else if (binary_default) {
    RequestOutput o;
    o.binary = true;
    r.outputs.push_back(o);
  }
  return r;
}

std::string error_body(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

InferResponse make_infer_response(const std::string& model, const InferRequest& request,
                                  const std::vector<float>& logits, int64_t n, int64_t classes,
                                  const std::vector<std::string>& class_names) {
  nlohmann::ordered_json h;
  h["model_name"] = model;
  h["model_version"] = "1";
  if (!request.id.empty()) h["id"] = request.id;
  std::vector<RequestOutput> outs = request.outputs;
  if (outs.empty()) outs.push_back(RequestOutput{});
  std::string binary;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const RequestOutput& o : outs) {
    nlohmann::ordered_json t;
    t["name"] = o.name;
    if (o.classification > 0) {
      const int64_t k = std::min<int64_t>(o.classification, classes);
      std::vector<std::string> strings;
      std::vector<int64_t> idx(static_cast<size_t>(classes));
      for (int64_t b = 0; b < n; ++b) {
        const float* row = logits.data() + b * classes;
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t c) {
          return row[a] > row[c] || (row[a] == row[c] && a < c);
        });
        for (int64_t r = 0; r < k; ++r) {
          const int64_t c = idx[static_cast<size_t>(r)];
          const bool named = c < static_cast<int64_t>(class_names.size());
          strings.push_back(named ? fmt::format("{}:{}:{}", row[c], c, class_names[c])
                                  : fmt::format("{}:{}", row[c], c));
        }
      }
      t["datatype"] = "BYTES";
      t["shape"] = {n, k};
      if (o.binary) {
        const size_t start = binary.size();
        for (const std::string& s : strings) {
          const uint32_t len = static_cast<uint32_t>(s.size());
          binary.append(reinterpret_cast<const char*>(&len), 4);
          binary += s;
        }
        t["parameters"] = {{"binary_data_size", binary.size() - start}};
      } else {
        t["data"] = strings;
      }
    } else {
      t["datatype"] = "FP32";
      t["shape"] = {n, classes};
      if (o.binary) {
        binary.append(reinterpret_cast<const char*>(logits.data()), logits.size() * 4);
        t["parameters"] = {{"binary_data_size", logits.size() * 4}};
      } else {
        t["data"] = logits;
      }
    }
    list.push_back(std::move(t));
  }
  h["outputs"] = std::move(list);
  InferResponse r;
  r.body = h.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  if (!binary.empty()) {
    r.header_length = static_cast<int64_t>(r.body.size());
    r.body += binary;
  }
  return r;
}

}  // namespace rn50::serve
