// A test backend: the ref backend, except that it asks for KRSC conv weights with NHWC
// activations (Backend::preferred_weight_layout), as the CUDA backend does, so that the KRSC
// paths of the model, optimiser and checkpoints run on a machine without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rn50/backend.h"

namespace rn50 {

/// The ref backend, except that it asks for KRSC conv weights with NHWC activations (like CUDA).
class KrscRefBackend final : public Backend {
 public:
  KrscRefBackend() : b_(make_backend("ref")) {}
  std::string name() const override { return "ref-krsc"; }
  Device device() const override { return b_->device(); }
  bool supports(Op op, DType d, Layout l) const override { return b_->supports(op, d, l); }
  Layout preferred_weight_layout(Layout a) const override { return a; }
  Tensor alloc(std::vector<int64_t> s, DType d, Layout l) override { return b_->alloc(s, d, l); }
  void copy(const Tensor& s, Tensor& d) override {
    ++copies_;
    b_->copy(s, d);
  }
  void zero(Tensor& d) override { b_->zero(d); }
  void synchronize() override {}
  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override {
    ++krsc_convs_;
    EXPECT_EQ(w.layout(), x.layout()) << "conv weights must come in the preferred layout";
    b_->conv2d_fwd(p, x, w, y);
  }
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override {
    b_->conv2d_bwd_data(p, dy, w, dx);
  }
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override {
    EXPECT_EQ(dw.layout(), x.layout()) << "conv weight gradients must be in the preferred layout";
    b_->conv2d_bwd_weights(p, x, dy, dw);
  }
  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& g,
                           const Tensor& b, Tensor& rm, Tensor& rv, Tensor& y, Tensor& sm,
                           Tensor& sv) override {
    b_->batchnorm_fwd_train(p, x, g, b, rm, rv, y, sm, sv);
  }
  void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& g,
                           const Tensor& b, const Tensor& rm, const Tensor& rv,
                           Tensor& y) override {
    b_->batchnorm_fwd_infer(p, x, g, b, rm, rv, y);
  }
  void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& g, const Tensor& sm, const Tensor& sv, Tensor& dx, Tensor& dg,
                     Tensor& db) override {
    b_->batchnorm_bwd(p, x, y, dy, g, sm, sv, dx, dg, db);
  }
  void relu_fwd(const Tensor& x, Tensor& y) override { b_->relu_fwd(x, y); }
  void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    b_->relu_bwd(y, dy, dx);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override { b_->add(a, b, y); }
  void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) override {
    b_->add_relu_fwd(a, b, y);
  }
  void add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) override {
    b_->add_relu_bwd(y, g1, g2, dx);
  }
  void maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) override {
    b_->maxpool2d_fwd(p, x, y);
  }
  void maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     Tensor& dx) override {
    b_->maxpool2d_bwd(p, x, y, dy, dx);
  }
  void global_avgpool_fwd(const Tensor& x, Tensor& y) override { b_->global_avgpool_fwd(x, y); }
  void global_avgpool_bwd(const Tensor& dy, Tensor& dx) override {
    b_->global_avgpool_bwd(dy, dx);
  }
  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    b_->linear_fwd(x, w, b, y);
  }
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                  Tensor& db) override {
    b_->linear_bwd(x, w, dy, dx, dw, db);
  }
  void softmax_xent_fwd(const Tensor& z, const Tensor& l, float e, Tensor& loss,
                        Tensor& p) override {
    b_->softmax_xent_fwd(z, l, e, loss, p);
  }
  void softmax_xent_bwd(const Tensor& p, const Tensor& l, float e, float s, Tensor& dz,
                        const Tensor& st) override {
    b_->softmax_xent_bwd(p, l, e, s, dz, st);
  }
  void softmax_xent_mixup_fwd(const Tensor& z, const Tensor& l, const Tensor& lb, float e,
                              const Tensor& st, Tensor& loss, Tensor& p) override {
    b_->softmax_xent_mixup_fwd(z, l, lb, e, st, loss, p);
  }
  void softmax_xent_mixup_bwd(const Tensor& p, const Tensor& l, const Tensor& lb, float e, float s,
                              Tensor& dz, const Tensor& st) override {
    b_->softmax_xent_mixup_bwd(p, l, lb, e, s, dz, st);
  }
  void mixup_images(Tensor& x, const Tensor& st) override { b_->mixup_images(x, st); }
  void fake_quant_act(const Tensor& x, Tensor& q, bool update, Tensor& y) override {
    b_->fake_quant_act(x, q, update, y);
  }
  void fake_quant_weight(const Tensor& w, Tensor& y) override { b_->fake_quant_weight(w, y); }
  void topk_hits(const Tensor& z, const Tensor& l, Tensor& h) override { b_->topk_hits(z, l, h); }
  void normalize_u8(const Tensor& s, const std::array<float, 3>& m,
                    const std::array<float, 3>& sd, Tensor& d) override {
    b_->normalize_u8(s, m, sd, d);
  }
  void sgd_update(const SgdParams& p, Tensor& w, const Tensor& g, Tensor& m) override {
    b_->sgd_update(p, w, g, m);
  }
  void check_finite(const Tensor& x, Tensor& st) override { b_->check_finite(x, st); }
  void update_loss_scale(const LossScaleParams& p, Tensor& st) override {
    b_->update_loss_scale(p, st);
  }
  void load_step_inputs(const Tensor& ring, Tensor& st) override { b_->load_step_inputs(ring, st); }
  int krsc_convs_ = 0;
  int copies_ = 0;  ///< copy() calls so far (upload_input, Backend's default, included)

 private:
  std::unique_ptr<Backend> b_;
};

}  // namespace rn50
