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
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  RN50_CHECK(fd >= 0, "cannot write '{}': creating its temporary file '{}' failed: {}", path, tmp,
             std::strerror(errno));
  // Every failure below removes the temporary file and leaves `path` as it was.
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      RN50_FAIL("cannot write '{}': {} after {} of {} bytes (nothing was replaced; the partial "
                "temporary file was removed)",
                path, std::strerror(e), done, bytes.size());
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    RN50_FAIL("cannot write '{}': fsync failed: {} (nothing was replaced; the temporary file "
              "was removed)",
              path, std::strerror(e));
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    RN50_FAIL("cannot write '{}': close failed: {} (nothing was replaced)", path, std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    RN50_FAIL("cannot write '{}': renaming '{}' over it failed: {} (nothing was replaced)", path,
              tmp, std::strerror(e));
  }
  // Make the rename itself durable (best effort: some file systems refuse fsync on folders).
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void check_writable_dir(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  RN50_CHECK(!ec, "{} '{}': cannot create the folder: {}; pass a writable folder", what, dir,
             ec.message());
  const std::string probe = (fs::path(dir) / fmt::format(".rn50_write_test.{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  RN50_CHECK(fd >= 0, "{} '{}': cannot write there: {}; pass a writable folder", what, dir,
             std::strerror(errno));
  const bool ok = ::write(fd, "x", 1) == 1;
  const int e = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  RN50_CHECK(ok, "{} '{}': cannot write there: {}; pass a writable folder", what, dir,
             std::strerror(e));
}

size_t pread_full(int fd, void* dst, size_t n, int64_t offset) {
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, p + done, n - done, offset + static_cast<int64_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
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
