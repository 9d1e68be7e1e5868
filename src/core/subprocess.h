// rn50 core: running the Python helpers (tools/plot_report.py, tools/convert_weights.py) through
// the shell, with their output captured for messages.
#pragma once

#include <string>

namespace rn50 {

/// `s` single-quoted for /bin/sh (an embedded ' becomes '\'').
std::string shell_quote(const std::string& s);

/// Runs `cmd` through /bin/sh with stderr joined to stdout; appends what it printed to `output`
/// and returns its exit status (127: the command was not found; 128: killed by a signal).
/// Throws rn50::Error when no shell can be started.
int run_captured(const std::string& cmd, std::string& output);

/// The Python interpreter of the helpers: $RN50_PYTHON, else /usr/bin/python3 (Debian's
/// packages — torch, numpy, matplotlib — are installed for it, which a pyenv or virtualenv
/// python3 earlier in PATH would not see), else python3 from PATH.
std::string helper_python();

}  // namespace rn50
