#include "core/environment.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "core/cpu_info.h"
#include "rn50_git_revision.h"

namespace rn50 {

const char* git_revision() { return RN50_GIT_REVISION; }

namespace {
/// The value after "key:" on the first line of `path` that starts with `key`, trimmed; "" if none.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? std::string() : line.substr(b);
  }
  return {};
}
}  // namespace

nlohmann::ordered_json host_environment() {
  nlohmann::ordered_json j;
  char host[256] = {0};
  j["hostname"] = gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : "unknown";
  utsname u{};
  j["os"] = uname(&u) == 0 ? std::string(u.sysname) + " " + u.release + " " + u.machine
                           : std::string("unknown");
  const std::string model = proc_field("/proc/cpuinfo", "model name");
  j["cpu_model"] = model.empty() ? "unknown" : model;
  j["cpu_cores"] = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  j["cpus_allowed"] = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  j["cpu_isa"] = isa_level_name(cpu_info().level);  // what our kernels and oneDNN's may use
  j["git_revision"] = git_revision();
  return j;
}

int64_t peak_rss_bytes() {
  const std::string v = proc_field("/proc/self/status", "VmHWM");  // "123456 kB"
  if (v.empty()) return -1;
  try {
    return static_cast<int64_t>(std::stoll(v)) * 1024;
  } catch (...) {
    return -1;
  }
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace rn50
