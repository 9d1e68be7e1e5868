// A child process of the CLI for tests that signal it mid-run: `rn50 ARGS` with stdout and
// stderr on one pipe, read line by line; killed (SIGKILL) and reaped when the object dies.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace rn50_test {

struct CliProcess {
  pid_t pid = -1;
  FILE* out = nullptr;
  /// Starts RN50_CLI with `args` (argv[1..]); throws nothing: a failed exec exits 127.
  explicit CliProcess(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      std::vector<std::string> copy = args;
      std::string cli = RN50_CLI;
      std::vector<char*> argv{cli.data()};
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(cli.c_str(), argv.data());
      std::_Exit(127);
    }
    ::close(fds[1]);
    out = ::fdopen(fds[0], "r");
  }
  /// The next output line ("" at the end of the output).
  std::string line() {
    char buf[8192];
    return out && std::fgets(buf, sizeof(buf), out) ? std::string(buf) : std::string();
  }
  /// Reads lines until one contains `needle`; returns everything read (ends early at EOF).
  std::string read_until(const std::string& needle, bool* found) {
    std::string all;
    *found = false;
    for (std::string l = line(); !l.empty(); l = line()) {
      all += l;
      if (l.find(needle) != std::string::npos) {
        *found = true;
        break;
      }
    }
    return all;
  }
  /// SIGKILL and reap; returns 128 + the signal (or the exit status if it had ended).
  int kill9() {
    if (pid <= 0) return -1;
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  ~CliProcess() {
    kill9();
    if (out) std::fclose(out);
  }
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;
};

}  // namespace rn50_test
