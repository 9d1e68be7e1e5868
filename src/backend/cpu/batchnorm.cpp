// rn50: oneDNN batch normalisation (torch.nn.BatchNorm2d semantics, see BatchNormParams).
//  * Training forward: batch_normalization_forward (forward_training, use_scale | use_shift, and
//    fuse_norm_relu when p.relu). oneDNN writes the batch mean and the BIASED batch variance into
//    save_mean / save_var; the running statistics are then updated here with the momentum and
//    torch's unbiased factor M / (M - 1), M = N*H*W. With p.relu the primitive's workspace (the
//    ReLU mask, 1 bit per element: 0.8 MB for 32x64x56x56) is kept per layer, found by the
//    layer's save_mean buffer (OnednnBackend::layer_state), for that layer's backward.
//  * Inference forward: use_global_stats with the running statistics.
//  * Backward with p.relu: when the layer's last training forward left its mask for this same y
//    buffer and shape (and x, y, dy, dx share one layout), batch_normalization_backward runs with
//    fuse_norm_relu and reads the mask: dy is masked inside the primitive, no extra pass over
//    memory. The mask serves one backward; otherwise (a second backward, a y from elsewhere)
//    dy is first masked by y > 0 into dx (eltwise relu backward on the forward output) and the
//    plain backward runs in place on dx. Both give dx, dgamma, dbeta of BN followed by ReLU.
// x, y, dy, dx: f32, or bf16 under CPU AMP (gamma, beta and all statistics stay f32).
// NHWC (the training layout on the CPU) in bf16 or f32 trains through our own loops instead
// (batchnorm_nhwc.cpp: oneDNN 2.6's bf16 nspc kernel runs at about half the memory speed, and
// its batch norm cannot fuse the residual join), with the backward's ReLU mask read from y;
// inference stays oneDNN's.
// If y (or dx) has a different layout than x, x (dy) is first reordered into y (dx) and the
// primitive runs in place there.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/batchnorm_nhwc.h"
#include "backend/cpu/onednn_backend.h"
#include "backend/fused_bn_checks.h"
#include "core/check.h"

namespace rn50::onednn {

using dnnl::memory;
using dnnl::normalization_flags;
using dnnl::prop_kind;
using tag = memory::format_tag;

namespace {

int64_t bits(double v) {
  int64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

void check_bn(const char* op, const Tensor& x, const Tensor& y,
              std::initializer_list<std::pair<const char*, const Tensor*>> vecs) {
  const DType dt = compute_dtype_of(op, "x", x);
  RN50_CHECK(x.ndim() == 4, "onednn {}: x must be 4-D, got {}", op, x.str());
  check_tensor(op, "y", y, dt);
  check_same_shape(op, x, "x", y, "y");
  for (const auto& [name, t] : vecs) {
    check_tensor(op, name, *t);
    check_shape(op, name, *t, {x.c()});
  }
}

struct BnEntry : CacheEntry {
  Exec bn;
  size_t ws_bytes = 0;
  /// Backward only: oneDNN 2.6 requires a SHIFT input for backward with use_shift although the
  /// gradients do not depend on beta (the fused ReLU reads its mask, not y); it gets these
  /// zeros.
  std::vector<float> zero_shift;
};

normalization_flags ss_flags() {
  return normalization_flags::use_scale | normalization_flags::use_shift;
}

/// A layer's ReLU mask from its last training forward (see the file comment).
struct ReluMask : CacheEntry {
  void* ws = nullptr;         ///< oneDNN's workspace bytes (64-byte aligned)
  size_t bytes = 0;
  Key fwd_key;                ///< the forward's cache key (y's shape, dtype, layout; eps)
  const void* y = nullptr;    ///< the forward's output buffer; nullptr once used or never set
  ~ReluMask() override { std::free(ws); }
};

/// The mask buffer of the layer owning `save_mean`, at least `bytes` long.
ReluMask& relu_mask_for(OnednnBackend& be, const Tensor& save_mean, size_t bytes) {
  ReluMask& m = be.layer_state<ReluMask>(save_mean.data(), [] {
    return std::make_unique<ReluMask>();
  });
  if (m.bytes < bytes) {
    std::free(m.ws);
    m.bytes = 0;
    m.ws = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    RN50_CHECK(m.ws != nullptr, "onednn: out of host memory allocating a {}-byte ReLU mask",
               bytes);
    m.bytes = bytes;
  }
  return m;
}

/// Whether the training forward / backward of these tensors runs batchnorm_nhwc.cpp's loops:
/// all in NHWC and of one dtype, bf16 or f32 (undefined tensors are not asked about; the first
/// must be defined).
bool own_nhwc(std::initializer_list<const Tensor*> ts) {
  const DType d = (*ts.begin())->dtype();
  if (d != DType::bf16 && d != DType::f32) return false;
  for (const Tensor* t : ts)
    if (t->defined() && (t->dtype() != d || t->layout() != Layout::NHWC)) return false;
  return true;
}

/// A tensor's elements as batchnorm_nhwc.cpp's element type T (uint16_t: bf16 bits; float);
/// nullptr for an undefined tensor.
template <class T>
const T* elems(const Tensor& t) {
  return t.defined() ? t.data_as<const T>() : nullptr;
}

/// Calls f(T{}) with batchnorm_nhwc.cpp's element type for `d`: uint16_t (bf16 bits) for bf16,
/// float otherwise (own_nhwc has already admitted only these two).
template <class F>
void with_elem_type(DType d, F&& f) {
  if (d == DType::bf16)
    f(uint16_t{});
  else
    f(float{});
}

/// torch's running-statistics update: momentum average of the batch mean and of the UNBIASED
/// batch variance (save_var is biased; factor M / (M - 1), M values per channel).
void update_running_stats(const BatchNormParams& p, int64_t M, const Tensor& save_mean,
                          const Tensor& save_var, Tensor& running_mean, Tensor& running_var) {
  const int64_t C = save_mean.numel();
  const float m = static_cast<float>(p.momentum);
  const float unbias = static_cast<float>(static_cast<double>(M) / static_cast<double>(M - 1));
  float* rm = running_mean.data_as<float>();
  float* rv = running_var.data_as<float>();
  const float* bm = save_mean.data_as<const float>();
  const float* bv = save_var.data_as<const float>();
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = (1.f - m) * rm[c] + m * bm[c];
    rv[c] = (1.f - m) * rv[c] + m * bv[c] * unbias;
  }
}

/// Training forward through our NHWC loops (batchnorm_nhwc.cpp), y = act(BN(x) [+ residual]),
/// and the running statistics' update; the layer's oneDNN ReLU mask, if any, no longer
/// belongs to y. `residual` may be undefined.
void own_fwd_train(OnednnBackend& be, const BatchNormParams& p, const Tensor& x,
                   const Tensor& residual, bool relu, const Tensor& gamma, const Tensor& beta,
                   Tensor& running_mean, Tensor& running_var, Tensor& y, Tensor& save_mean,
                   Tensor& save_var) {
  const int64_t M = x.n() * x.h() * x.w();
  if (auto* stale = be.find_layer_state<ReluMask>(save_mean.data())) stale->y = nullptr;
  with_elem_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    bn_nhwc_fwd_train(elems<T>(x), elems<T>(residual), y.data_as<T>(), M, x.c(),
                      gamma.data_as<const float>(), beta.data_as<const float>(),
                      static_cast<float>(p.eps), relu, save_mean.data_as<float>(),
                      save_var.data_as<float>());
  });
  update_running_stats(p, M, save_mean, save_var, running_mean, running_var);
}

}  // namespace

void OnednnBackend::batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x,
                                        const Tensor& gamma, const Tensor& beta,
                                        Tensor& running_mean, Tensor& running_var, Tensor& y,
                                        Tensor& save_mean, Tensor& save_var) {
  const char* op = "batchnorm_fwd_train";
  check_bn(op, x, y,
           {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean},
            {"running_var", &running_var}, {"save_mean", &save_mean}, {"save_var", &save_var}});
  const int64_t M = x.n() * x.h() * x.w();
  RN50_CHECK(M > 1, "onednn {}: need more than one value per channel for training, got {}", op,
             x.str());
  if (own_nhwc({&x, &y})) {
    own_fwd_train(*this, p, x, Tensor(), p.relu, gamma, beta, running_mean, running_var, y,
                  save_mean, save_var);
    return;
  }
  const Tensor* src = &x;
  if (x.layout() != y.layout()) {
    reorder(x, y);
    src = &y;
  }
  Key k = key(Tag::bn_fwd_train).add(y).add(bits(p.eps)).add(p.relu);
  auto& e = cached<BnEntry>(k, [&] {
    auto r = std::make_unique<BnEntry>();
    memory::desc md = plain_md(y), cmd = f32_md({x.c()}, tag::a);
    normalization_flags fl = ss_flags();
    if (p.relu) fl = fl | normalization_flags::fuse_norm_relu;
    dnnl::batch_normalization_forward::desc d(prop_kind::forward_training, md,
                                              static_cast<float>(p.eps), fl);
    dnnl::batch_normalization_forward::primitive_desc pd(d, attr(), engine());
    if (p.relu) {
      memory::desc ws = pd.workspace_desc();
      r->ws_bytes = ws.get_size();
      r->bn = make_exec(pd, dnnl::batch_normalization_forward(pd),
                        {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}, {DNNL_ARG_SCALE, cmd},
                         {DNNL_ARG_SHIFT, cmd}, {DNNL_ARG_MEAN, pd.mean_desc()},
                         {DNNL_ARG_VARIANCE, pd.variance_desc()}, {DNNL_ARG_WORKSPACE, ws}});
    } else {
      r->bn = make_exec(pd, dnnl::batch_normalization_forward(pd),
                        {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}, {DNNL_ARG_SCALE, cmd},
                         {DNNL_ARG_SHIFT, cmd}, {DNNL_ARG_MEAN, pd.mean_desc()},
                         {DNNL_ARG_VARIANCE, pd.variance_desc()}});
    }
    return r;
  });
  e.bn.set(DNNL_ARG_SRC, src->data());
  e.bn.set(DNNL_ARG_DST, y.data());
  e.bn.set(DNNL_ARG_SCALE, gamma.data());
  e.bn.set(DNNL_ARG_SHIFT, beta.data());
  e.bn.set(DNNL_ARG_MEAN, save_mean.data());
  e.bn.set(DNNL_ARG_VARIANCE, save_var.data());
  ReluMask* mask = nullptr;
  if (e.ws_bytes > 0) {
    mask = &relu_mask_for(*this, save_mean, e.ws_bytes);
    mask->y = nullptr;  // not valid until the forward has run
    e.bn.set(DNNL_ARG_WORKSPACE, mask->ws);
  }
  run(e.bn);
  if (mask) {
    mask->fwd_key = k;
    mask->y = y.data();
  }

  update_running_stats(p, M, save_mean, save_var, running_mean, running_var);
}

void OnednnBackend::batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                                 const Tensor& residual, const Tensor& gamma,
                                                 const Tensor& beta, Tensor& running_mean,
                                                 Tensor& running_var, Tensor& y,
                                                 Tensor& save_mean, Tensor& save_var) {
  const char* op = "batchnorm_add_relu_fwd_train";
  check_bn(op, x, y,
           {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean},
            {"running_var", &running_var}, {"save_mean", &save_mean}, {"save_var", &save_var}});
  check_tensor(op, "residual", residual, x.dtype());
  check_same_shape(op, x, "x", residual, "residual");
  if (!own_nhwc({&x, &residual, &y})) {
    Backend::batchnorm_add_relu_fwd_train(p, x, residual, gamma, beta, running_mean, running_var,
                                          y, save_mean, save_var);
    return;
  }
  RN50_CHECK(x.n() * x.h() * x.w() > 1,
             "onednn {}: need more than one value per channel for training, got {}", op, x.str());
  check_bn_add_relu_fwd_buffers(name(), x, residual, y);
  own_fwd_train(*this, p, x, residual, true, gamma, beta, running_mean, running_var, y,
                save_mean, save_var);
}

void OnednnBackend::batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x,
                                        const Tensor& gamma, const Tensor& beta,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        Tensor& y) {
  const char* op = "batchnorm_fwd_infer";
  check_bn(op, x, y,
           {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean},
            {"running_var", &running_var}});
  const Tensor* src = &x;
  if (x.layout() != y.layout()) {
    reorder(x, y);
    src = &y;
  }
  Key k = key(Tag::bn_fwd_infer).add(y).add(bits(p.eps)).add(p.relu);
  auto& e = cached<BnEntry>(k, [&] {
    auto r = std::make_unique<BnEntry>();
    memory::desc md = plain_md(y), cmd = f32_md({x.c()}, tag::a);
    normalization_flags fl = ss_flags() | normalization_flags::use_global_stats;
    if (p.relu) fl = fl | normalization_flags::fuse_norm_relu;
    dnnl::batch_normalization_forward::desc d(prop_kind::forward_inference, md,
                                              static_cast<float>(p.eps), fl);
    dnnl::batch_normalization_forward::primitive_desc pd(d, attr(), engine());
    r->bn = make_exec(pd, dnnl::batch_normalization_forward(pd),
                      {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}, {DNNL_ARG_SCALE, cmd},
                       {DNNL_ARG_SHIFT, cmd}, {DNNL_ARG_MEAN, cmd}, {DNNL_ARG_VARIANCE, cmd}});
    return r;
  });
  e.bn.set(DNNL_ARG_SRC, src->data());
  e.bn.set(DNNL_ARG_DST, y.data());
  e.bn.set(DNNL_ARG_SCALE, gamma.data());
  e.bn.set(DNNL_ARG_SHIFT, beta.data());
  e.bn.set(DNNL_ARG_MEAN, running_mean.data());
  e.bn.set(DNNL_ARG_VARIANCE, running_var.data());
  run(e.bn);
}

void OnednnBackend::batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                                  const Tensor& save_var, Tensor& dx, Tensor& dgamma,
                                  Tensor& dbeta) {
  const char* op = "batchnorm_bwd";
  check_bn(op, x, dy,
           {{"gamma", &gamma}, {"save_mean", &save_mean}, {"save_var", &save_var},
            {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  check_tensor(op, "dx", dx, x.dtype());
  check_same_shape(op, x, "x", dx, "dx");
  if (p.relu) {
    RN50_CHECK(y.defined(), "onednn {}: y (the forward output) is required when relu is fused",
               op);
    check_same_shape(op, x, "x", y, "y");
  }
  if (own_nhwc({&x, &dy, &dx, p.relu ? &y : &dy})) {
    with_elem_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      bn_nhwc_bwd(elems<T>(x), p.relu ? elems<T>(y) : nullptr, elems<T>(dy), dx.data_as<T>(),
                  x.n() * x.h() * x.w(), x.c(), gamma.data_as<const float>(),
                  save_mean.data_as<const float>(), save_var.data_as<const float>(),
                  static_cast<float>(p.eps), p.relu, dgamma.data_as<float>(),
                  dbeta.data_as<float>());
    });
    return;
  }
  // With a fused ReLU: the layer's mask from its forward, when it belongs to this y (see the
  // file comment).
  ReluMask* mask = nullptr;
  if (p.relu) {
    mask = find_layer_state<ReluMask>(save_mean.data());
    if (mask != nullptr &&
        !(mask->y == y.data() && y.layout() == x.layout() && dy.layout() == x.layout() &&
          dx.layout() == x.layout() &&
          mask->fwd_key == key(Tag::bn_fwd_train).add(y).add(bits(p.eps)).add(true)))
      mask = nullptr;
  }
  // The gradient reaching the normalisation (or, with the mask, the ReLU): dy masked by the
  // ReLU from y (or dy itself), in dx's layout. It lands in dx unless dy can be used directly.
  const Tensor* ddst = &dy;
  if (p.relu && mask == nullptr) {
    relu_bwd(y, dy, dx);
    ddst = &dx;
  } else if (dy.layout() != dx.layout()) {
    reorder(dy, dx);
    ddst = &dx;
  }
  const bool fused = mask != nullptr;
  Key k = key(Tag::bn_bwd).add(x).add(dx).add(bits(p.eps)).add(fused);
  auto& e = cached<BnEntry>(k, [&] {
    auto r = std::make_unique<BnEntry>();
    memory::desc xmd = plain_md(x), dmd = plain_md(dx), cmd = f32_md({x.c()}, tag::a);
    normalization_flags fl = ss_flags();
    if (fused) fl = fl | normalization_flags::fuse_norm_relu;
    dnnl::batch_normalization_forward::desc fd(prop_kind::forward_training, xmd,
                                               static_cast<float>(p.eps), fl);
    dnnl::batch_normalization_forward::primitive_desc hint(fd, attr(), engine());
    dnnl::batch_normalization_backward::desc d(prop_kind::backward, dmd, xmd,
                                               static_cast<float>(p.eps), fl);
    dnnl::batch_normalization_backward::primitive_desc pd(d, attr(), engine(), hint);
    if (fused) {
      const memory::desc ws = pd.workspace_desc();
      r->ws_bytes = ws.get_size();
      r->bn = make_exec(pd, dnnl::batch_normalization_backward(pd),
                        {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_MEAN, cmd}, {DNNL_ARG_VARIANCE, cmd},
                         {DNNL_ARG_SCALE, cmd}, {DNNL_ARG_SHIFT, cmd}, {DNNL_ARG_DIFF_DST, dmd},
                         {DNNL_ARG_DIFF_SRC, dmd}, {DNNL_ARG_DIFF_SCALE, cmd},
                         {DNNL_ARG_DIFF_SHIFT, cmd}, {DNNL_ARG_WORKSPACE, ws}});
    } else {
      r->bn = make_exec(pd, dnnl::batch_normalization_backward(pd),
                        {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_MEAN, cmd}, {DNNL_ARG_VARIANCE, cmd},
                         {DNNL_ARG_SCALE, cmd}, {DNNL_ARG_SHIFT, cmd}, {DNNL_ARG_DIFF_DST, dmd},
                         {DNNL_ARG_DIFF_SRC, dmd}, {DNNL_ARG_DIFF_SCALE, cmd},
                         {DNNL_ARG_DIFF_SHIFT, cmd}});
    }
    r->zero_shift.assign(static_cast<size_t>(x.c()), 0.f);
    r->bn.set(DNNL_ARG_SHIFT, r->zero_shift.data());
    return r;
  });
  if (fused) {
    RN50_CHECK(e.ws_bytes <= mask->bytes,
               "onednn {}: the ReLU mask of the forward ({} bytes) is smaller than the backward "
               "needs ({} bytes)",
               op, mask->bytes, e.ws_bytes);
    e.bn.set(DNNL_ARG_WORKSPACE, mask->ws);
    mask->y = nullptr;  // one backward per forward
  }
  e.bn.set(DNNL_ARG_SRC, x.data());
  e.bn.set(DNNL_ARG_MEAN, save_mean.data());
  e.bn.set(DNNL_ARG_VARIANCE, save_var.data());
  e.bn.set(DNNL_ARG_SCALE, gamma.data());
  e.bn.set(DNNL_ARG_DIFF_DST, ddst->data());
  e.bn.set(DNNL_ARG_DIFF_SRC, dx.data());
  e.bn.set(DNNL_ARG_DIFF_SCALE, dgamma.data());
  e.bn.set(DNNL_ARG_DIFF_SHIFT, dbeta.data());
  run(e.bn);
}

void OnednnBackend::batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x,
                                           const Tensor& y, const Tensor& g1, const Tensor& g2,
                                           const Tensor& gamma, const Tensor& save_mean,
                                           const Tensor& save_var, Tensor& dres, Tensor& dx,
                                           Tensor& dgamma, Tensor& dbeta) {
  const char* op = "batchnorm_add_relu_bwd";
  RN50_CHECK(y.defined() && g1.defined() && dres.defined() && dx.defined(),
             "onednn {}: y, g1, dres and dx are required (g2 may be undefined)", op);
  if (!own_nhwc({&x, &y, &g1, &g2, &dres, &dx})) {
    Backend::batchnorm_add_relu_bwd(p, x, y, g1, g2, gamma, save_mean, save_var, dres, dx, dgamma,
                                    dbeta);
    return;
  }
  check_bn(op, x, y,
           {{"gamma", &gamma}, {"save_mean", &save_mean}, {"save_var", &save_var},
            {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  for (const auto& [name, t] : {std::pair{"g1", &g1}, {"g2", &g2}, {"dres", &dres}, {"dx", &dx}})
    if (t->defined()) check_same_shape(op, x, "x", *t, name);
  check_bn_add_relu_bwd_buffers(name(), x, y, g1, g2, dres, dx);
  with_elem_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    bn_nhwc_add_relu_bwd(elems<T>(x), elems<T>(y), elems<T>(g1), elems<T>(g2), dres.data_as<T>(),
                         dx.data_as<T>(), x.n() * x.h() * x.w(), x.c(),
                         gamma.data_as<const float>(), save_mean.data_as<const float>(),
                         save_var.data_as<const float>(), static_cast<float>(p.eps),
                         dgamma.data_as<float>(), dbeta.data_as<float>());
  });
}

}  // namespace rn50::onednn
