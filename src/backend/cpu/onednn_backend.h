// rn50: the oneDNN CPU backend ("onednn"). One dnnl::engine (cpu) and one dnnl::stream, owned by
// the backend; oneDNN primitives are created once per (op, shapes, layouts, parameters) and kept
// in a cache, together with the reorders and scratch buffers they need, so a steady-state call
// allocates nothing.
//
// Activations are handed to oneDNN in their actual plain layout (format_tag::nchw / nhwc), so no
// activation reorders happen; convolution picks its own weight layout (format_tag::any) and the
// cached reorders convert our OIHW f32 weights into it (and weight gradients back to OIHW).
//
// Ops through oneDNN: conv2d (fwd, bwd data, bwd weights), batchnorm (train/infer forward and
// backward; ReLU applied/masked via eltwise primitives), relu fwd/bwd, add / add_relu (binary
// primitive with a relu post-op), linear (inner_product fwd/bwd). Plain OpenMP loops: maxpool,
// global avgpool, softmax cross-entropy, normalize_u8, SGD, and the running-statistics update.
//
// Not thread-safe: one backend instance must be used from one thread at a time (its ops are
// internally parallel through OpenMP).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rn50/backend.h"

namespace rn50::onednn {

/// A cached entry: any op-specific bundle of primitives, descriptors and scratch memory.
struct CacheEntry {
  virtual ~CacheEntry() = default;
};

/// Counters for tests and diagnostics.
struct CacheStats {
  size_t entries = 0;  ///< distinct cached (op, shape, ...) bundles
  size_t hits = 0;     ///< lookups answered from the cache
  size_t misses = 0;   ///< lookups that created a bundle
};

/// The oneDNN backend. See the file comment; semantics of every op are those of rn50::Backend.
class OnednnBackend final : public Backend {
 public:
  OnednnBackend();
  ~OnednnBackend() override;

  std::string name() const override { return "onednn"; }
  Device device() const override { return Device{}; }
  /// f32 in NCHW or NHWC for every op; false for any other dtype.
  bool supports(Op op, DType dtype, Layout layout) const override;

  Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout = Layout::NCHW) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void zero(Tensor& dst) override;
  void synchronize() override;

  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override;
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override;
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override;

  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           Tensor& y, Tensor& save_mean, Tensor& save_var) override;
  void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, Tensor& y) override;
  void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override;

  void relu_fwd(const Tensor& x, Tensor& y) override;
  void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) override;

  void maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) override;
  void maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     Tensor& dx) override;
  void global_avgpool_fwd(const Tensor& x, Tensor& y) override;
  void global_avgpool_bwd(const Tensor& dy, Tensor& dx) override;

  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                  Tensor& db) override;

  void softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& loss,
                        Tensor& probs) override;
  void softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing, float scale,
                        Tensor& dlogits) override;

  void normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                    const std::array<float, 3>& std, Tensor& dst) override;

  void sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                  Tensor& momentum_buf) override;

  /// Primitive-cache counters (for tests: a repeated same-shape call must be a hit).
  CacheStats cache_stats() const { return stats_; }
  /// Drops every cached primitive and buffer (the counters are kept).
  void clear_cache() { cache_.clear(); stats_.entries = 0; }

  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

  /// Returns the entry cached under `key`, creating it with `make()` (which returns a
  /// std::unique_ptr<T>) on a miss. T must derive from CacheEntry; keys must be unique per T.
  template <class T, class Make>
  T& cached(const std::string& key, Make&& make) {
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++stats_.hits;
      return static_cast<T&>(*it->second);
    }
    ++stats_.misses;
    std::unique_ptr<T> e = make();
    T& ref = *e;
    cache_.emplace(key, std::move(e));
    stats_.entries = cache_.size();
    return ref;
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<std::string, std::unique_ptr<CacheEntry>> cache_;
  CacheStats stats_;
};

// ---- helpers shared by the op files (onednn_backend.cpp) ----

/// "F32[2,3,4,4] NHWC" style key fragment: dims, dtype and layout of `t`.
std::string key_of(const Tensor& t);
/// The oneDNN plain memory descriptor of `t` (4-D: nchw/nhwc tag from its layout; 1-D: a; 2-D:
/// ab). Throws rn50::Error for dtypes oneDNN does not cover here (only f32 is supported).
dnnl::memory::desc plain_md(const Tensor& t);
/// Plain f32 memory descriptor for logical dims with the given tag.
dnnl::memory::desc f32_md(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag);
/// dnnl::memory over the tensor's data (no copy). `md` must describe the tensor's bytes.
dnnl::memory mem(const dnnl::memory::desc& md, dnnl::engine& eng, const Tensor& t);
/// Throws rn50::Error naming `op` unless `t` is a defined f32 CPU tensor.
void check_f32(const char* op, const char* what, const Tensor& t);
/// Throws rn50::Error naming `op` unless `t` has exactly `shape`.
void check_shape(const char* op, const char* what, const Tensor& t,
                 const std::vector<int64_t>& shape);

}  // namespace rn50::onednn
