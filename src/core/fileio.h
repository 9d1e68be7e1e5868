// rn50: file helpers shared by checkpoints, reports and exports.
#pragma once

#include <string>
#include <string_view>

namespace rn50 {

/// Writes `bytes` to `path` atomically: into "<path>.tmp.<pid>" in the same directory, fsync,
/// then rename over `path`, so a reader never sees a partial file and a crash loses nothing that
/// was there before. Creates missing parent directories. Throws rn50::Error naming the path and
/// the OS error.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Reads a whole file. Throws rn50::Error naming the path and the OS error.
std::string read_file(const std::string& path);

}  // namespace rn50
