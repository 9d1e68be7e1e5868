// rn50: file helpers shared by checkpoints, reports and exports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rn50 {

/// Writes `bytes` to `path` atomically: into "<path>.tmp.<pid>" in the same directory, fsync,
/// then rename over `path`, so a reader never sees a partial file and a crash loses nothing that
/// was there before. Creates missing parent directories. Throws rn50::Error naming the path and
/// the OS error (a full disk: how many bytes were written; the temporary file is removed).
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Creates folder `dir` if needed and checks that a file can be written in it (a probe file,
/// removed again), so that a run stops before its first epoch rather than at its first
/// checkpoint. Throws rn50::Error naming `what` (the flag), the folder and the OS error (a
/// read-only file system, no permission, a full disk).
void check_writable_dir(const std::string& dir, const std::string& what);

/// Reads up to `n` bytes at `offset` of open file `fd` into `dst` with pread, retrying short
/// reads; returns the bytes read (fewer than `n` only when the file ends or a read fails).
size_t pread_full(int fd, void* dst, size_t n, int64_t offset);

/// Reads a whole file. Throws rn50::Error naming the path and the OS error.
std::string read_file(const std::string& path);

}  // namespace rn50
