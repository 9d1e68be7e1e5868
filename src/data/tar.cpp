#include "data/tar.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>

#include "core/check.h"
#include "core/fileio.h"

namespace rn50::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kBlock = 512;

/// A NUL- or space-terminated octal field; base-256 when its first byte has the high bit set
/// (GNU's form for large sizes). -1 when malformed.
int64_t numeric_field(const char* f, size_t n) {
  if (static_cast<unsigned char>(f[0]) & 0x80) {
    int64_t v = static_cast<unsigned char>(f[0]) & 0x7f;
    for (size_t i = 1; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(f[i]);
    return v;
  }
  int64_t v = 0;
  size_t i = 0;
  while (i < n && f[i] == ' ') ++i;
  bool digits = false;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    v = v * 8 + (f[i] - '0');
    digits = true;
  }
  return digits || i < n ? v : -1;
}

/// Whether the 512-byte `h` is a header whose checksum field matches its bytes (the field
/// itself counted as spaces; signed and unsigned sums both accepted, as tar readers do).
bool checksum_ok(const char* h) {
  int64_t u = 0, s = 0;
  for (int i = 0; i < kBlock; ++i) {
    const char c = i >= 148 && i < 156 ? ' ' : h[i];
    u += static_cast<unsigned char>(c);
    s += static_cast<signed char>(c);
  }
  const int64_t want = numeric_field(h + 148, 8);
  return want >= 0 && (want == u || want == s);
}

bool all_zero(const char* h) {
  return std::all_of(h, h + kBlock, [](char c) { return c == 0; });
}

std::string cstr(const char* f, size_t n) { return std::string(f, strnlen(f, n)); }

/// The "path=" record of a pax extended header's data, or empty.
std::string pax_path(const std::string& data) {
  size_t at = 0;
  while (at < data.size()) {
    const size_t sp = data.find(' ', at);
    if (sp == std::string::npos) break;
    const size_t len = static_cast<size_t>(std::strtoull(data.c_str() + at, nullptr, 10));
    // "LEN key=value\n": LEN counts the whole record, so it must reach past the space and fit.
    if (len < sp - at + 2 || len > data.size() - at) break;
    const std::string rec = data.substr(sp + 1, at + len - sp - 2);  // "key=value" without '\n'
    if (rec.rfind("path=", 0) == 0) return rec.substr(5);
    at += len;
  }
  return {};
}

}  // namespace

std::vector<TarMember> scan_tar(const std::string& path, std::vector<std::string>* problems) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  RN50_CHECK(fd >= 0, "tar shard '{}': cannot open it ({})", path, std::strerror(errno));
  const int64_t size = static_cast<int64_t>(::lseek(fd, 0, SEEK_END));
  std::vector<TarMember> members;
  std::string long_name;  // from a GNU 'L' record or a pax header, for the next member
  char h[kBlock];
  int64_t at = 0;
  bool resyncing = false;
  while (at + kBlock <= size && pread_full(fd, h, kBlock, at) == size_t(kBlock)) {
    if (all_zero(h)) break;  // the end-of-archive blocks
    if (!checksum_ok(h)) {
      if (!resyncing && problems)
        problems->push_back(fmt::format("{}@{}: a damaged tar header (checksum)", path, at));
      resyncing = true;
      at += kBlock;
      continue;
    }
    resyncing = false;
    const int64_t data_size = numeric_field(h + 124, 12);
    const int64_t data_at = at + kBlock;
    // Checked before any arithmetic: a base-256 size field can hold up to 2^63 - 1.
    if (data_size < 0 || data_size > size - data_at) {
      if (problems)
        problems->push_back(fmt::format("{}@{}: a tar member of {} bytes cut off by the end of "
                                        "the shard",
                                        path, at, data_size));
      break;
    }
    const int64_t next = data_at + (data_size + kBlock - 1) / kBlock * kBlock;
    const char type = h[156];
    if (type == 'L' || type == 'x') {
      std::string data(static_cast<size_t>(data_size), '\0');
      pread_full(fd, data.data(), data.size(), data_at);  // bounds checked above
      long_name = type == 'L' ? cstr(data.data(), data.size()) : pax_path(data);
    } else if (type == '0' || type == '\0' || type == '7') {
      TarMember m;
      if (!long_name.empty()) {
        m.name = long_name;
      } else {
        const std::string prefix =
            std::memcmp(h + 257, "ustar", 5) == 0 ? cstr(h + 345, 155) : std::string();
        const std::string name = cstr(h, 100);
        m.name = prefix.empty() ? name : prefix + "/" + name;
      }
      long_name.clear();
      m.data_offset = data_at;
      m.size = data_size;
      m.header_offset = at;
      members.push_back(std::move(m));
    } else {
      long_name.clear();  // directories, links, global pax headers: not samples
    }
    at = next;
  }
  ::close(fd);
  return members;
}

namespace {

void put_octal(char* f, size_t n, int64_t v) {
  const std::string s = fmt::format("{:0{}o}", v, n - 1);
  std::memcpy(f, s.data(), std::min(s.size(), n - 1));
  f[n - 1] = '\0';
}

void put_header(std::string& out, const std::string& name, const std::string& prefix,
                int64_t size, char type) {
  char h[kBlock] = {};
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
  put_octal(h + 100, 8, 0644);
  put_octal(h + 108, 8, 0);
  put_octal(h + 116, 8, 0);
  put_octal(h + 124, 12, size);
  put_octal(h + 136, 12, 0);
  h[156] = type;
  std::memcpy(h + 257, "ustar", 6);  // POSIX magic "ustar\0", version "00"
  std::memcpy(h + 263, "00", 2);
  std::memcpy(h + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(h + 148, ' ', 8);
  int64_t sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  put_octal(h + 148, 7, sum);
  h[155] = ' ';
  out.append(h, kBlock);
}

void put_data(std::string& out, std::string_view data) {
  out.append(data);
  out.append(static_cast<size_t>((kBlock - static_cast<int64_t>(data.size()) % kBlock) % kBlock),
             '\0');
}

}  // namespace

void append_tar_member(std::string& out, const std::string& name, std::string_view data) {
  std::string prefix, base = name;
  if (name.size() > 100) {
    // ustar: split at a '/' so that the prefix fits 155 bytes and the rest 100.
    const size_t cut = name.rfind('/', 155);
    if (cut != std::string::npos && name.size() - cut - 1 <= 100 && cut > 0) {
      prefix = name.substr(0, cut);
      base = name.substr(cut + 1);
    } else {
      put_header(out, "././@LongLink", "", static_cast<int64_t>(name.size() + 1), 'L');
      put_data(out, std::string(name) + '\0');
      base = name.substr(0, 100);
    }
  }
  put_header(out, base, prefix, static_cast<int64_t>(data.size()), '0');
  put_data(out, data);
}

void finish_tar(std::string& out) { out.append(static_cast<size_t>(2 * kBlock), '\0'); }

std::vector<std::string> expand_shards(const std::string& spec) {
  std::vector<std::string> out;
  if (fs::is_directory(spec)) {
    for (const auto& e : fs::directory_iterator(spec))
      if (e.is_regular_file() && e.path().extension() == ".tar") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    RN50_CHECK(!out.empty(), "'{}' holds no .tar shard", spec);
    return out;
  }
  static const std::regex brace(R"((.*)\{(\d+)\.\.(\d+)\}(.*))");
  std::smatch m;
  if (std::regex_match(spec, m, brace)) {
    const std::string lo = m[2], hi = m[3];
    const int64_t a = std::stoll(lo), b = std::stoll(hi);
    RN50_CHECK(a <= b && b - a < 10000000, "shard pattern '{}': the range {}..{} is empty",
               spec, lo, hi);
    const int width = lo.size() > 1 && lo[0] == '0' ? static_cast<int>(lo.size()) : 0;
    for (int64_t i = a; i <= b; ++i)
      out.push_back(fmt::format("{}{:0{}}{}", m[1].str(), i, width, m[4].str()));
  } else {
    out.push_back(spec);
  }
  for (const std::string& f : out)
    RN50_CHECK(fs::is_regular_file(f), "shard '{}' (from '{}') does not exist", f, spec);
  return out;
}

}  // namespace rn50::data
