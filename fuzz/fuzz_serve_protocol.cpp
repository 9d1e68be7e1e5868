// Fuzzes rn50 serve's request parsing (Open Inference Protocol v2 over REST):
// parse_infer_request on a body (JSON inputs, shapes, datatypes, base64 BYTES, the binary
// extension's header length and binary_data_size sections), then make_infer_response for the
// parsed request. The first byte picks the header length: 0 = none (all JSON), 1 = the int64
// in bytes 1..8 (any value, negative or past the body), 2 = the JSON header ends at the body's
// first NUL byte, which separates it from the binary section (and is dropped).
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "serve/protocol.h"

namespace rn50::fuzz {

void fuzz_serve_protocol(const uint8_t* data, size_t size) {
  using namespace rn50::serve;
  if (size < 1) return;
  const uint8_t mode = data[0] % 3;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  std::optional<int64_t> header_length;
  if (mode == 1) {
    if (body.size() < 8) return;
    int64_t n = 0;
    std::memcpy(&n, body.data(), 8);
    body.remove_prefix(8);
    header_length = n;
  }
  std::string joined;
  if (mode == 2) {
    const size_t nul = body.find('\0');
    if (nul == std::string_view::npos) return;
    joined = std::string(body.substr(0, nul)) + std::string(body.substr(nul + 1));
    header_length = static_cast<int64_t>(nul);
    body = joined;
  }
  const InferRequest r = parse_infer_request(body, header_length, 8);
  const int64_t n = r.input.batch();
  if (n < 1 || n > 8) fail("fuzz_serve_protocol: batch outside 1..max_batch");
  const int64_t classes = 3;
  const std::vector<float> logits(static_cast<size_t>(n * classes), 0.25f);
  (void)make_infer_response("rn50", r, logits, n, classes, {"a", "b"});
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_serve_protocol)
