#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace rn50 {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

ProgressLine::ProgressLine(std::FILE* out, double plain_interval_s)
    : out_(out), plain_interval_s_(plain_interval_s), start_(Clock::now()), last_(start_) {
  const char* env = std::getenv("RN50_PROGRESS");
  if (env && std::strcmp(env, "off") == 0)
    mode_ = Mode::off;
  else if (env && std::strcmp(env, "plain") == 0)
    mode_ = Mode::plain;
  else if (env && std::strcmp(env, "tty") == 0)
    mode_ = Mode::tty;
  else
    mode_ = isatty(fileno(out)) ? Mode::tty : Mode::plain;
}

ProgressLine::~ProgressLine() { finish(); }

std::string ProgressLine::format(const std::string& label, int64_t done, int64_t total, double ips,
                                 double elapsed_s, const std::string& extra) {
  std::string s = fmt::format("{} {}/{}", label, done, total);
  if (total > 0) s += fmt::format(" ({:.0f}%)", 100.0 * static_cast<double>(done) / total);
  if (ips > 0) s += fmt::format(" {:.1f} img/s", ips);
  if (done > 0 && total > done && elapsed_s > 0)
    s += " eta " + format_duration(elapsed_s * static_cast<double>(total - done) / done);
  if (!extra.empty()) s += " " + extra;
  return s;
}

void ProgressLine::update(const std::string& label, int64_t done, int64_t total, double ips,
                          const std::string& extra, bool force) {
  if (mode_ == Mode::off || !due(force)) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  show(format(label, done, total, ips, elapsed, extra), true);
}

bool ProgressLine::due(bool force) const {
  const double since = std::chrono::duration<double>(Clock::now() - last_).count();
  const double interval = mode_ == Mode::tty ? 0.1 : plain_interval_s_;
  return force || !printed_ || since >= interval;
}

void ProgressLine::show(const std::string& text, bool force) {
  if (mode_ == Mode::off || !due(force)) return;
  const auto now = Clock::now();
  if (mode_ == Mode::tty) {
    std::fprintf(out_, "\r%s\033[K", text.c_str());
    shown_ = true;
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
  last_ = now;
  printed_ = true;
}

void ProgressLine::println(const std::string& text) {
  if (mode_ == Mode::tty && shown_) std::fputs("\r\033[K", out_);
  shown_ = false;
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

void ProgressLine::finish() {
  if (mode_ == Mode::tty && shown_) {
    std::fputs("\n", out_);
    std::fflush(out_);
  }
  shown_ = false;
}

}  // namespace rn50
