// rn50 fuzz harnesses: one function per reader of outside bytes. Each feeds `size` bytes at
// `data` to its reader (through a scratch file for readers that take a path) and lets the
// reader's rn50::Error out; any other exception is a finding. libFuzzer runs them through
// RN50_FUZZ_MAIN (fuzz/fuzz_util.h); tests/test_fuzz_regressions.cpp runs the saved inputs of
// tests/fuzz_regressions/<name>/ through them in the normal test suite.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rn50::fuzz {

/// read_image_header + decode_image (whole JPEG/PNG) + the eval and train transforms.
void fuzz_decode_image(const uint8_t* data, size_t size);
/// decode_jpeg_region / decode_png_reduced with a plan from the last 4 bytes, + resized_crop.
void fuzz_decode_region(const uint8_t* data, size_t size);
/// validate_image_bytes (rn50 check-data), without and with decoding.
void fuzz_validate_image(const uint8_t* data, size_t size);
/// A TFRecord shard: scan_tfrecord, tfrecord_samples and every sample's read.
void fuzz_tfrecord(const uint8_t* data, size_t size);
/// parse_example on a record payload.
void fuzz_example(const uint8_t* data, size_t size);
/// read_dali_index, then the input as a valid shard's DALI index.
void fuzz_dali_index(const uint8_t* data, size_t size);
/// A tar shard: scan_tar, webdataset_samples and every sample's read.
void fuzz_tar(const uint8_t* data, size_t size);
/// file_list_samples (PaddleClas lists) and the samples' names and reads.
void fuzz_file_list(const uint8_t* data, size_t size);
/// load_safetensors.
void fuzz_safetensors(const uint8_t* data, size_t size);
/// load_inference_model on model.json + model.safetensors split from the input.
void fuzz_model_io(const uint8_t* data, size_t size);
/// read_checkpoint_state on a state.json.
void fuzz_checkpoint_state(const uint8_t* data, size_t size);
/// apply_config_file (--config TOML/INI/JSON) for rn50 train and rn50 eval.
void fuzz_config(const uint8_t* data, size_t size);
/// load_report_inputs on one result file (report records, DLLogger lines).
void fuzz_report(const uint8_t* data, size_t size);
/// parse_infer_request (rn50 serve: JSON and binary-extension bodies) + make_infer_response;
/// built only with the server (RN50_HAVE_SERVE).
void fuzz_serve_protocol(const uint8_t* data, size_t size);

}  // namespace rn50::fuzz
