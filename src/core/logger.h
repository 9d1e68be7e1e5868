// rn50: what a run prints. One Logger per run, built from the launcher's rank: rank 0 prints,
// the other ranks are silent unless --log-all-ranks (each line then starts "[rank R] "). The
// progress line of the training loop (in place on a terminal) is ended before any other line.
// Errors are not logged here: they are thrown and printed once by the command.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "core/progress.h"

namespace rn50 {

class Logger {
 public:
  /// A logger that prints when `enabled`, each line prefixed with `prefix`.
  explicit Logger(bool enabled = true, std::string prefix = {})
      : enabled_(enabled), prefix_(std::move(prefix)) {}
  /// The logger of rank `rank` of `world_size`: enabled on rank 0, or on every rank with
  /// `all_ranks` (then prefixed "[rank R] " when world_size > 1).
  static Logger for_rank(int rank, int world_size, bool all_ranks) {
    return Logger(rank == 0 || all_ranks,
                  world_size > 1 && all_ranks ? fmt::format("[rank {}] ", rank) : std::string());
  }

  bool enabled() const { return enabled_; }
  const std::string& prefix() const { return prefix_; }

  /// A line (or lines: `text` includes its newlines) to stdout.
  void out(const std::string& text) {
    if (!enabled_) return;
    if (progress_) progress_->finish();
    std::fputs((prefix_ + text).c_str(), stdout);
    std::fflush(stdout);
  }
  template <class... A>
  void out(fmt::format_string<A...> f, A&&... a) {
    if (enabled_) out(fmt::format(f, std::forward<A>(a)...));
  }
  /// A warning or notice to stderr, with the same rank gating (every rank sees the same
  /// configuration, so one copy is enough).
  void warn(const std::string& text) {
    if (!enabled_) return;
    if (progress_) progress_->finish();
    std::fputs((prefix_ + text).c_str(), stderr);
    std::fflush(stderr);
  }
  /// Shows `text` as the progress line, when one is attached (attach_progress) and enabled.
  void progress(const std::string& text) {
    if (enabled_ && progress_) progress_->show(prefix_ + text, /*force=*/true);
  }
  /// The progress line out() ends before printing; null detaches it.
  void attach_progress(ProgressLine* p) { progress_ = p; }

 private:
  bool enabled_;
  std::string prefix_;
  ProgressLine* progress_ = nullptr;
};

}  // namespace rn50
