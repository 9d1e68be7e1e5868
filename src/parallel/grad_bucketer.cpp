// rn50: gradient buckets for allreduce overlapped with backward (torch DDP's Reducer, simplified:
// a fixed bucket order given by the backward schedule, no rebuild).
//
// Each bucket is either
//  * "direct": its gradients tile one contiguous region of the slab (the usual case: backward
//    produces parameters in reverse slab order), reduced in place on a slab slice; or
//  * "packed": the gradients are copied (Backend::copy of slab slices, queued on the backend)
//    into a buffer allocated once in the constructor, reduced there, and copied back in finish().
// Nothing is allocated per step, so the step can be recorded as a CUDA graph (nccl).
#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "rn50/parallel.h"

namespace rn50 {

struct GradBucketer::Impl {
  struct Bucket {
    int first = 0, last = 0;  ///< parameters [first, last] (indices into ranges)
    int64_t elems = 0;
    Tensor direct;  ///< the slab slice, when the bucket's ranges tile it
    Tensor buffer;  ///< the packed buffer otherwise
    std::unique_ptr<PendingReduce> pending;
    bool started = false;
  };

  Communicator& comm;
  Backend& backend;
  Tensor grads;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of;  ///< parameter -> bucket
  bool trivial = false;        ///< "single": nothing to reduce
  int next = 0;                ///< the parameter expected to become ready next
  double wait_seconds = 0;

  Impl(Communicator& c, Backend& b) : comm(c), backend(b) {}

  void start(Bucket& bk) {
    if (bk.started) return;
    bk.started = true;
    if (trivial) return;
    if (bk.direct.defined()) {
      bk.pending = comm.allreduce_sum_async(bk.direct);
      return;
    }
    int64_t pos = 0;
    for (int i = bk.first; i <= bk.last; ++i) {
      auto [off, cnt] = ranges[i];
      Tensor dst = bk.buffer.slice0(pos, pos + cnt);
      backend.copy(grads.slice0(off, off + cnt), dst);
      pos += cnt;
    }
    bk.pending = comm.allreduce_sum_async(bk.buffer);
  }

  void poll() {
    for (Bucket& bk : buckets)
      if (bk.pending) bk.pending->poll();
  }
};

GradBucketer::GradBucketer(Communicator& comm, Backend& backend, Tensor grads,
                           std::vector<std::pair<int64_t, int64_t>> ranges, size_t bucket_bytes)
    : impl_(std::make_unique<Impl>(comm, backend)) {
  Impl& m = *impl_;
  RN50_CHECK(grads.defined() && grads.ndim() == 1 && grads.dtype() == DType::f32,
             "GradBucketer: the gradient slab must be a 1-D F32 tensor (got {})",
             grads.defined() ? grads.str() : std::string("undefined"));
  RN50_CHECK(bucket_bytes > 0, "GradBucketer: bucket size must be positive (--bucket-size-mb)");
  RN50_CHECK(!ranges.empty(), "GradBucketer: no parameter ranges");
  const int64_t n = grads.numel();
  for (size_t i = 0; i < ranges.size(); ++i) {
    auto [off, cnt] = ranges[i];
    RN50_CHECK(cnt > 0 && off >= 0 && off + cnt <= n,
               "GradBucketer: range {} (offset {}, count {}) is empty or outside the slab of {} "
               "elements",
               i, off, cnt, n);
  }
  std::vector<std::pair<int64_t, int64_t>> sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    RN50_CHECK(sorted[i - 1].first + sorted[i - 1].second <= sorted[i].first,
               "GradBucketer: ranges (offset {}, count {}) and (offset {}, count {}) overlap",
               sorted[i - 1].first, sorted[i - 1].second, sorted[i].first, sorted[i].second);

  m.grads = grads;
  m.ranges = std::move(ranges);
  m.trivial = comm.name() == "single";
  const int64_t cap = static_cast<int64_t>(bucket_bytes / sizeof(float));
  m.bucket_of.resize(m.ranges.size());
  for (int i = 0; i < static_cast<int>(m.ranges.size()); ++i) {
    const int64_t cnt = m.ranges[i].second;
    if (m.buckets.empty() || m.buckets.back().elems + cnt > cap) {
      Impl::Bucket b;
      b.first = i;
      m.buckets.push_back(std::move(b));
    }
    Impl::Bucket& b = m.buckets.back();
    b.last = i;
    b.elems += cnt;
    m.bucket_of[i] = static_cast<int>(m.buckets.size()) - 1;
  }
  if (m.trivial) return;
  for (Impl::Bucket& b : m.buckets) {
    std::vector<std::pair<int64_t, int64_t>> own(m.ranges.begin() + b.first,
                                                 m.ranges.begin() + b.last + 1);
    std::sort(own.begin(), own.end());
    bool tiles = true;
    for (size_t i = 1; i < own.size(); ++i)
      tiles = tiles && own[i - 1].first + own[i - 1].second == own[i].first;
    if (tiles)
      b.direct = grads.slice0(own.front().first, own.front().first + b.elems);
    else
      b.buffer = backend.alloc({b.elems}, DType::f32);
  }
}

GradBucketer::~GradBucketer() = default;

void GradBucketer::ready(int i) {
  Impl& m = *impl_;
  RN50_CHECK(i == m.next,
             "GradBucketer: parameter {} became ready but {} was expected (the ready order must "
             "be the order of the ranges given to the constructor; {} parameters)",
             i, m.next, m.ranges.size());
  ++m.next;
  Impl::Bucket& b = m.buckets[m.bucket_of[i]];
  if (i == b.last) m.start(b);
  if (!m.trivial) m.poll();  // MPI makes progress only inside MPI calls
}

void GradBucketer::finish() {
  Impl& m = *impl_;
  for (Impl::Bucket& b : m.buckets) m.start(b);
  double waited = 0;
  for (Impl::Bucket& b : m.buckets) {
    if (b.pending) {
      auto t0 = std::chrono::steady_clock::now();
      b.pending->wait();
      waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      b.pending.reset();
    }
    if (!m.trivial && b.buffer.defined()) {
      int64_t pos = 0;
      for (int i = b.first; i <= b.last; ++i) {
        auto [off, cnt] = m.ranges[i];
        Tensor dst = m.grads.slice0(off, off + cnt);
        m.backend.copy(b.buffer.slice0(pos, pos + cnt), dst);
        pos += cnt;
      }
    }
    b.started = false;
  }
  m.next = 0;
  m.wait_seconds = m.comm.name() == "nccl" ? 0.0 : waited;
}

int GradBucketer::num_buckets() const { return static_cast<int>(impl_->buckets.size()); }

double GradBucketer::last_wait_seconds() const { return impl_->wait_seconds; }

}  // namespace rn50
