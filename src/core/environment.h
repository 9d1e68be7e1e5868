// rn50: what a benchmark ran on, recorded beside its figures (DLPerf's reports list the same:
// CPU, GPU and driver, library versions, code revision), and the process's peak memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace rn50 {

/// The host: {"hostname", "os" (uname sysname release machine), "cpu_model" (/proc/cpuinfo's
/// "model name"), "cpu_cores" (online logical CPUs), "cpus_allowed" (this process's affinity
/// mask), "git_revision" (`git describe --always --dirty` at build time;
/// "unknown" outside a checkout)}. Never throws: a field it cannot read is "unknown" / 0.
nlohmann::ordered_json host_environment();

/// The git revision rn50 was built from ("unknown" outside a checkout).
const char* git_revision();

/// The process's peak resident set size in bytes (VmHWM of /proc/self/status), or -1 when the
/// kernel does not report it.
int64_t peak_rss_bytes();

/// Resets the peak resident set size to the current one (writes "5" to /proc/self/clear_refs,
/// Linux >= 4.0), so that the next peak_rss_bytes() measures from now. Returns false when the
/// kernel refuses (then peak_rss_bytes() keeps the peak since the process started).
bool reset_peak_rss();

}  // namespace rn50
