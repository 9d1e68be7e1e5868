#include "core/fileio.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace rn50 {

void write_file_atomic(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    RN50_CHECK(!ec, "cannot create directory '{}': {}", p.parent_path().string(), ec.message());
  }
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  RN50_CHECK(fd >= 0, "cannot create '{}': {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      RN50_FAIL("cannot write '{}': {}", tmp, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    RN50_FAIL("cannot flush '{}': {}", tmp, std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    RN50_FAIL("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(e));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  RN50_CHECK(f.good(), "cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  RN50_CHECK(!f.bad(), "cannot read '{}'", path);
  return ss.str();
}

}  // namespace rn50
