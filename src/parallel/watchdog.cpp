// rn50: the communicator watchdog (see watchdog.h).
#include "parallel/watchdog.h"

#include <fmt/format.h>

namespace rn50::parallel {

int64_t Watchdog::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog::heartbeat() { last_ns_.store(now_ns(), std::memory_order_relaxed); }

void Watchdog::start(double timeout_s, Fire fire) {
  stop();
  heartbeat();
  if (timeout_s <= 0) return;
  stopping_ = false;
  thread_ = std::thread([this, timeout_s, fire = std::move(fire)] {
    const auto period = std::chrono::milliseconds(200);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
      double age = (now_ns() - last_ns_.load(std::memory_order_relaxed)) * 1e-9;
      if (age > timeout_s) {
        lock.unlock();
        fire(fmt::format("watchdog: no progress for {:.1f} s (timeout {} s); a collective is "
                         "probably stuck because another rank failed or hangs",
                         age, timeout_s));
        return;  // only reached if fire() returns
      }
    }
  });
}

void Watchdog::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace rn50::parallel
