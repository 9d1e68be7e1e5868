// rn50 report --plot: the tables handed to tools/plot_report.py (matplotlib), which draws them.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/subprocess.h"
#include "rn50/report.h"

#ifndef RN50_PLOT_SCRIPT_DEFAULT
#define RN50_PLOT_SCRIPT_DEFAULT ""
#endif

namespace rn50 {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::vector<std::string> write_report_plots(const std::vector<ReportTable>& tables,
                                            const std::string& dir, const std::string& python_arg,
                                            const std::string& script_arg) {
  std::string python = python_arg;
  if (python.empty()) python = helper_python();
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
