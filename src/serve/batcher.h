// rn50 serve: dynamic batching (Triton's dynamic batcher), one Batcher per model. Requests
// from any number of connections join the model's queue; each engine instance has a thread
// that takes the oldest requests, as many as fit in --max-batch-size images, as soon as the
// queue holds that many or the oldest has waited --max-queue-delay-us, and runs them as one
// engine call. It waits for a fuller batch only while more requests for the model are on their
// way (received and being decoded: expect()ed, not yet submitted), so that a lone client's
// request runs at once instead of always paying the queue delay. The queue is bounded (--max-queue-size requests: a request beyond it gets 503 at
// once), and a request whose deadline (--request-timeout-ms) passes while it is still queued
// is answered 504 at that moment, not after the batch running then; a request already in a
// running batch finishes. The engine's fp32 and bf16 logits of an image do not depend on the
// other images of its batch (tested), so a batched request's answer equals the image run alone.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rn50/tensor.h"
#include "serve/metrics.h"
#include "serve/served_model.h"

namespace rn50::serve {

using Clock = std::chrono::steady_clock;

/// What a request's batch gave it.
struct JobResult {
  std::vector<float> logits;  ///< (n, classes) row-major
  double queue_us = 0;        ///< from queued to its batch starting
  double compute_us = 0;      ///< the engine call of its batch
  int64_t batch_images = 0;   ///< images in that engine call
};

/// A request's images waiting for a batch.
struct Job {
  enum State : int { queued, running, cancelled };
  Tensor images;  ///< f32 (n, 3, crop, crop) NCHW, normalised
  int64_t n = 0;
  Clock::time_point arrived = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  std::atomic<int> state{queued};
  std::promise<JobResult> result;
  std::future<JobResult> future;  ///< result's, taken by Batcher::submit
};

class Batcher {
 public:
  /// Starts one batching thread per engine of `model`.
  Batcher(ServedModel& model, const ServeOptions& opt, Metrics& metrics);
  ~Batcher();  ///< drain()s

  /// A request for this model has arrived and is being prepared (parsed, decoded): the
  /// batching threads may wait for it to fill a batch. Each expect() is ended by one submit()
  /// or one unexpect().
  void expect();
  /// An expected request will not be submitted (it failed before).
  void unexpect();
  /// Queues `job` (ending its expect()). Throws HttpError 503 when --max-queue-size requests
  /// are queued or the batcher is draining.
  void submit(const std::shared_ptr<Job>& job);
  /// Waits for the job's batch and returns what it gave. Throws HttpError 504 at the job's
  /// deadline when it is still queued then (the job is dropped from the queue), HttpError 500
  /// when its engine call failed.
  JobResult wait(const std::shared_ptr<Job>& job);
  /// Stops taking requests, runs the queued ones, and joins the threads. Idempotent.
  void drain();
  /// Requests queued now (not yet in a batch).
  int64_t queued() const;

 private:
  void run(InferenceEngine& engine);
  /// Runs `batch` (`images` images) on `engine`, fulfilling each job's promise.
  void execute(InferenceEngine& engine, std::vector<std::shared_ptr<Job>>& batch, int64_t images);

  ServedModel& model_;
  const int64_t max_batch_;
  const std::chrono::microseconds max_delay_;
  const int64_t max_queue_;
  Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;  ///< may hold cancelled jobs, skipped when taken
  int64_t queued_requests_ = 0, queued_images_ = 0;  ///< the jobs still in state queued
  int64_t expected_ = 0;  ///< requests expect()ed and not yet submitted
  bool draining_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rn50::serve
