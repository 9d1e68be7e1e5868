// rn50 report --plot: the tables handed to tools/plot_report.py (matplotlib), which draws them.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "rn50/report.h"

#ifndef RN50_PLOT_SCRIPT_DEFAULT
#define RN50_PLOT_SCRIPT_DEFAULT ""
#endif

namespace rn50 {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

/// Runs `cmd` through the shell; returns its exit status and stdout+stderr.
int run_captured(const std::string& cmd, std::string& output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  RN50_CHECK(p != nullptr, "cannot run '{}'", cmd);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) output.append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

}  // namespace

std::vector<std::string> write_report_plots(const std::vector<ReportTable>& tables,
                                            const std::string& dir, const std::string& python_arg,
                                            const std::string& script_arg) {
  std::string python = python_arg;
  if (python.empty()) {
    // Debian's python3-matplotlib is installed for the system interpreter, which a pyenv or
    // virtualenv python3 earlier in PATH would not see.
    const char* env = std::getenv("RN50_PYTHON");
    python = env && *env ? env : fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  }
  std::string script = script_arg;
  if (script.empty()) {
    const char* env = std::getenv("RN50_PLOT_SCRIPT");
    script = env && *env ? env : RN50_PLOT_SCRIPT_DEFAULT;
  }
  RN50_CHECK(!script.empty() && fs::is_regular_file(script),
             "--plot: the plot script '{}' is missing (it is tools/plot_report.py in rn50's "
             "source tree; set RN50_PLOT_SCRIPT to its path)",
             script);
  std::string out;
  RN50_CHECK(run_captured(shell_quote(python) + " -c 'import matplotlib'", out) == 0,
             "--plot needs Python's matplotlib, which '{}' cannot import: install it with "
             "scripts/setup.sh (or apt-get install python3-matplotlib)",
             python);
  std::error_code ec;
  fs::create_directories(dir, ec);
  RN50_CHECK(!ec, "--plot '{}': cannot create the folder: {}", dir, ec.message());
  const std::string data = (fs::path(dir) / "report_tables.json").string();
  {
    std::ofstream f(data);
    f << render_report(tables, "json");
    RN50_CHECK(f.good(), "--plot: cannot write '{}'", data);
  }
  out.clear();
  const int rc = run_captured(shell_quote(python) + " " + shell_quote(script) + " " +
                                  shell_quote(data) + " " + shell_quote(dir),
                              out);
  RN50_CHECK(rc == 0, "--plot: {} failed (exit {}):\n{}", script, rc, out);
  std::vector<std::string> files;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("wrote ", 0) == 0) files.push_back(l.substr(6));
  return files;
}

}  // namespace rn50
