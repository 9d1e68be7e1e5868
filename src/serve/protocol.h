// rn50 serve: KServe's Open Inference Protocol v2 (REST) as Triton speaks it — the /infer
// request in its JSON form and in Triton's binary tensor extension, the response (logits, or
// the classification extension's "score:index:label" strings), model metadata, and the errors
// a request can cause (HttpError: an HTTP status with a message naming the field).
//   Request:  {"id"?, "inputs": [{"name", "datatype", "shape", "data"? , "parameters"?:
//              {"binary_data_size"}}], "outputs"?: [{"name", "parameters"?: {"binary_data",
//              "classification"}}], "parameters"?: {"binary_data_output"}}
//   Binary:   the JSON header (Inference-Header-Content-Length bytes), then each input with
//              binary_data_size, in input order, little-endian; a BYTES element is a 4-byte
//              little-endian length and its bytes.
// Sources: https://github.com/kserve/open-inference-protocol (REST), Triton's
// docs/protocol/extension_binary_data.md and extension_classification.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rn50/error.h"

namespace rn50::serve {

/// An error a request causes: `status` (400 bad request, 404 unknown model or path, 413 too
/// large, 503 queue full or not ready, 504 deadline passed) and what() naming the problem.
class HttpError : public Error {
 public:
  HttpError(int status, const std::string& message) : Error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

/// The tensor datatypes an rn50 model takes.
enum class DataType {
  fp32,   ///< FP32 [N, 3, H, W]: normalised images, NCHW (as the ONNX export's input)
  uint8,  ///< UINT8 [N, H, W, 3]: RGB pixels, HWC; rn50 resizes, crops and normalises
  bytes,  ///< BYTES [N]: encoded JPEG or PNG files; rn50 decodes and preprocesses
};
/// "FP32", "UINT8", "BYTES".
const char* datatype_name(DataType t);

/// The one input of a request, its elements decoded from JSON or the binary section.
struct RequestInput {
  std::string name;
  DataType datatype = DataType::fp32;
  std::vector<int64_t> shape;
  std::vector<float> f32;          ///< fp32: the elements, row-major
  std::vector<uint8_t> u8;         ///< uint8: the elements, row-major
  std::vector<std::string> bytes;  ///< bytes: one encoded image file per element
  /// Images in the batch (shape[0]).
  int64_t batch() const { return shape.empty() ? 0 : shape[0]; }
};

/// One requested output ("logits"), as binary data or as classification strings.
struct RequestOutput {
  std::string name = "logits";
  bool binary = false;     ///< "parameters": {"binary_data": true}
  int classification = 0;  ///< "parameters": {"classification": K}: top-K strings instead
};

struct InferRequest {
  std::string id;  ///< echoed in the response when given
  RequestInput input;
  /// The outputs asked for; none = "logits" as JSON (binary with binary_data_output).
  std::vector<RequestOutput> outputs;
};

/// Parses an /infer body. `header_length`: the Inference-Header-Content-Length header's value
/// when given (the binary extension), else the whole body is JSON. `max_batch` bounds shape[0].
/// Checks the request as a whole: one input; a datatype of DataType; a shape of the datatype's
/// rank with positive dimensions whose product fits (N <= max_batch); data in JSON (flat or
/// nested arrays; BYTES elements base64-encoded) or binary_data_size bytes in the binary
/// section matching the shape (BYTES: length-prefixed elements, exactly N of them); outputs
/// named "logits" with a classification K >= 1. Throws HttpError 400 naming the field.
InferRequest parse_infer_request(std::string_view body, std::optional<int64_t> header_length,
                                 int64_t max_batch);

/// A response body: JSON, or (binary outputs) its JSON header followed by the binary data.
struct InferResponse {
  std::string body;
  int64_t header_length = -1;  ///< the JSON header's bytes when binary data follows, else -1
};

/// The /infer response for `logits` (n x classes, row-major): one output per requested one
/// ("logits" FP32 [n, classes], as JSON numbers or binary_data_size bytes; or, with
/// classification K, BYTES [n, K] strings "score:index:label", score the logit as Triton
/// writes it, label the class name when `class_names` has one). The order of the requested
/// outputs is kept; no outputs requested = logits as JSON.
InferResponse make_infer_response(const std::string& model, const InferRequest& request,
                                  const std::vector<float>& logits, int64_t n, int64_t classes,
                                  const std::vector<std::string>& class_names);

/// {"error": message}.
std::string error_body(const std::string& message);

/// The base64 decoding of `text` (RFC 4648, '=' padding optional, whitespace not allowed).
/// Throws HttpError 400 naming `what` when `text` is not base64.
std::string base64_decode(std::string_view text, const std::string& what);

}  // namespace rn50::serve
