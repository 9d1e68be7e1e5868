// rn50: the oneDNN CPU backend ("onednn").
//
// One dnnl::engine (cpu) and one in-order dnnl::stream, owned by the backend. oneDNN primitives are
// created once per (op, shapes, layouts, dtypes, parameters) and kept in a cache together with
// their argument bindings; a steady-state call only rebinds data pointers and executes (no
// primitive creation, no buffer allocation on our side). Scratch memory (oneDNN scratchpads in
// user mode, reordered convolution weights, batch-norm workspaces) lives in a few backend-wide
// growable buffers shared by all primitives, since ops run one after another.
//
// Activations are handed to oneDNN in their actual plain layout (format_tag::nchw / nhwc), so no
// activation reorders happen in the common case; convolutions pick their own weight layout
// (format_tag::any) and cached reorders convert our OIHW f32 weights into it (and weight
// gradients back to OIHW).
//
// Ops through oneDNN: conv2d (fwd, bwd data, bwd weights; Winograd or, for some 1x1 convs, a
// matmul by the policy of conv_algo.h), batchnorm (train/infer forward with fused ReLU; backward
// with the ReLU fused through the forward's bit-mask workspace, or, without one, the mask from y
// via eltwise relu backward, then batch-norm backward), relu fwd/bwd (eltwise), add / add_relu
// (binary with a relu post-op), maxpool forward and global average pooling fwd/bwd (pooling),
// linear (inner product fwd/bwd data/bwd weights), layout changes in copy() (reorder). Plain
// OpenMP loops: NHWC (bf16, f32) batchnorm training forward and backward, also fused with the
// residual join (batchnorm_nhwc.cpp), maxpool backward (torch's first-maximum routing), softmax
// cross-entropy, normalize_u8, SGD, and the running-statistics update.
//
// Not thread-safe: use one backend instance from one thread at a time (its ops are internally
// parallel through OpenMP).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "core/check.h"
#include "rn50/backend.h"

namespace rn50::onednn {

/// Cache key: a short fixed-capacity list of integers (op tag, tensor dims/dtypes/layouts,
/// parameters). Building and hashing one allocates nothing. Throws rn50::Error when full.
struct Key {
  static constexpr int kMax = 48;
  std::array<int64_t, kMax> v{};
  int n = 0;
  /// Appends one integer.
  Key& add(int64_t x);
  /// Appends ndim, dims, dtype and layout of `t` (a marker for an undefined tensor).
  Key& add(const Tensor& t);
  bool operator==(const Key& o) const;
};
struct KeyHash {
  size_t operator()(const Key& k) const;
};

/// A cached primitive with its argument bindings. The memory objects are created once (without
/// a buffer); each call binds the tensors' data pointers with set() and executes.
struct Exec {
  dnnl::primitive prim;
  std::vector<std::pair<int, dnnl::memory>> mems;  ///< DNNL_ARG_* -> memory
  std::vector<dnnl_exec_arg_t> c_args;             ///< the same, for dnnl_primitive_execute
  size_t scratch_bytes = 0;                        ///< user-mode scratchpad size (0: none)
  /// Binds `p` to argument `arg` (which must have been declared when the Exec was built).
  void set(int arg, const void* p);
  bool defined() const { return static_cast<bool>(prim); }
};

/// A cached entry: any op-specific bundle of Execs and sizes.
struct CacheEntry {
  virtual ~CacheEntry() = default;
};

/// Counters for tests and diagnostics.
struct CacheStats {
  size_t entries = 0;  ///< distinct cached bundles
  size_t hits = 0;     ///< lookups answered from the cache
  size_t misses = 0;   ///< lookups that created a bundle
};

/// The backend-wide scratch buffers (see Backend::scratch).
/// kScratchAct0..2: activations of a Winograd convolution in its blocked layout (conv.cpp).
enum ScratchSlot : int {
  kScratchPad = 0, kScratchWeights, kScratchWork, kScratchAct0, kScratchAct1, kScratchAct2,
  kScratchSlots
};

struct ConvImpl;  // conv_registry.h

/// The oneDNN backend. See the file comment; semantics of every op are those of rn50::Backend.
class OnednnBackend final : public Backend {
 public:
  OnednnBackend();
  ~OnednnBackend() override;

  std::string name() const override { return "onednn"; }
  /// {"onednn", "major.minor.patch"} of the library linked (dnnl_version()).
  std::vector<std::pair<std::string, std::string>> environment() const override;
  Device device() const override { return Device{}; }
  /// f32 in NCHW or NHWC for every op; bf16 (CPU AMP, `--amp --amp-dtype bf16`) for the
  /// compute ops (conv, batchnorm, relu, add, pooling, linear, normalize_u8, mixup) when oneDNN
  /// runs bf16 on this CPU (AVX-512; native bf16 instructions with AVX-512-BF16 / AMX). The
  /// loss, top-k, SGD and loss-scaling ops are f32 (the model converts the logits).
  bool supports(Op op, DType dtype, Layout layout) const override;
  /// Whether oneDNN creates bf16 convolutions on this CPU (checked once).
  static bool bf16_available();

  /// Uninitialised 64-byte-aligned host tensor.
  Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout = Layout::NCHW) override;
  /// Host copy; 4-D layout changes and f32 <-> bf16 conversions (round to nearest even) via a
  /// cached oneDNN reorder, layout changes of other dtypes by loops. Throws rn50::Error on a
  /// shape mismatch, another dtype conversion or a non-CPU tensor.
  void copy(const Tensor& src, Tensor& dst) override;
  void zero(Tensor& dst) override;
  /// stream.wait().
  void synchronize() override;

  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override;
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override;
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override;

  /// bf16 or f32 NHWC: one pass of our loops (bn_nhwc_fwd_train with a residual); other dtypes
  /// and layouts: Backend's default (batch norm, then add + ReLU).
  void batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                    const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                    Tensor& running_mean, Tensor& running_var, Tensor& y,
                                    Tensor& save_mean, Tensor& save_var) override;
  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           Tensor& y, Tensor& save_mean, Tensor& save_var) override;
  void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, Tensor& y) override;
  void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override;
  /// bf16 or f32 NHWC: our loops in two passes (bn_nhwc_add_relu_bwd); other dtypes and
  /// layouts: Backend's default (add + ReLU backward, then batch norm's).
  void batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                              const Tensor& g1, const Tensor& g2, const Tensor& gamma,
                              const Tensor& save_mean, const Tensor& save_var, Tensor& dres,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta) override;

  void relu_fwd(const Tensor& x, Tensor& y) override;
  void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) override;
  void add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) override;

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
                        Tensor& dlogits, const Tensor& state) override;
  void softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, const Tensor& state, Tensor& loss,
                              Tensor& probs) override;
  void softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, float scale, Tensor& dlogits,
                              const Tensor& state) override;
  void mixup_images(Tensor& x, const Tensor& state) override;
  void fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) override;
  void fake_quant_weight(const Tensor& w, Tensor& y) override;
  void topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) override;

  void normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                    const std::array<float, 3>& std, Tensor& dst) override;

  void sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                  Tensor& momentum_buf) override;
  /// True: sgd_update's f32 slabs take bf16 gradients too (src/backend/cpu/sgd.cpp).
  bool sgd_takes_bf16_grads() const override;
  void check_finite(const Tensor& x, Tensor& state) override;
  void update_loss_scale(const LossScaleParams& p, Tensor& state) override;

  // ---- introspection (tests) ----
  /// Primitive-cache counters: a repeated same-shape call must be a hit, never a new entry.
  CacheStats cache_stats() const { return stats_; }
  /// Drops every cached primitive (the counters other than `entries` are kept).
  void clear_cache();

  // ---- for the op files ----
  /// oneDNN's own convolution (Winograd for f32 3x3 stride-1 pad-1 where conv_winograd_allowed
  /// and oneDNN takes the shape, else direct): the last entry of each direction's list in
  /// conv_registry.h. Return "onednn_winograd" or "onednn_direct", whichever ran.
  const char* conv2d_fwd_onednn(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                                Tensor& y);
  const char* conv2d_bwd_data_onednn(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                                     Tensor& dx);
  const char* conv2d_bwd_weights_onednn(const Conv2dParams& p, const Tensor& x,
                                        const Tensor& dy, Tensor& dw);
  /// The convolution implementation chosen for the call shape `key` (conv_registry.cpp's
  /// cache, apart from the primitive cache and its counters): nullptr until chosen.
  const ConvImpl*& conv_choice(const Key& key) { return conv_choices_[key]; }

  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

  /// Returns the entry cached under `key`, creating it with `make()` (returning
  /// std::unique_ptr<T>) on a miss. T derives from CacheEntry; each op tag maps to one T.
  template <class T, class Make>
  T& cached(const Key& key, Make&& make) {
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++stats_.hits;
      return static_cast<T&>(*it->second);
    }
    ++stats_.misses;
    std::unique_ptr<T> e;
    try {
      e = make();
    } catch (const dnnl::error& err) {
      RN50_FAIL("onednn: creating the primitive for op tag {} failed: {}", key.v[0], err.what());
    }
    T& ref = *e;
    cache_.emplace(key, std::move(e));
    stats_.entries = cache_.size();
    return ref;
  }

  /// Builds an Exec for `prim` created from `pd`, declaring the arguments `args` (DNNL_ARG_*
  /// with their memory descriptors). The primitive must use scratchpad_mode::user (see attr()).
  Exec make_exec(const dnnl::primitive_desc_base& pd, dnnl::primitive prim,
                 std::initializer_list<std::pair<int, dnnl::memory::desc>> args);
  /// Executes `e` on the stream (binding the shared scratchpad). Throws rn50::Error on failure.
  void run(Exec& e);
  /// Primitive attributes every primitive here uses (user-mode scratchpad).
  static dnnl::primitive_attr attr();
  /// A 64-byte-aligned backend-wide buffer of at least `bytes` bytes for `slot`; grows on demand
  /// (invalidating the slot's previous pointer), never shrinks.
  void* scratch(ScratchSlot slot, size_t bytes);
  /// dst = src through a cached oneDNN reorder between their plain descriptors (a 4-D layout
  /// change and/or an f32 <-> bf16 conversion). Same logical shape.
  void reorder(const Tensor& src, const Tensor& dst);
  /// State one layer keeps from its training forward to its backward (today: the batch-norm
  /// ReLU mask, see batchnorm.cpp), found by a buffer only that layer owns (`owner`, e.g. its
  /// save_mean). Created with `make()` (returning std::unique_ptr<T>, T derived from
  /// CacheEntry) on first use; kept until the backend is destroyed. nullptr from find_layer_state
  /// when `owner` has none.
  template <class T, class Make>
  T& layer_state(const void* owner, Make&& make) {
    auto& slot = layer_state_[owner];
    if (!slot) slot = make();
    return static_cast<T&>(*slot);
  }
  template <class T>
  T* find_layer_state(const void* owner) {
    auto it = layer_state_.find(owner);
    return it == layer_state_.end() ? nullptr : static_cast<T*>(it->second.get());
  }

 private:
  struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
  };
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<Key, std::unique_ptr<CacheEntry>, KeyHash> cache_;
  CacheStats stats_;
  std::array<Buf, kScratchSlots> scratch_{};
  std::unordered_map<const void*, std::unique_ptr<CacheEntry>> layer_state_;
  std::unordered_map<Key, const ConvImpl*, KeyHash> conv_choices_;
};

// ---- helpers shared by the op files (defined in onednn_backend.cpp) ----

/// Op tags for cache keys (one per cached bundle type).
enum class Tag : int64_t {
  reorder = 1, conv_fwd, conv_bwd_data, conv_bwd_weights, bn_fwd_train, bn_fwd_infer, bn_bwd,
  relu_fwd, relu_bwd, binary, maxpool_fwd, avgpool_fwd, avgpool_bwd, linear_fwd,
  linear_bwd_data, linear_bwd_weights, conv_matmul, conv_im2col, conv_winograd, conv_choice
};
/// A key starting with `tag`.
inline Key key(Tag tag) { Key k; k.add(static_cast<int64_t>(tag)); return k; }

/// The oneDNN memory descriptor of `t` (f32 or bf16) in its plain layout: 4-D -> nchw/nhwc by
/// its layout, other ranks -> dense row-major. Throws rn50::Error for other dtypes.
dnnl::memory::desc plain_md(const Tensor& t);
/// Plain f32 memory descriptor for `dims` with `tag`.
dnnl::memory::desc f32_md(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag);
/// Memory descriptor for `dims` with `tag` in dtype `dt` (f32 or bf16).
dnnl::memory::desc md_of(const dnnl::memory::dims& dims, DType dt, dnnl::memory::format_tag tag);
/// oneDNN's data type for an rn50 compute dtype (f32 or bf16); throws rn50::Error otherwise.
dnnl::memory::data_type dnnl_dtype(DType dt);
/// The compute dtype of activation/weight tensor `t` (f32, or bf16 under CPU AMP): throws
/// rn50::Error naming `op` unless t is a defined CPU tensor of one of them.
DType compute_dtype_of(const char* op, const char* what, const Tensor& t);
/// The effective memory order of `t`: its layout when 4-D, NCHW (row-major) otherwise.
inline Layout eff_layout(const Tensor& t) { return t.ndim() == 4 ? t.layout() : Layout::NCHW; }
/// Throws rn50::Error naming `op` unless `t` is a defined CPU tensor of dtype `dt`.
void check_tensor(const char* op, const char* what, const Tensor& t, DType dt = DType::f32);
/// Throws rn50::Error naming `op` unless `t` has exactly `shape`.
void check_shape(const char* op, const char* what, const Tensor& t,
                 const std::vector<int64_t>& shape);
/// Throws rn50::Error naming `op` unless `a` and `b` have the same logical shape.
void check_same_shape(const char* op, const Tensor& a, const char* an, const Tensor& b,
                      const char* bn);
/// Whether oneDNN's effective ISA on this CPU (capped by ONEDNN_MAX_CPU_ISA) includes `isa`.
/// Not cached: callers cache it, since oneDNN fixes the ISA at its first dispatch.
bool onednn_isa_at_least(dnnl::cpu_isa isa);

}  // namespace rn50::onednn
