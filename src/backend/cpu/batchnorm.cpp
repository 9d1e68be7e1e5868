// rn50: oneDNN batch normalisation (torch.nn.BatchNorm2d semantics, see BatchNormParams).
//  * Training forward: batch_normalization_forward (forward_training, use_scale | use_shift, and
//    fuse_norm_relu when p.relu; its workspace goes to a throw-away scratch buffer because the
//    backward recomputes the ReLU mask from y). oneDNN writes the batch mean and the BIASED batch
//    variance into save_mean / save_var; the running statistics are then updated here with the
//    momentum and torch's unbiased factor M / (M - 1), M = N*H*W.
//  * Inference forward: use_global_stats with the running statistics.
//  * Backward: with p.relu, dy is first masked by y > 0 into dx (eltwise relu backward using the
//    forward output, i.e. relu_bwd), then batch_normalization_backward (prop_kind::backward) runs
//    in place on dx, writing dx, dgamma, dbeta.
// x, y, dy, dx: f32, or bf16 under CPU AMP (gamma, beta and all statistics stay f32).
// If y (or dx) has a different layout than x, x (dy) is first reordered into y (dx) and the
// primitive runs in place there.
#include <cstring>
#include <vector>

#include "backend/cpu/onednn_backend.h"
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
  /// gradients do not depend on beta (no ReLU is fused there); it gets these zeros.
  std::vector<float> zero_shift;
};

normalization_flags ss_flags() {
  return normalization_flags::use_scale | normalization_flags::use_shift;
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
  if (e.ws_bytes > 0) e.bn.set(DNNL_ARG_WORKSPACE, scratch(kScratchWork, e.ws_bytes));
  run(e.bn);

  // Running statistics (torch: momentum update, unbiased variance).
  const int64_t C = x.c();
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
  // The gradient reaching the normalisation: dy masked by the ReLU (or dy itself), in dx's
  // layout. It lands in dx unless dy can be used directly.
  const Tensor* ddst = &dy;
  if (p.relu) {
    RN50_CHECK(y.defined(), "onednn {}: y (the forward output) is required when relu is fused",
               op);
    check_same_shape(op, x, "x", y, "y");
    relu_bwd(y, dy, dx);
    ddst = &dx;
  } else if (dy.layout() != dx.layout()) {
    reorder(dy, dx);
    ddst = &dx;
  }
  Key k = key(Tag::bn_bwd).add(x).add(dx).add(bits(p.eps));
  auto& e = cached<BnEntry>(k, [&] {
    auto r = std::make_unique<BnEntry>();
    memory::desc xmd = plain_md(x), dmd = plain_md(dx), cmd = f32_md({x.c()}, tag::a);
    dnnl::batch_normalization_forward::desc fd(prop_kind::forward_training, xmd,
                                               static_cast<float>(p.eps), ss_flags());
    dnnl::batch_normalization_forward::primitive_desc hint(fd, attr(), engine());
    dnnl::batch_normalization_backward::desc d(prop_kind::backward, dmd, xmd,
                                               static_cast<float>(p.eps), ss_flags());
    dnnl::batch_normalization_backward::primitive_desc pd(d, attr(), engine(), hint);
    r->bn = make_exec(pd, dnnl::batch_normalization_backward(pd),
                      {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_MEAN, cmd}, {DNNL_ARG_VARIANCE, cmd},
                       {DNNL_ARG_SCALE, cmd}, {DNNL_ARG_SHIFT, cmd}, {DNNL_ARG_DIFF_DST, dmd},
                       {DNNL_ARG_DIFF_SRC, dmd}, {DNNL_ARG_DIFF_SCALE, cmd},
                       {DNNL_ARG_DIFF_SHIFT, cmd}});
    r->zero_shift.assign(static_cast<size_t>(x.c()), 0.f);
    r->bn.set(DNNL_ARG_SHIFT, r->zero_shift.data());
    return r;
  });
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

}  // namespace rn50::onednn
