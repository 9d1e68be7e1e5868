// rn50: the watchdog behind Communicator::start_watchdog / heartbeat: a thread that checks, every
// 0.2 s, how long ago the last heartbeat was, and calls `fire` (a communicator's abort) once the
// age exceeds the timeout. A rank blocked in a collective because another rank died or hangs
// never returns to heartbeat(), so its watchdog tears the job down.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace rn50::parallel {

class Watchdog {
 public:
  /// Called from the watchdog thread with a message naming the timeout; expected not to return.
  using Fire = std::function<void(const std::string&)>;
  Watchdog() = default;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() { stop(); }

  /// (Re)starts the thread with `timeout_s` (seconds); timeout_s <= 0 only stops it. Counts as a
  /// heartbeat.
  void start(double timeout_s, Fire fire);
  /// Proof of progress: cheap (one relaxed atomic store), callable from any thread.
  void heartbeat();
  /// Stops and joins the thread (no-op when not running).
  void stop();

 private:
  static int64_t now_ns();
  std::atomic<int64_t> last_ns_{0};
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace rn50::parallel
