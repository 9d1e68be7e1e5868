#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/fileio.h"
#include "core/json_value.h"

namespace rn50 {

static DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"F64", DType::f64},
      {"U8", DType::u8},   {"I32", DType::i32}, {"I64", DType::i64}};
  for (auto& [n, t] : table)
    if (s == n) return t;
  RN50_FAIL("{}: tensor '{}' has unsupported dtype '{}'", path, name, s);
}

nlohmann::json FileDigest::to_json() const {
  return {{"bytes", bytes}, {"crc32c", fmt::format("{:08x}", crc32c)}};
}

FileDigest FileDigest::from_json(const nlohmann::json& j, const std::string& what) {
  FileDigest d;
  const bool ok = j.is_object() && j.contains("bytes") && j["bytes"].is_number_integer() &&
                  j["bytes"].get<int64_t>() >= 0 && j.contains("crc32c") &&
                  j["crc32c"].is_string() && j["crc32c"].get<std::string>().size() == 8 &&
                  j["crc32c"].get<std::string>().find_first_not_of("0123456789abcdef") ==
                      std::string::npos;
  RN50_CHECK(ok, "{}: expected {{\"bytes\": N, \"crc32c\": \"8 hex digits\"}}, got {}", what,
             j.dump());
  d.bytes = j["bytes"].get<int64_t>();
  d.crc32c = static_cast<uint32_t>(std::stoul(j["crc32c"].get<std::string>(), nullptr, 16));
  return d;
}

FileDigest save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  size_t offset = 0;
  std::vector<Tensor> rowmajor;
  for (auto& [name, t] : tensors) {
    RN50_CHECK(seen.insert(name).second, "{}: duplicate tensor name '{}'", path, name);
    RN50_CHECK(t.is_cpu(), "{}: tensor '{}' is on {}; copy it to the host first", path, name,
               t.device().str());
    Tensor r = (t.ndim() == 4 && t.layout() == Layout::NHWC) ? t.to_layout(Layout::NCHW) : t;
    header[name] = {{"dtype", dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + r.nbytes()}}};
    offset += r.nbytes();
    rowmajor.push_back(r);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += h;
  for (auto& r : rowmajor) out.append(static_cast<const char*>(r.data()), r.nbytes());
  write_file_atomic(path, out);
  return {static_cast<int64_t>(out.size()), crc32c(out.data(), out.size())};
}

SafeTensorsFile load_safetensors(const std::string& path, const FileDigest& expected,
                                 const std::string& recorded_in) {
  std::string bytes = read_file(path);
  if (expected.known()) {
    RN50_CHECK(static_cast<int64_t>(bytes.size()) == expected.bytes,
               "{}: {} bytes, but {} recorded {} when it was written: the file is damaged "
               "(truncated or changed since); use another checkpoint epoch or write it again",
               path, bytes.size(), recorded_in, expected.bytes);
    const uint32_t c = crc32c(bytes.data(), bytes.size());
    RN50_CHECK(c == expected.crc32c,
               "{}: CRC-32C {:08x}, but {} recorded {:08x} when it was written: the file is "
               "damaged (changed since); use another checkpoint epoch or write it again",
               path, c, recorded_in, expected.crc32c);
  }
  RN50_CHECK(bytes.size() >= 8, "{}: not a safetensors file (only {} bytes)", path, bytes.size());
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  RN50_CHECK(len <= bytes.size() - 8, "{}: header length {} exceeds the file size {}", path, len,
             bytes.size());
  nlohmann::json header;
  try {
    header = parse_json_limited(std::string_view(bytes).substr(8, len), path + ": header");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    RN50_FAIL("{}: header is not valid JSON: {}", path, e.what());
  }
  RN50_CHECK(header.is_object(), "{}: header is not a JSON object", path);
  const size_t data_begin = 8 + len;
  const size_t data_size = bytes.size() - data_begin;
  SafeTensorsFile f;
  std::vector<std::pair<size_t, std::string>> by_offset;
  for (auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : e.items())
        f.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    try {
      const std::string where = fmt::format("{}: tensor '{}'", path, name);
      DType dt = parse_dtype(json_as<std::string>(e.at("dtype"), where + " dtype"), path, name);
      auto shape = json_as<std::vector<int64_t>>(e.at("shape"), where + " shape");
      auto off = json_as<std::vector<uint64_t>>(e.at("data_offsets"), where + " data_offsets");
      RN50_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size,
                 "{}: tensor '{}' has data_offsets out of range (data section is {} bytes)", path,
                 name, data_size);
      // The size the shape needs, checked against the data before anything is allocated (a
      // damaged shape must not ask for terabytes or overflow).
      uint64_t need = dtype_size(dt);
      for (int64_t d : shape) {
        RN50_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension {} in its shape", path, name,
                   d);
        RN50_CHECK(!__builtin_mul_overflow(need, static_cast<uint64_t>(d), &need),
                   "{}: tensor '{}' has a shape too large to hold", path, name);
      }
      RN50_CHECK(need == off[1] - off[0],
                 "{}: tensor '{}' has {} bytes of data but shape/dtype need {}", path, name,
                 off[1] - off[0], need);
      Tensor t = Tensor::empty(shape, dt);
      std::memcpy(t.data(), bytes.data() + data_begin + off[0], t.nbytes());
      f.tensors[name] = t;
      by_offset.emplace_back(off[0], name);
    } catch (const nlohmann::json::exception& ex) {
      RN50_FAIL("{}: malformed entry for tensor '{}': {}", path, name, ex.what());
    }
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (auto& [o, n] : by_offset) f.order.push_back(n);
  return f;
}

}  // namespace rn50
