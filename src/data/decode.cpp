// rn50 data: file reading and decoder dispatch by magic bytes.
#include "data/decode.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <sys/stat.h>

#include "core/check.h"

namespace rn50::data {

ImageFormat sniff_format(const uint8_t* data, size_t size) {
  static constexpr uint8_t kJpeg[] = {0xFF, 0xD8, 0xFF};
  static constexpr uint8_t kPng[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= sizeof(kJpeg) && std::memcmp(data, kJpeg, sizeof(kJpeg)) == 0) {
    return ImageFormat::jpeg;
  }
  if (size >= sizeof(kPng) && std::memcmp(data, kPng, sizeof(kPng)) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

void read_file(const std::string& path, std::vector<uint8_t>& out) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  RN50_CHECK(f != nullptr, "cannot open image file '{}': {}", path, std::strerror(errno));
  // A folder opens too, and its "size" from fseek/ftell is meaningless (LONG_MAX on ext4).
  struct stat st {};
  RN50_CHECK(::fstat(::fileno(f.get()), &st) == 0, "cannot stat image file '{}': {}", path,
             std::strerror(errno));
  RN50_CHECK(S_ISREG(st.st_mode), "cannot read image file '{}': it is {}", path,
             S_ISDIR(st.st_mode) ? "a folder" : "not a regular file");
  RN50_CHECK(std::fseek(f.get(), 0, SEEK_END) == 0, "cannot seek in '{}': {}", path,
             std::strerror(errno));
  const long size = std::ftell(f.get());
  RN50_CHECK(size >= 0, "cannot get the size of '{}': {}", path, std::strerror(errno));
  std::rewind(f.get());
  out.resize(static_cast<size_t>(size));
  if (size > 0) {
    const size_t got = std::fread(out.data(), 1, out.size(), f.get());
    RN50_CHECK(got == out.size(), "short read from '{}' ({} of {} bytes)", path, got, size);
  }
}

void decode_image(const uint8_t* data, size_t size, const std::string& path, Image& out) {
  RN50_CHECK(size > 0, "cannot decode '{}': the file is empty", path);
  switch (sniff_format(data, size)) {
    case ImageFormat::jpeg:
      return decode_jpeg(data, size, path, out);
    case ImageFormat::png:
      return decode_png(data, size, path, out);
    case ImageFormat::unknown:
      break;
  }
  std::string head;
  for (size_t i = 0; i < size && i < 8; ++i) head += fmt::format("{:02X} ", data[i]);
  RN50_FAIL("cannot decode '{}': not a JPEG or PNG file (first bytes {})", path, head);
}

Image decode_image_file(const std::string& path) {
  std::vector<uint8_t> bytes;
  read_file(path, bytes);
  Image img;
  decode_image(bytes.data(), bytes.size(), path, img);
  return img;
}

}  // namespace rn50::data
