#include "data/tfrecord.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/fileio.h"
#include "data/manifest.h"

namespace rn50::data {

namespace fs = std::filesystem;

namespace {

uint64_t read_u64le(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t read_u32le(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}


// ---- the protobuf wire format: varints and length-delimited fields ----

struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& what;
  [[noreturn]] void bad(const char* why) const {
    RN50_FAIL("{}: not a tf.train.Example ({})", what, why);
  }
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) bad("a varint runs past the end");
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("a varint is longer than 10 bytes");
  }
  /// A length-delimited field's bytes.
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end - p)) bad("a field runs past the end");
    std::string_view s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
  /// Skips a field of wire type `type`.
  void skip(uint32_t type) {
    switch (type) {
      case 0: varint(); return;
      case 1: advance(8); return;
      case 2: bytes(); return;
      case 5: advance(4); return;
      default: bad("an unknown wire type");
    }
  }
  void advance(size_t n) {
    if (n > static_cast<size_t>(end - p)) bad("a field runs past the end");
    p += n;
  }
};

Wire sub(std::string_view s, const std::string& what) {
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  return Wire{b, b + s.size(), what};
}

/// Feature { oneof: bytes_list = 1 (BytesList { repeated bytes value = 1 }), float_list = 2,
/// int64_list = 3 (Int64List { repeated int64 value = 1, packed or not }) }: its first bytes
/// value and/or its first int64 value.
void read_feature(std::string_view feature, const std::string& what, std::string_view* bytes,
                  int64_t* int64, bool* has_int64) {
  Wire f = sub(feature, what);
  while (!f.done()) {
    const uint64_t key = f.varint();
    const uint32_t field = static_cast<uint32_t>(key >> 3), type = key & 7;
    if (type != 2) {
      f.skip(type);
      continue;
    }
    std::string_view list = f.bytes();
    Wire l = sub(list, what);
    while (!l.done()) {
      const uint64_t k = l.varint();
      const uint32_t lf = static_cast<uint32_t>(k >> 3), lt = k & 7;
      if (field == 1 && lf == 1 && lt == 2) {
        const std::string_view v = l.bytes();
        if (bytes && bytes->empty()) *bytes = v;
      } else if (field == 3 && lf == 1 && lt == 0) {
        const int64_t v = static_cast<int64_t>(l.varint());
        if (int64 && !*has_int64) *int64 = v, *has_int64 = true;
      } else if (field == 3 && lf == 1 && lt == 2) {  // packed int64
        Wire packed = sub(l.bytes(), what);
        if (!packed.done() && int64 && !*has_int64) {
          *int64 = static_cast<int64_t>(packed.varint());
          *has_int64 = true;
        }
      } else {
        l.skip(lt);
      }
    }
  }
}

}  // namespace

uint32_t masked_crc32c(const uint8_t* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::vector<RecordSpan> scan_tfrecord(const std::string& path,
                                      std::vector<std::string>* problems) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  RN50_CHECK(fd >= 0, "TFRecord shard '{}': cannot open it ({})", path, std::strerror(errno));
  const int64_t size = static_cast<int64_t>(::lseek(fd, 0, SEEK_END));
  std::vector<RecordSpan> spans;
  int64_t at = 0;
  uint8_t head[12];
  while (at < size) {
    if (pread_full(fd, head, 12, at) != 12) {
      if (problems) problems->push_back(fmt::format("{}@{}: a record header cut off", path, at));
      break;
    }
    const uint64_t len = read_u64le(head);
    if (read_u32le(head + 8) != masked_crc32c(head, 8)) {
      if (problems)
        problems->push_back(
            fmt::format("{}@{}: the record length's CRC fails; the rest of the shard ({} bytes) "
                        "cannot be framed",
                        path, at, size - at));
      break;
    }
    // len is checked against the file before it is added to anything (it may be up to 2^64 - 1).
    if (len > static_cast<uint64_t>(size - at) || 16 + static_cast<int64_t>(len) > size - at) {
      if (problems)
        problems->push_back(fmt::format("{}@{}: a record of {} bytes cut off by the end of the "
                                        "shard",
                                        path, at, len));
      break;
    }
    const int64_t frame = 12 + static_cast<int64_t>(len) + 4;
    spans.push_back({at, frame});
    at += frame;
  }
  ::close(fd);
  return spans;
}

std::vector<RecordSpan> read_dali_index(const std::string& path) {
  std::ifstream f(path);
  RN50_CHECK(f.good(), "index file '{}': cannot open it", path);
  std::vector<RecordSpan> spans;
  std::string line;
  for (int lineno = 1; std::getline(f, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream in(line);
    RecordSpan s;
    std::string extra;
    RN50_CHECK((in >> s.offset >> s.size) && !(in >> extra) && s.offset >= 0 && s.size >= 16,
               "index file '{}' line {}: expected 'offset size' (DALI tfrecord2idx), got '{}'",
               path, lineno, line);
    spans.push_back(s);
  }
  return spans;
}

void write_dali_index(const std::string& path, const std::vector<RecordSpan>& spans) {
  std::string text;
  for (const RecordSpan& s : spans) text += fmt::format("{} {}\n", s.offset, s.size);
  write_file_atomic(path, text);
}

ExampleFields parse_example(const uint8_t* data, size_t n, const std::string& what) {
  ExampleFields out;
  Wire ex{data, data + n, what};
  while (!ex.done()) {
    const uint64_t key = ex.varint();
    if ((key >> 3) != 1 || (key & 7) != 2) {  // Example.features
      ex.skip(static_cast<uint32_t>(key & 7));
      continue;
    }
    Wire features = sub(ex.bytes(), what);
    while (!features.done()) {
      const uint64_t fk = features.varint();
      if ((fk >> 3) != 1 || (fk & 7) != 2) {  // Features.feature (map entries)
        features.skip(static_cast<uint32_t>(fk & 7));
        continue;
      }
      Wire entry = sub(features.bytes(), what);
      std::string_view name, value;
      while (!entry.done()) {
        const uint64_t ek = entry.varint();
        if ((ek & 7) == 2 && (ek >> 3) == 1) {
          name = entry.bytes();
        } else if ((ek & 7) == 2 && (ek >> 3) == 2) {
          value = entry.bytes();
        } else {
          entry.skip(static_cast<uint32_t>(ek & 7));
        }
      }
      if (name == "image/encoded") read_feature(value, what, &out.encoded, nullptr, nullptr);
      else if (name == "image/class/label")
        read_feature(value, what, nullptr, &out.label, &out.has_label);
      else if (name == "image/class/synset")
        read_feature(value, what, &out.synset, nullptr, nullptr);
    }
  }
  RN50_CHECK(!out.encoded.empty(), "{}: the Example has no image/encoded bytes", what);
  return out;
}

namespace {

void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}
void put_bytes(std::string& s, uint32_t field, std::string_view b) {
  put_varint(s, (field << 3) | 2);
  put_varint(s, b.size());
  s.append(b);
}
/// A Features map entry named `name` whose Feature is `feature`.
void put_entry(std::string& features, std::string_view name, const std::string& feature) {
  std::string entry;
  put_bytes(entry, 1, name);
  put_bytes(entry, 2, feature);
  put_bytes(features, 1, entry);
}
std::string bytes_feature(std::string_view v) {
  std::string list, feature;
  put_bytes(list, 1, v);
  put_bytes(feature, 1, list);
  return feature;
}
std::string int64_feature(int64_t v) {
  std::string packed, list, feature;
  put_varint(packed, static_cast<uint64_t>(v));
  put_bytes(list, 1, packed);
  put_bytes(feature, 3, list);
  return feature;
}

}  // namespace

std::string encode_example(std::string_view image, int64_t label, std::string_view synset,
                           std::string_view filename) {
  std::string features;
  put_entry(features, "image/encoded", bytes_feature(image));
  put_entry(features, "image/class/label", int64_feature(label));
  put_entry(features, "image/class/synset", bytes_feature(synset));
  put_entry(features, "image/filename", bytes_feature(filename));
  std::string example;
  put_bytes(example, 1, features);
  return example;
}

void append_record(std::string& out, std::string_view payload) {
  uint8_t head[12];
  const uint64_t len = payload.size();
  std::memcpy(head, &len, 8);
  const uint32_t lc = masked_crc32c(head, 8);
  std::memcpy(head + 8, &lc, 4);
  out.append(reinterpret_cast<const char*>(head), 12);
  out.append(payload);
  const uint32_t dc = masked_crc32c(reinterpret_cast<const uint8_t*>(payload.data()),
                                    payload.size());
  out.append(reinterpret_cast<const char*>(&dc), 4);
}

std::vector<std::string> tfrecord_shards(const std::string& dir, Split split) {
  static const std::regex train(R"(train-\d+-of-\d+)"), val(R"(validation-\d+-of-\d+)");
  std::vector<std::string> shards;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (it->is_regular_file() && std::regex_match(n, split == Split::train ? train : val))
      shards.push_back(it->path().string());
  }
  std::sort(shards.begin(), shards.end());
  return shards;
}

namespace {

class TfrecordSamples final : public SampleIndex {
 public:
  TfrecordSamples(const std::string& dir, Split split, const TfrecordOptions& opt)
      : label_offset_(opt.label_offset) {
    shards_ = tfrecord_shards(dir, split);
    RN50_CHECK(!shards_.empty(),
               "'{}' holds no TFRecord shard of the {} split (files named {}-NNNNN-of-NNNNN, as "
               "the standard ImageNet conversion and rn50 convert-data write them)",
               dir, split == Split::train ? "train" : "validation",
               split == Split::train ? "train" : "validation");
    classes_ = manifest_classes(dir);
    if (classes_.empty()) {
      const int n = opt.num_classes > 0 ? opt.num_classes : 1000;
      for (int c = 0; c < n; ++c) classes_.push_back(fmt::format("class_{}", c));
    }
    for (size_t s = 0; s < shards_.size(); ++s) {
      starts_.push_back(static_cast<int64_t>(records_.size()));
      std::vector<std::string> problems;
      std::vector<RecordSpan> spans;
      const std::string idx =
          opt.idx_dir.empty()
              ? std::string()
              : (fs::path(opt.idx_dir) / (fs::path(shards_[s]).filename().string() + ".idx"))
                    .string();
      if (!idx.empty() && fs::exists(idx)) {
        spans = read_dali_index(idx);
        const auto size = static_cast<int64_t>(fs::file_size(shards_[s]));
        for (const RecordSpan& r : spans)
          RN50_CHECK(r.size <= size && r.offset <= size - r.size,
                     "index file '{}' does not match '{}': a record at {} of {} bytes ends past "
                     "the shard's {} bytes; delete the index to rebuild it",
                     idx, shards_[s], r.offset, r.size, size);
      } else {
        spans = scan_tfrecord(shards_[s], &problems);
        if (!idx.empty()) write_dali_index(idx, spans);
      }
      for (const RecordSpan& r : spans) records_.push_back({s, r, std::string()});
      // What could not be framed is one bad sample, named where it starts.
      for (std::string& p : problems) records_.push_back({s, RecordSpan{-1, 0}, std::move(p)});
    }
    starts_.push_back(static_cast<int64_t>(records_.size()));
  }

  int64_t size() const override { return static_cast<int64_t>(records_.size()); }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::vector<int64_t> shard_starts() const override {
    return std::vector<int64_t>(starts_.begin(), starts_.end() - 1);
  }
  std::vector<std::string> shard_names() const override { return shards_; }
  std::string name(int64_t i) const override {
    const Record& r = records_[static_cast<size_t>(i)];
    if (r.broken.empty()) return fmt::format("{}@{}", shards_[r.shard], r.span.offset);
    return r.broken.substr(0, r.broken.find(": ", shards_[r.shard].size()));  // "shard@offset"
  }

  int read(int64_t i, std::vector<uint8_t>& bytes) const override {
    const Record& r = records_[static_cast<size_t>(i)];
    const std::string what = name(i);
    RN50_CHECK(r.broken.empty(), "{}", r.broken);
    thread_local std::vector<uint8_t> frame;
    frame.resize(static_cast<size_t>(r.span.size));
    const int fd = ::open(shards_[r.shard].c_str(), O_RDONLY);
    RN50_CHECK(fd >= 0, "{}: cannot open the shard ({})", what, std::strerror(errno));
    const bool ok = pread_full(fd, frame.data(), frame.size(), r.span.offset) == frame.size();
    ::close(fd);
    RN50_CHECK(ok, "{}: the record is cut off by the end of the shard", what);
    const uint64_t len = read_u64le(frame.data());
    RN50_CHECK(len == static_cast<uint64_t>(r.span.size) - 16 &&
                   read_u32le(frame.data() + 8) == masked_crc32c(frame.data(), 8),
               "{}: the record's length or its CRC does not match the index", what);
    const uint8_t* payload = frame.data() + 12;
    RN50_CHECK(read_u32le(payload + len) == masked_crc32c(payload, len),
               "{}: the record's data CRC fails (damaged record)", what);
    const ExampleFields ex = parse_example(payload, len, what);
    RN50_CHECK(ex.has_label, "{}: the Example has no image/class/label", what);
    int64_t label = -1;  // ex.label is any int64 the record holds: subtract without overflow
    if (__builtin_sub_overflow(ex.label, int64_t{label_offset_}, &label)) label = -1;
    RN50_CHECK(label >= 0 && label < static_cast<int64_t>(classes_.size()),
               "{}: label {} (minus --label-offset {}) is outside the {} classes", what, ex.label,
               label_offset_, classes_.size());
    bytes.assign(ex.encoded.begin(), ex.encoded.end());
    return static_cast<int>(label);
  }

 private:
  struct Record {
    size_t shard;
    RecordSpan span;
    std::string broken;  ///< why the frame at this place could not be indexed, or empty
  };
  int label_offset_;
  std::vector<std::string> shards_, classes_;
  std::vector<Record> records_;
  std::vector<int64_t> starts_;
};

}  // namespace

std::shared_ptr<const SampleIndex> tfrecord_samples(const std::string& dir, Split split,
                                                    const TfrecordOptions& opt) {
  return std::make_shared<TfrecordSamples>(dir, split, opt);
}

}  // namespace rn50::data
