// rn50: the profiling backend (make_profiling_backend, include/rn50/profile.h): every op of the
// wrapped backend timed into the active OpProfiler, the backend synchronised after each op so
// that its time is its own. Ops are named by what they compute, grouped into families and
// phases (forward, backward-data, backward-weights) as the profile table prints them.
#include <initializer_list>
#include <utility>

#include "rn50/backend.h"
#include "rn50/profile.h"

namespace rn50 {

namespace {

// The ops, one object each (OpProfiler keys its counters by address).
constexpr ProfileOp kConvFwd{"conv fwd", "conv", "fwd"};
constexpr ProfileOp kConvBiasAct{"conv fwd (bias, add, relu fused)", "conv", "fwd"};
constexpr ProfileOp kConvBwdData{"conv bwd_data", "conv", "bwd_data"};
constexpr ProfileOp kConvBwdWeights{"conv bwd_weights", "conv", "bwd_weights"};
constexpr ProfileOp kBnFwdTrain{"batchnorm fwd (train)", "batchnorm", "fwd"};
constexpr ProfileOp kBnAddReluFwd{"batchnorm+add+relu fwd (train)", "batchnorm", "fwd"};
constexpr ProfileOp kBnFwdInfer{"batchnorm fwd (infer)", "batchnorm", "fwd"};
constexpr ProfileOp kBnBwd{"batchnorm bwd", "batchnorm", "bwd"};
constexpr ProfileOp kBnAddReluBwd{"batchnorm+add+relu bwd", "batchnorm", "bwd"};
constexpr ProfileOp kReluFwd{"relu fwd", "relu", "fwd"};
constexpr ProfileOp kReluBwd{"relu bwd", "relu", "bwd"};
constexpr ProfileOp kAdd{"add", "add", "fwd"};
constexpr ProfileOp kAddReluFwd{"add+relu fwd", "add", "fwd"};
constexpr ProfileOp kAddReluBwd{"add+relu bwd", "add", "bwd"};
constexpr ProfileOp kMaxpoolFwd{"maxpool fwd", "pool", "fwd"};
constexpr ProfileOp kMaxpoolBwd{"maxpool bwd", "pool", "bwd"};
constexpr ProfileOp kAvgpoolFwd{"global avgpool fwd", "pool", "fwd"};
constexpr ProfileOp kAvgpoolBwd{"global avgpool bwd", "pool", "bwd"};
constexpr ProfileOp kLinearFwd{"linear fwd", "linear", "fwd"};
constexpr ProfileOp kLinearBwd{"linear bwd (data + weights)", "linear", "bwd"};
constexpr ProfileOp kXentFwd{"softmax xent fwd", "loss", "fwd"};
constexpr ProfileOp kXentBwd{"softmax xent bwd", "loss", "bwd"};
constexpr ProfileOp kTopk{"top-k hits", "metrics", "-"};
constexpr ProfileOp kNormalize{"normalize u8 input", "input", "-"};
constexpr ProfileOp kMixup{"mixup images", "input", "-"};
constexpr ProfileOp kUpload{"upload input", "copy", "-"};
constexpr ProfileOp kFqAct{"fake-quant activation", "qat", "fwd"};
constexpr ProfileOp kFqWeight{"fake-quant weight", "qat", "fwd"};
constexpr ProfileOp kSgd{"sgd update", "sgd", "update"};
constexpr ProfileOp kCheckFinite{"check finite", "amp", "-"};
constexpr ProfileOp kLossScale{"update loss scale", "amp", "-"};
constexpr ProfileOp kStepInputs{"load step inputs", "sgd", "-"};
constexpr ProfileOp kCopy{"copy", "copy", "-"};
constexpr ProfileOp kZero{"zero", "copy", "-"};
constexpr ProfileOp kAlloc{"alloc", "alloc", "-"};
constexpr ProfileOp kSync{"synchronize", "sync", "-"};

/// 2 x the multiply-adds of a convolution: x (N,C,H,W), w (K,C,R,S), y (N,K,OH,OW).
double conv_flops(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (!x.defined() || !w.defined() || !y.defined() || x.ndim() != 4 || w.ndim() != 4 ||
      y.ndim() != 4)
    return 0;
  return 2.0 * static_cast<double>(y.n()) * static_cast<double>(y.c()) *
         static_cast<double>(y.h()) * static_cast<double>(y.w()) * static_cast<double>(x.c()) *
         static_cast<double>(w.h()) * static_cast<double>(w.w());
}

/// 2 x N x K x C of a linear layer: x (N,C), w (K,C).
double linear_flops(const Tensor& x, const Tensor& w) {
  if (!x.defined() || !w.defined() || x.ndim() != 2 || w.ndim() != 2) return 0;
  return 2.0 * static_cast<double>(x.dim(0)) * static_cast<double>(w.dim(0)) *
         static_cast<double>(w.dim(1));
}

/// Bytes of the defined tensors among `ts` (an undefined one, e.g. an absent bias, is none).
double bytes_of(std::initializer_list<const Tensor*> ts) {
  double b = 0;
  for (const Tensor* t : ts)
    if (t && t->defined()) b += static_cast<double>(t->nbytes());
  return b;
}

/// The compute peak an op whose operands are of `t`'s data type is held against (roofline.h).
const char* precision_of(const Tensor& t) {
  if (!t.defined()) return "fp32";
  switch (t.dtype()) {
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::u8: return "int8";
    default: return "fp32";
  }
}

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}

  std::string name() const override { return in_->name(); }
  Device device() const override { return in_->device(); }
  bool supports(Op op, DType dtype, Layout layout) const override {
    return in_->supports(op, dtype, layout);
  }
  Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout) override {
    OpProfiler::Scope s(kAlloc);
    return in_->alloc(std::move(shape), dtype, layout);
  }
  void copy(const Tensor& src, Tensor& dst) override {
    // A dtype or layout change is the inner backend's reorder, timed with its bytes on its own
    // (as overhead); a copy onto itself moves nothing.
    const bool plain =
        src.dtype() == dst.dtype() && src.layout() == dst.layout() && src.data() != dst.data();
    timed(kCopy, 0, plain ? bytes_of({&src, &dst}) : 0.0, "fp32", [&] { in_->copy(src, dst); });
  }
  void zero(Tensor& dst) override {
    timed(kZero, 0, bytes_of({&dst}), "fp32", [&] { in_->zero(dst); });
  }
  void synchronize() override {
    OpProfiler::Scope s(kSync);
    in_->synchronize();
  }
  void* native_stream() const override { return in_->native_stream(); }
  int64_t device_memory_used_bytes() const override { return in_->device_memory_used_bytes(); }
  std::vector<std::pair<std::string, std::string>> environment() const override {
    return in_->environment();
  }
  Tensor alloc_host(std::vector<int64_t> shape, DType dtype, Layout layout) override {
    OpProfiler::Scope s(kAlloc);
    return in_->alloc_host(std::move(shape), dtype, layout);
  }
  void upload_input(const Tensor& src, Tensor& dst) override {
    timed(kUpload, 0, bytes_of({&src, &dst}), "fp32", [&] { in_->upload_input(src, dst); });
  }
  void release_input(const Tensor& dst) override { in_->release_input(dst); }
  void forget_input(const Tensor& dst) override { in_->forget_input(dst); }
  /// No graphs: a recorded graph would run its ops where no profiler can see them one by one.
  std::unique_ptr<Graph> capture(const std::function<void()>& fn) override { return nullptr; }
  void profiler_range(bool start) override { in_->profiler_range(start); }
  Layout preferred_weight_layout(Layout activation_layout) const override {
    return in_->preferred_weight_layout(activation_layout);
  }
  bool sgd_takes_bf16_grads() const override { return in_->sgd_takes_bf16_grads(); }

  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override {
    timed(kConvFwd, conv_flops(x, w, y), bytes_of({&x, &w, &y}), precision_of(x),
          [&] { in_->conv2d_fwd(p, x, w, y); });
  }
  void conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                           const Tensor& bias, const Tensor& z, bool relu, Tensor& y) override {
    timed(kConvBiasAct, conv_flops(x, w, y), bytes_of({&x, &w, &bias, &z, &y}), precision_of(x),
          [&] { in_->conv2d_bias_act_fwd(p, x, w, bias, z, relu, y); });
  }
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override {
    timed(kConvBwdData, conv_flops(dx, w, dy), bytes_of({&dy, &w, &dx}), precision_of(dy),
          [&] { in_->conv2d_bwd_data(p, dy, w, dx); });
  }
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override {
    timed(kConvBwdWeights, conv_flops(x, dw, dy), bytes_of({&x, &dy, &dw}), precision_of(x),
          [&] { in_->conv2d_bwd_weights(p, x, dy, dw); });
  }

  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           Tensor& y, Tensor& save_mean, Tensor& save_var) override {
    timed(kBnFwdTrain, 0,
          bytes_of({&x, &gamma, &beta, &running_mean, &running_var, &running_mean, &running_var, &y,
                    &save_mean, &save_var}),
          "fp32", [&] {
            in_->batchnorm_fwd_train(p, x, gamma, beta, running_mean, running_var, y, save_mean,
                                     save_var);
          });
  }
  void batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                    const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                    Tensor& running_mean, Tensor& running_var, Tensor& y,
                                    Tensor& save_mean, Tensor& save_var) override {
    timed(kBnAddReluFwd, 0,
          bytes_of({&x, &residual, &gamma, &beta, &running_mean, &running_var, &running_mean,
                    &running_var, &y, &save_mean, &save_var}),
          "fp32", [&] {
            in_->batchnorm_add_relu_fwd_train(p, x, residual, gamma, beta, running_mean,
                                              running_var, y, save_mean, save_var);
          });
  }
  void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, Tensor& y) override {
    timed(kBnFwdInfer, 0, bytes_of({&x, &gamma, &beta, &running_mean, &running_var, &y}), "fp32",
          [&] { in_->batchnorm_fwd_infer(p, x, gamma, beta, running_mean, running_var, y); });
  }
  void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    timed(kBnBwd, 0, bytes_of({&x, &y, &dy, &gamma, &save_mean, &save_var, &dx, &dgamma, &dbeta}),
          "fp32",
          [&] { in_->batchnorm_bwd(p, x, y, dy, gamma, save_mean, save_var, dx, dgamma, dbeta); });
  }
  void batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                              const Tensor& g1, const Tensor& g2, const Tensor& gamma,
                              const Tensor& save_mean, const Tensor& save_var, Tensor& dres,
                              Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    timed(kBnAddReluBwd, 0,
          bytes_of({&x, &y, &g1, &g2, &gamma, &save_mean, &save_var, &dres, &dx, &dgamma, &dbeta}),
          "fp32", [&] {
            in_->batchnorm_add_relu_bwd(p, x, y, g1, g2, gamma, save_mean, save_var, dres, dx,
                                        dgamma, dbeta);
          });
  }

  void relu_fwd(const Tensor& x, Tensor& y) override {
    timed(kReluFwd, 0, bytes_of({&x, &y}), "fp32", [&] { in_->relu_fwd(x, y); });
  }
  void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    timed(kReluBwd, 0, bytes_of({&y, &dy, &dx}), "fp32", [&] { in_->relu_bwd(y, dy, dx); });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    timed(kAdd, 0, bytes_of({&a, &b, &y}), "fp32", [&] { in_->add(a, b, y); });
  }
  void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) override {
    timed(kAddReluFwd, 0, bytes_of({&a, &b, &y}), "fp32", [&] { in_->add_relu_fwd(a, b, y); });
  }
  void add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) override {
    timed(kAddReluBwd, 0, bytes_of({&y, &g1, &g2, &dx}), "fp32",
          [&] { in_->add_relu_bwd(y, g1, g2, dx); });
  }

  void maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) override {
    timed(kMaxpoolFwd, 0, bytes_of({&x, &y}), "fp32", [&] { in_->maxpool2d_fwd(p, x, y); });
  }
  void maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     Tensor& dx) override {
    timed(kMaxpoolBwd, 0, bytes_of({&x, &y, &dy, &dx}), "fp32",
          [&] { in_->maxpool2d_bwd(p, x, y, dy, dx); });
  }
  void global_avgpool_fwd(const Tensor& x, Tensor& y) override {
    timed(kAvgpoolFwd, 0, bytes_of({&x, &y}), "fp32", [&] { in_->global_avgpool_fwd(x, y); });
  }
  void global_avgpool_bwd(const Tensor& dy, Tensor& dx) override {
    timed(kAvgpoolBwd, 0, bytes_of({&dy, &dx}), "fp32", [&] { in_->global_avgpool_bwd(dy, dx); });
  }

  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    timed(kLinearFwd, linear_flops(x, w), bytes_of({&x, &w, &b, &y}), precision_of(x),
          [&] { in_->linear_fwd(x, w, b, y); });
  }
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                  Tensor& db) override {
    const double f = linear_flops(x, w) * (dx.defined() ? 2 : 1);
    timed(kLinearBwd, f, bytes_of({&x, &w, &dy, &dx, &dw, &db}), precision_of(x),
          [&] { in_->linear_bwd(x, w, dy, dx, dw, db); });
  }

  void softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing,
                        Tensor& loss, Tensor& probs) override {
    timed(kXentFwd, 0, bytes_of({&logits, &labels, &loss, &probs}), "fp32",
          [&] { in_->softmax_xent_fwd(logits, labels, smoothing, loss, probs); });
  }
  void softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing, float scale,
                        Tensor& dlogits, const Tensor& state) override {
    timed(kXentBwd, 0, bytes_of({&probs, &labels, &dlogits}), "fp32",
          [&] { in_->softmax_xent_bwd(probs, labels, smoothing, scale, dlogits, state); });
  }
  void softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, const Tensor& state, Tensor& loss,
                              Tensor& probs) override {
    timed(kXentFwd, 0, bytes_of({&logits, &labels, &labels_b, &loss, &probs}), "fp32", [&] {
      in_->softmax_xent_mixup_fwd(logits, labels, labels_b, smoothing, state, loss, probs);
    });
  }
  void softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels, const Tensor& labels_b,
                              float smoothing, float scale, Tensor& dlogits,
                              const Tensor& state) override {
    timed(kXentBwd, 0, bytes_of({&probs, &labels, &labels_b, &dlogits}), "fp32", [&] {
      in_->softmax_xent_mixup_bwd(probs, labels, labels_b, smoothing, scale, dlogits, state);
    });
  }
  void topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) override {
    timed(kTopk, 0, bytes_of({&logits, &labels, &hits}), "fp32",
          [&] { in_->topk_hits(logits, labels, hits); });
  }
  void normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                    const std::array<float, 3>& std, Tensor& dst) override {
    timed(kNormalize, 0, bytes_of({&src, &dst}), "fp32",
          [&] { in_->normalize_u8(src, mean, std, dst); });
  }
  void mixup_images(Tensor& x, const Tensor& state) override {
    timed(kMixup, 0, bytes_of({&x, &x}), "fp32", [&] { in_->mixup_images(x, state); });
  }
  void fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) override {
    timed(kFqAct, 0, bytes_of({&x, &y}), "fp32",
          [&] { in_->fake_quant_act(x, qstate, update, y); });
  }
  void fake_quant_weight(const Tensor& w, Tensor& y) override {
    timed(kFqWeight, 0, bytes_of({&w, &y}), "fp32", [&] { in_->fake_quant_weight(w, y); });
  }
  void sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                  Tensor& momentum_buf) override {
    timed(kSgd, 0, bytes_of({&params, &params, &grads, &momentum_buf, &momentum_buf}), "fp32",
          [&] { in_->sgd_update(p, params, grads, momentum_buf); });
  }
  void check_finite(const Tensor& x, Tensor& state) override {
    timed(kCheckFinite, 0, bytes_of({&x}), "fp32", [&] { in_->check_finite(x, state); });
  }
  void update_loss_scale(const LossScaleParams& p, Tensor& state) override {
    timed(kLossScale, 0, 0, "fp32", [&] { in_->update_loss_scale(p, state); });
  }
  void load_step_inputs(const Tensor& ring, Tensor& state) override {
    timed(kStepInputs, 0, 0, "fp32", [&] { in_->load_step_inputs(ring, state); });
  }

 private:
  /// Runs fn() as `op` (its FLOPs, bytes and compute precision as OpProfiler::Scope takes
  /// them) and waits for the backend, so that the op's time is its own.
  template <class F>
  void timed(const ProfileOp& op, double flops, double bytes, const char* precision, F&& fn) {
    if (!OpProfiler::current()) {
      fn();
      return;
    }
    OpProfiler::Scope s(op, flops, bytes, precision);
    fn();
    in_->synchronize();
  }

  std::unique_ptr<Backend> in_;
};

}  // namespace

std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> inner) {
  return std::make_unique<ProfilingBackend>(std::move(inner));
}

}  // namespace rn50
