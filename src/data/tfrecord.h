// rn50 data: TFRecord shards of ImageNet, as DLE TensorFlow trains from them (the standard
// conversion, build_imagenet_data.py: shards train-00000-of-01024 ..., validation-00000-of-00128,
// each record a tf.train.Example with image/encoded (JPEG), image/class/label (1..1000),
// image/class/synset, image/filename, ...), with DALI's index files (tfrecord2idx: one
// "offset size" line per record, size = the whole frame).
//
// Framing (tensorflow/core/lib/io/record_writer.cc): u64 length | u32 masked_crc32c(length) |
// data | u32 masked_crc32c(data), little-endian; CRC-32C (Castagnoli, reflected polynomial
// 0x82F63B78), masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
// The Example is decoded by a small protobuf wire-format reader (varints and length-delimited
// fields, tensorflow/core/example/{example,feature}.proto) rather than libprotobuf: libprotobuf
// would need the .proto files compiled by protoc into generated classes and a copy of every
// record into them, where two fields are read here in place from the record's bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/crc32c.h"
#include "data/sample_index.h"

namespace rn50::data {

/// TFRecord's masked form of the CRC-32C (core/crc32c.h) of `n` bytes: rotated right by 15
/// bits plus 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h Mask).
uint32_t masked_crc32c(const uint8_t* data, size_t n);

/// One record's frame in a shard: its byte offset and size (12 + length + 4), DALI's "offset
/// size".
struct RecordSpan {
  int64_t offset = 0, size = 0;
};

/// The frames of TFRecord file `path`, read in one pass (each length's CRC checked; a data CRC
/// is checked when the record is read). A frame cut off by the end of the file ends the list
/// and is reported in `problems` ("path@offset: ..."), as is a length whose CRC fails (the rest
/// of the file cannot be framed then). Throws rn50::Error naming the file when it cannot be read.
std::vector<RecordSpan> scan_tfrecord(const std::string& path, std::vector<std::string>* problems);

/// DALI's index file: one "offset size" line per record. read_dali_index throws rn50::Error
/// naming the file and line for a malformed line; write_dali_index writes atomically.
std::vector<RecordSpan> read_dali_index(const std::string& path);
void write_dali_index(const std::string& path, const std::vector<RecordSpan>& spans);

/// The fields of a tf.train.Example that rn50 reads.
struct ExampleFields {
  std::string_view encoded;  ///< image/encoded: the image file's bytes (into the record)
  int64_t label = -1;        ///< image/class/label, as stored (the conversion's 1..1000)
  bool has_label = false;
  std::string_view synset;   ///< image/class/synset, when present
};

/// Decodes a serialized tf.train.Example (`n` bytes). Throws rn50::Error naming `what` when
/// the bytes are not a well-formed Example or image/encoded is missing.
ExampleFields parse_example(const uint8_t* data, size_t n, const std::string& what);

/// A serialized tf.train.Example with image/encoded, image/class/label, image/class/synset and
/// image/filename (as the standard conversion writes them; bytes features, the label int64).
std::string encode_example(std::string_view image, int64_t label, std::string_view synset,
                           std::string_view filename);

/// Appends one framed record holding `payload` to `out`.
void append_record(std::string& out, std::string_view payload);

struct TfrecordOptions {
  /// Folder of DALI index files named <shard file name>.idx; empty = built by scanning. When
  /// given and a shard's index is missing, it is built and written there.
  std::string idx_dir;
  /// Subtracted from image/class/label (the standard conversion's labels are 1..1000; DLE
  /// subtracts 1).
  int label_offset = 1;
  /// Classes: 0 = manifest.json's class list beside the shards (rn50 convert-data), else 1000.
  int num_classes = 0;
};

/// The TFRecord shards of `split` in folder `dir`: files named train-NNNNN-of-MMMMM (train) or
/// validation-NNNNN-of-MMMMM (val) in name order. A record that fails its CRCs, a frame cut
/// off, an Example without image/encoded or a label out of range is read as a bad sample,
/// named shard@offset. Throws rn50::Error naming the folder when it holds no such shard, or an
/// index file that does not match its shard.
std::shared_ptr<const SampleIndex> tfrecord_samples(const std::string& dir, Split split,
                                                    const TfrecordOptions& opt);

/// The shard file names of `split` in `dir` (sorted), or none.
std::vector<std::string> tfrecord_shards(const std::string& dir, Split split);

}  // namespace rn50::data
