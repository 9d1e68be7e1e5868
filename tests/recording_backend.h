// A recording Backend decorator for host-logic tests of the training step (the shape of
// src/backend/profiling_backend.cpp): every Backend call is forwarded to an inner backend (ref
// or onednn in CI) and recorded with its kind (alloc, alloc_host, copy and its direction,
// zero, synchronize, upload_input, release_input, forget_input, capture, graph replay,
// profiler_range, or the compute op by name), the phase it happened in (eager, inside a capture
// region, or issued by a graph replay), its bytes (copies, uploads) and its thread.
//
// capture(fn) emulates a CUDA graph on the CPU: fn runs in recording mode, where each backend
// call is stored as a closure over the same Tensor handles and parameters, WITHOUT running
// (CUDA stream capture runs nothing either), and the returned Graph's replay() re-issues the
// stored calls on the inner backend. Tensors are handles to memory, so a replay reads whatever
// that memory holds at replay time, exactly as a CUDA graph does; host values passed as call
// parameters (a float lr in SgdParams, say) are baked in at capture, as kernel arguments are.
// Inside a capture region, on the capturing thread (CUDA's cudaStreamCaptureModeThreadLocal,
// the mode the CUDA backend records with), these calls are violations: alloc, alloc_host,
// synchronize, upload_input, forget_input, a nested capture, a graph replay, and any copy with
// a host end (a device-to-host copy the host would read needs a synchronisation; a host-to-
// device copy from pageable memory cannot be recorded, and from pinned memory it would replay
// whatever the host buffer holds then). A violation is recorded and the call throws
// rn50::Error, as the CUDA call would fail the capture.
//
// Host or backend memory: with a non-CPU inner backend, Tensor::device() tells. With a CPU
// inner backend (onednn, ref) every tensor says "cpu", so the decorator tags what its alloc()
// returns (a storage aliasing the inner one) and classifies a tensor by its address: inside a
// live alloc() block is backend memory, anything else (Tensor::empty, alloc_host) is host.
//
// The log is shared (CallLog, held by a shared_ptr), so that a test can keep reading it after
// a Session that owned the decorator is gone. Thread-safe: data loader threads call
// alloc_host concurrently.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rn50/backend.h"
#include "rn50/error.h"

namespace rn50::test {

enum class CallKind {
  alloc, alloc_host, copy, zero, synchronize, upload_input, release_input, forget_input,
  capture, replay, profiler_range, op
};
/// Direction of a copy, from where its tensors live (see the file comment).
enum class CopyDir { none, h2d, d2h, d2d, h2h };
/// eager: run when called; capture: recorded into a graph (not run); replay: run by a replay.
enum class Phase { eager, capture, replay };

inline const char* kind_name(CallKind k) {
  switch (k) {
    case CallKind::alloc: return "alloc";
    case CallKind::alloc_host: return "alloc_host";
    case CallKind::copy: return "copy";
    case CallKind::zero: return "zero";
    case CallKind::synchronize: return "synchronize";
    case CallKind::upload_input: return "upload_input";
    case CallKind::release_input: return "release_input";
    case CallKind::forget_input: return "forget_input";
    case CallKind::capture: return "capture";
    case CallKind::replay: return "replay";
    case CallKind::profiler_range: return "profiler_range";
    case CallKind::op: return "op";
  }
  return "?";
}
inline const char* dir_name(CopyDir d) {
  switch (d) {
    case CopyDir::none: return "";
    case CopyDir::h2d: return "host->backend";
    case CopyDir::d2h: return "backend->host";
    case CopyDir::d2d: return "backend->backend";
    case CopyDir::h2h: return "host->host";
  }
  return "?";
}
inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::eager: return "eager";
    case Phase::capture: return "capture";
    case Phase::replay: return "replay";
  }
  return "?";
}

/// One recorded backend call.
struct Call {
  CallKind kind = CallKind::op;
  std::string name;  ///< the op's name ("conv2d_fwd"), else kind_name(kind)
  Phase phase = Phase::eager;
  CopyDir dir = CopyDir::none;  ///< copies only
  size_t bytes = 0;             ///< copies and uploads: bytes of the source
  std::thread::id thread;
  /// A call of this thread.
  static Call of(CallKind k, std::string name, Phase ph = Phase::eager,
                 CopyDir dir = CopyDir::none, size_t bytes = 0) {
    Call c;
    c.kind = k;
    c.name = std::move(name);
    c.phase = ph;
    c.dir = dir;
    c.bytes = bytes;
    c.thread = std::this_thread::get_id();
    return c;
  }
  std::string str() const {
    std::string s = name + " [" + phase_name(phase) + "]";
    if (kind == CallKind::copy) s += std::string(" ") + dir_name(dir);
    if (bytes) s += " " + std::to_string(bytes) + " B";
    return s;
  }
};

/// The shared, thread-safe log of a RecordingBackend.
class CallLog {
 public:
  void add(Call c) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(c));
  }
  void violation(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    violations_.push_back(std::move(what));
  }
  /// A copy of the calls recorded so far.
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  /// Calls [begin, end) (end clamped to the size).
  std::vector<Call> calls(size_t begin, size_t end = SIZE_MAX) const {
    std::lock_guard<std::mutex> lock(mu_);
    end = std::min(end, calls_.size());
    if (begin >= end) return {};
    return std::vector<Call>(calls_.begin() + static_cast<std::ptrdiff_t>(begin),
                             calls_.begin() + static_cast<std::ptrdiff_t>(end));
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }
  std::vector<std::string> violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::vector<std::string> violations_;
};

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner,
                            std::shared_ptr<CallLog> log = std::make_shared<CallLog>())
      : in_(std::move(inner)), log_(std::move(log)) {}

  CallLog& log() { return *log_; }
  const std::shared_ptr<CallLog>& shared_log() const { return log_; }
  Backend& inner() { return *in_; }

  /// Whether `t` is backend memory (see the file comment).
  bool on_backend(const Tensor& t) const {
    if (!t.defined()) return false;
    if (in_->device().type != DeviceType::CPU) return !t.is_cpu();
    std::lock_guard<std::mutex> lock(mem_mu_);
    const auto p = reinterpret_cast<uintptr_t>(t.data());
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return false;
    --it;
    return p < it->first + it->second.bytes && !it->second.alive.expired();
  }
  CopyDir copy_dir(const Tensor& src, const Tensor& dst) const {
    const bool s = on_backend(src), d = on_backend(dst);
    return s ? (d ? CopyDir::d2d : CopyDir::d2h) : (d ? CopyDir::h2d : CopyDir::h2h);
  }

  // ---- everything but the ops ----
  std::string name() const override { return in_->name(); }
  Device device() const override { return in_->device(); }
  bool supports(Op op, DType dtype, Layout layout) const override {
    return in_->supports(op, dtype, layout);
  }
  Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout) override {
    refuse_in_capture(CallKind::alloc, "alloc");
    record(CallKind::alloc, "alloc", Phase::eager);
    Tensor t = in_->alloc(std::move(shape), dtype, layout);
    if (!t.defined() || in_->device().type != DeviceType::CPU) return t;
    // A storage aliasing the inner one, so that the decorator knows its blocks by address.
    struct Tagged {
      Tensor inner;
      Storage storage;  // not owning (no deleter): `inner` keeps the memory
    };
    auto tag = std::make_shared<Tagged>();
    tag->inner = t;
    tag->storage.ptr = t.data();
    tag->storage.bytes = t.nbytes();
    tag->storage.device = t.device();
    std::shared_ptr<Storage> s(tag, &tag->storage);
    {
      // Blocks of freed memory inside this one are stale: forget them.
      std::lock_guard<std::mutex> lock(mem_mu_);
      const auto base = reinterpret_cast<uintptr_t>(t.data());
      blocks_.erase(blocks_.lower_bound(base), blocks_.lower_bound(base + t.nbytes()));
      blocks_[base] = Block{t.nbytes(), s};
    }
    return Tensor::from_storage(std::move(s), 0, t.shape(), t.dtype(), t.layout());
  }
  Tensor alloc_host(std::vector<int64_t> shape, DType dtype, Layout layout) override {
    refuse_in_capture(CallKind::alloc_host, "alloc_host");
    record(CallKind::alloc_host, "alloc_host", Phase::eager);
    return in_->alloc_host(std::move(shape), dtype, layout);
  }
  void copy(const Tensor& src, Tensor& dst) override {
    const CopyDir d = copy_dir(src, dst);
    if (d != CopyDir::d2d) refuse_in_capture(CallKind::copy, std::string("copy ") + dir_name(d));
    Call c = Call::of(CallKind::copy, "copy", Phase::eager, d, src.defined() ? src.nbytes() : 0);
    issue(std::move(c), [this, src, dst]() mutable { in_->copy(src, dst); });
  }
  void zero(Tensor& dst) override {
    issue(Call::of(CallKind::zero, "zero"), [this, dst]() mutable { in_->zero(dst); });
  }
  void synchronize() override {
    refuse_in_capture(CallKind::synchronize, "synchronize");
    record(CallKind::synchronize, "synchronize", Phase::eager);
    in_->synchronize();
  }
  void* native_stream() const override { return in_->native_stream(); }
  int64_t device_memory_used_bytes() const override { return in_->device_memory_used_bytes(); }
  std::vector<std::pair<std::string, std::string>> environment() const override {
    return in_->environment();
  }
  void upload_input(const Tensor& src, Tensor& dst) override {
    refuse_in_capture(CallKind::upload_input, "upload_input");
    log_->add(Call::of(CallKind::upload_input, "upload_input", Phase::eager, CopyDir::none,
                       src.defined() ? src.nbytes() : 0));
    in_->upload_input(src, dst);
  }
  void release_input(const Tensor& dst) override {
    // Recordable: the CUDA backend records its event as an external event node in a capture.
    issue(Call::of(CallKind::release_input, "release_input"),
          [this, dst]() { in_->release_input(dst); });
  }
  void forget_input(const Tensor& dst) override {
    refuse_in_capture(CallKind::forget_input, "forget_input");
    record(CallKind::forget_input, "forget_input", Phase::eager);
    in_->forget_input(dst);
  }
  std::unique_ptr<Graph> capture(const std::function<void()>& fn) override {
    refuse_in_capture(CallKind::capture, "capture");
    record(CallKind::capture, "capture", Phase::eager);
    auto g = std::make_unique<RecordedGraph>(*this);
    capture_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    capturing_.store(g.get(), std::memory_order_release);
    try {
      fn();
    } catch (...) {
      capturing_.store(nullptr, std::memory_order_release);
      throw;
    }
    capturing_.store(nullptr, std::memory_order_release);
    ++graphs_;
    return g;
  }
  void profiler_range(bool start) override {
    record(CallKind::profiler_range, "profiler_range", Phase::eager);
    in_->profiler_range(start);
  }
  Layout preferred_weight_layout(Layout activation_layout) const override {
    return in_->preferred_weight_layout(activation_layout);
  }
  bool sgd_takes_bf16_grads() const override { return in_->sgd_takes_bf16_grads(); }

  /// Graphs recorded so far.
  int graphs() const { return graphs_; }

  // ---- the ops: recorded, and run now or stored into the graph being captured ----
  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override {
    op("conv2d_fwd", [=, this]() mutable { in_->conv2d_fwd(p, x, w, y); });
  }
  void conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                           const Tensor& bias, const Tensor& z, bool relu, Tensor& y) override {
    op("conv2d_bias_act_fwd",
       [=, this]() mutable { in_->conv2d_bias_act_fwd(p, x, w, bias, z, relu, y); });
  }
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override {
    op("conv2d_bwd_data", [=, this]() mutable { in_->conv2d_bwd_data(p, dy, w, dx); });
  }
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override {
    op("conv2d_bwd_weights", [=, this]() mutable { in_->conv2d_bwd_weights(p, x, dy, dw); });
  }
  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           Tensor& y, Tensor& save_mean, Tensor& save_var) override {
    op("batchnorm_fwd_train", [=, this]() mutable {
      in_->batchnorm_fwd_train(p, x, gamma, beta, running_mean, running_var, y, save_mean,
                               save_var);
    });
  }
  void batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                    const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                    Tensor& running_mean, Tensor& running_var, Tensor& y,
                                    Tensor& save_mean, Tensor& save_var) override {
    op("batchnorm_add_relu_fwd_train", [=, this]() mutable {
      in_->batchnorm_add_relu_fwd_train(p, x, residual, gamma, beta, running_mean, running_var,
                                        y, save_mean, save_var);
    });
  }
  void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, Tensor& y) override {
    op("batchnorm_fwd_infer", [=, this]() mutable {
      in_->batchnorm_fwd_infer(p, x, gamma, beta, running_mean, running_var, y);
    });
  }
  void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    op("batchnorm_bwd", [=, this]() mutable {
      in_->batchnorm_bwd(p, x, y, dy, gamma, save_mean, save_var, dx, dgamma, dbeta);
    });
  }
  void batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                              const Tensor& g1, const Tensor& g2, const Tensor& gamma,
                              const Tensor& save_mean, const Tensor& save_var, Tensor& dres,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    op("batchnorm_add_relu_bwd", [=, this]() mutable {
      in_->batchnorm_add_relu_bwd(p, x, y, g1, g2, gamma, save_mean, save_var, dres, dx, dgamma,
                                  dbeta);
    });
  }
  void relu_fwd(const Tensor& x, Tensor& y) override {
    op("relu_fwd", [=, this]() mutable { in_->relu_fwd(x, y); });
  }
  void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    op("relu_bwd", [=, this]() mutable { in_->relu_bwd(y, dy, dx); });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    op("add", [=, this]() mutable { in_->add(a, b, y); });
  }
  void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) override {
    op("add_relu_fwd", [=, this]() mutable { in_->add_relu_fwd(a, b, y); });
  }
  void add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) override {
    op("add_relu_bwd", [=, this]() mutable { in_->add_relu_bwd(y, g1, g2, dx); });
  }
  void maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) override {
    op("maxpool2d_fwd", [=, this]() mutable { in_->maxpool2d_fwd(p, x, y); });
  }
  void maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     Tensor& dx) override {
    op("maxpool2d_bwd", [=, this]() mutable { in_->maxpool2d_bwd(p, x, y, dy, dx); });
  }
  void global_avgpool_fwd(const Tensor& x, Tensor& y) override {
    op("global_avgpool_fwd", [=, this]() mutable { in_->global_avgpool_fwd(x, y); });
  }
  void global_avgpool_bwd(const Tensor& dy, Tensor& dx) override {
    op("global_avgpool_bwd", [=, this]() mutable { in_->global_avgpool_bwd(dy, dx); });
  }
  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    op("linear_fwd", [=, this]() mutable { in_->linear_fwd(x, w, b, y); });
  }
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                  Tensor& db) override {
    op("linear_bwd", [=, this]() mutable { in_->linear_bwd(x, w, dy, dx, dw, db); });
  }
  void softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& loss,
                        Tensor& probs) override {
    op("softmax_xent_fwd",
       [=, this]() mutable { in_->softmax_xent_fwd(logits, labels, smoothing, loss, probs); });
  }
  void softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing, float scale,
                        Tensor& dlogits, const Tensor& state) override {
    op("softmax_xent_bwd", [=, this]() mutable {
      in_->softmax_xent_bwd(probs, labels, smoothing, scale, dlogits, state);
    });
  }
  void softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, const Tensor& state, Tensor& loss,
                              Tensor& probs) override {
    op("softmax_xent_mixup_fwd", [=, this]() mutable {
      in_->softmax_xent_mixup_fwd(logits, labels, labels_b, smoothing, state, loss, probs);
    });
  }
  void softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, float scale, Tensor& dlogits,
                              const Tensor& state) override {
    op("softmax_xent_mixup_bwd", [=, this]() mutable {
      in_->softmax_xent_mixup_bwd(probs, labels, labels_b, smoothing, scale, dlogits, state);
    });
  }
  void topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) override {
    op("topk_hits", [=, this]() mutable { in_->topk_hits(logits, labels, hits); });
  }
  void normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                    const std::array<float, 3>& std, Tensor& dst) override {
    op("normalize_u8", [=, this]() mutable { in_->normalize_u8(src, mean, std, dst); });
  }
  void mixup_images(Tensor& x, const Tensor& state) override {
    op("mixup_images", [=, this]() mutable { in_->mixup_images(x, state); });
  }
  void fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) override {
    op("fake_quant_act", [=, this]() mutable { in_->fake_quant_act(x, qstate, update, y); });
  }
  void fake_quant_weight(const Tensor& w, Tensor& y) override {
    op("fake_quant_weight", [=, this]() mutable { in_->fake_quant_weight(w, y); });
  }
  void sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                  Tensor& momentum_buf) override {
    op("sgd_update",
       [=, this]() mutable { in_->sgd_update(p, params, grads, momentum_buf); });
  }
  void check_finite(const Tensor& x, Tensor& state) override {
    op("check_finite", [=, this]() mutable { in_->check_finite(x, state); });
  }
  void update_loss_scale(const LossScaleParams& p, Tensor& state) override {
    op("update_loss_scale", [=, this]() mutable { in_->update_loss_scale(p, state); });
  }
  void load_step_inputs(const Tensor& ring, Tensor& state) override {
    op("load_step_inputs", [=, this]() mutable { in_->load_step_inputs(ring, state); });
  }

 private:
  /// A recorded sequence of calls (see the file comment).
  class RecordedGraph final : public Graph {
   public:
    explicit RecordedGraph(RecordingBackend& be) : be_(be) {}
    void replay() override {
      be_.refuse_in_capture(CallKind::replay, "graph replay");
      be_.record(CallKind::replay, "replay", Phase::eager);
      for (Node& n : nodes) {
        Call c = n.call;
        c.phase = Phase::replay;
        c.thread = std::this_thread::get_id();
        be_.log_->add(std::move(c));
        n.fn();
      }
    }
    struct Node {
      Call call;
      std::function<void()> fn;
    };
    std::vector<Node> nodes;

   private:
    RecordingBackend& be_;
  };

  struct Block {
    size_t bytes = 0;
    std::weak_ptr<Storage> alive;
  };

  /// Whether this thread is recording (other threads, e.g. data loader workers calling
  /// alloc_host, run as usual: CUDA's thread-local capture mode).
  bool capturing_here() const {
    return capturing_.load(std::memory_order_acquire) != nullptr &&
           std::this_thread::get_id() == capture_thread_.load(std::memory_order_relaxed);
  }
  void record(CallKind k, const std::string& name, Phase ph) {
    log_->add(Call::of(k, name, ph));
  }
  /// Inside a capture region: records the violation and throws, as the CUDA call would fail.
  void refuse_in_capture(CallKind k, const std::string& what) {
    if (!capturing_here()) return;
    record(k, what, Phase::capture);
    log_->violation(what + " inside a capture region");
    throw Error("recording backend: " + what +
                " inside a capture region (a CUDA graph cannot record it)");
  }
  /// Records `c`; runs fn now, or stores it into the graph being captured.
  void issue(Call c, std::function<void()> fn) {
    if (capturing_here()) {
      c.phase = Phase::capture;
      capturing_.load(std::memory_order_relaxed)->nodes.push_back({c, std::move(fn)});
      log_->add(std::move(c));
      return;
    }
    c.phase = Phase::eager;
    log_->add(std::move(c));
    fn();
  }
  void op(const char* name, std::function<void()> fn) {
    issue(Call::of(CallKind::op, name), std::move(fn));
  }

  std::unique_ptr<Backend> in_;
  std::shared_ptr<CallLog> log_;
  std::atomic<RecordedGraph*> capturing_{nullptr};  ///< the graph being recorded, or null
  std::atomic<std::thread::id> capture_thread_{};    ///< the thread recording
  int graphs_ = 0;
  mutable std::mutex mem_mu_;
  std::map<uintptr_t, Block> blocks_;  ///< alloc() blocks by address (CPU inner backends)
};

}  // namespace rn50::test
