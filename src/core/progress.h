// rn50: the progress line of long commands (train, eval, bench train, check-data). On a
// terminal it is one line rewritten in place ("\r", the text, clear to the end of the line);
// when the stream is not a terminal (a log file, CI) it falls back to plain lines, at most one
// per `plain_interval_s` seconds, so logs stay readable. RN50_PROGRESS=tty|plain|off in the
// environment forces a mode (off: nothing is printed).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rn50 {

class ProgressLine {
 public:
  enum class Mode { tty, plain, off };

  /// Writes to `out` (stdout or stderr). `plain_interval_s`: seconds between plain lines
  /// (0: every update). In-place updates are throttled to 10 per second.
  explicit ProgressLine(std::FILE* out = stdout, double plain_interval_s = 10.0);
  ~ProgressLine();  ///< ends an in-place line with a newline
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  Mode mode() const { return mode_; }

  /// Shows `label done/total (pct%)`, then `ips` as img/s when > 0 and the ETA at the rate so
  /// far, then `extra` (e.g. "loss 2.31"). `force` prints even inside the throttle interval
  /// (the last update of a phase).
  void update(const std::string& label, int64_t done, int64_t total, double ips = 0,
              const std::string& extra = "", bool force = false);

  /// Shows `text` as the progress line (same throttling as update()).
  void show(const std::string& text, bool force = false);

  /// Prints a permanent line (`text` without a newline) below the progress line: on a terminal
  /// the in-place line is cleared first and shown again at the next update.
  void println(const std::string& text);

  /// Ends the in-place line (newline) so that later output starts on a line of its own.
  void finish();

  /// The text of update() without the terminal control codes (for tests): e.g.
  /// "epoch 3 312/5004 (6%) 2430.5 img/s eta 31m12s loss 2.3100".
  static std::string format(const std::string& label, int64_t done, int64_t total, double ips,
                            double elapsed_s, const std::string& extra);

 private:
  using Clock = std::chrono::steady_clock;
  /// Whether an update is due: forced, the first, or past the throttle interval.
  bool due(bool force) const;
  std::FILE* out_;
  Mode mode_;
  double plain_interval_s_;
  Clock::time_point start_, last_;
  bool shown_ = false;    ///< an in-place line is on the screen
  bool printed_ = false;  ///< something was printed since the start (plain throttle)
};

/// "1h02m", "4m05s", "12s"; "?" for a negative or non-finite number of seconds.
std::string format_duration(double seconds);

}  // namespace rn50
