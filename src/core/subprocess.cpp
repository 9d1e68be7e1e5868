// rn50 core: shell quoting and captured runs of the Python helpers (core/subprocess.h).
#include "core/subprocess.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"

namespace rn50 {

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

int run_captured(const std::string& cmd, std::string& output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  RN50_CHECK(p != nullptr, "cannot run '{}'", cmd);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) output.append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

std::string helper_python() {
  const char* env = std::getenv("RN50_PYTHON");
  if (env && *env) return env;
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

}  // namespace rn50
