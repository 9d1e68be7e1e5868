#include "serve/batcher.h"

#include <fmt/format.h>

#include <cstring>

namespace rn50::serve {

namespace {
double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
}  // namespace

Batcher::Batcher(ServedModel& model, const ServeOptions& opt, Metrics& metrics)
    : model_(model),
      max_batch_(opt.max_batch_size),
      max_delay_(opt.max_queue_delay_us),
      max_queue_(opt.max_queue_size),
      metrics_(metrics) {
  for (auto& e : model_.engines) threads_.emplace_back([this, engine = e.get()] { run(*engine); });
}

Batcher::~Batcher() { drain(); }

void Batcher::expect() {
  std::lock_guard<std::mutex> lock(mu_);
  ++expected_;
}

void Batcher::unexpect() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --expected_;
  }
  cv_.notify_all();  // a batch waiting for this request goes on without it
}

void Batcher::submit(const std::shared_ptr<Job>& job) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    --expected_;
    auto refuse = [&](const std::string& why) {
      lock.unlock();
      cv_.notify_all();
      throw HttpError(503, why);
    };
    if (draining_) refuse(fmt::format("model '{}' is shutting down", model_.name));
    if (max_queue_ > 0 && queued_requests_ >= max_queue_)
      refuse(fmt::format("model '{}': the queue is full ({} requests waiting, --max-queue-size "
                         "{}); retry later",
                         model_.name, queued_requests_, max_queue_));
    job->future = job->result.get_future();
    queue_.push_back(job);
    ++queued_requests_;
    queued_images_ += job->n;
  }
  cv_.notify_all();
}

JobResult Batcher::wait(const std::shared_ptr<Job>& job) {
  std::future<JobResult>& f = job->future;
  if (job->deadline != Clock::time_point::max() &&
      f.wait_until(job->deadline) == std::future_status::timeout) {
    int expected = Job::queued;
    if (job->state.compare_exchange_strong(expected, Job::cancelled)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        --queued_requests_;
        queued_images_ -= job->n;
      }
      cv_.notify_all();
      throw HttpError(504, fmt::format("model '{}': the request waited {:.1f} ms in the queue, "
                                       "past its deadline (--request-timeout-ms); retry later",
                                       model_.name, micros(Clock::now() - job->arrived) * 1e-3));
    }
    // Its batch is running: it finishes.
  }
  return f.get();
}

int64_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_requests_;
}

void Batcher::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void Batcher::run(InferenceEngine& engine) {
  std::unique_lock<std::mutex> lock(mu_);
  auto drop_cancelled_front = [&] {
    while (!queue_.empty() && queue_.front()->state.load() == Job::cancelled) queue_.pop_front();
  };
  while (true) {
    cv_.wait(lock, [&] { return draining_ || queued_requests_ > 0; });
    drop_cancelled_front();
    if (queued_requests_ == 0 || queue_.empty()) {
      if (draining_) return;
      continue;
    }
    // Wait for a full batch, or until the oldest request has waited the queue delay, while
    // more requests are on their way.
    while (!draining_ && queued_images_ < max_batch_ && expected_ > 0) {
      const Clock::time_point until = queue_.front()->arrived + max_delay_;
      if (Clock::now() >= until) break;
      cv_.wait_until(lock, until);
      drop_cancelled_front();
      if (queue_.empty()) break;
    }
    std::vector<std::shared_ptr<Job>> batch;
    int64_t images = 0;
    while (!queue_.empty()) {
      const std::shared_ptr<Job>& j = queue_.front();
      if (j->state.load() == Job::cancelled) {
        queue_.pop_front();
        continue;
      }
      if (images + j->n > max_batch_) break;
      int expected = Job::queued;
      if (j->state.compare_exchange_strong(expected, Job::running)) {
        images += j->n;
        --queued_requests_;
        queued_images_ -= j->n;
        batch.push_back(j);
      }
      queue_.pop_front();
    }
    if (batch.empty()) continue;
    lock.unlock();
    execute(engine, batch, images);
    lock.lock();
  }
}

void Batcher::execute(InferenceEngine& engine, std::vector<std::shared_ptr<Job>>& batch,
                      int64_t images) {
  const Clock::time_point start = Clock::now();
  const int64_t crop = model_.crop();
  const size_t per_image = static_cast<size_t>(3 * crop * crop);
  Tensor x;
  if (batch.size() == 1) {
    x = batch.front()->images;
  } else {
    x = Tensor::empty({images, 3, crop, crop}, DType::f32, Layout::NCHW);
    size_t at = 0;
    for (const auto& j : batch) {
      std::memcpy(x.data_as<float>() + at, j->images.data_as<const float>(),
                  static_cast<size_t>(j->n) * per_image * sizeof(float));
      at += static_cast<size_t>(j->n) * per_image;
    }
  }
  Tensor logits;
  try {
    logits = engine.run(x);
  } catch (const std::exception& e) {
    for (const auto& j : batch)
      j->result.set_exception(std::make_exception_ptr(
          HttpError(500, fmt::format("model '{}': the engine failed: {}", model_.name, e.what()))));
    return;
  }
  const double compute_us = micros(Clock::now() - start);
  metrics_.batch_done(model_.name, images, compute_us);
  const int64_t k = model_.num_classes;
  const float* l = logits.data_as<const float>();
  for (const auto& j : batch) {
    JobResult r;
    r.logits.assign(l, l + j->n * k);
    l += j->n * k;
    r.queue_us = micros(start - j->arrived);
    r.compute_us = compute_us;
    r.batch_images = images;
    metrics_.queued(model_.name, r.queue_us);
    j->result.set_value(std::move(r));
  }
}

}  // namespace rn50::serve
