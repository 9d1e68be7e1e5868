// rn50 reference backend ("ref"): naive, obviously-correct host loops with float64 accumulation.
// It is the oracle of the op tests (tests/test_ops_*.cpp, tests/op_backend_fixture.h) and of the
// model parity tests.
//
//  * Device: cpu. All tensors must be host tensors.
//  * Compute dtypes: f32, f64, f16 and bf16 for every floating operand (operands may mix, e.g.
//    f64 activations with f32 BN parameters); labels i32; normalize_u8 source u8. Anything else
//    throws rn50::Error naming the op and the tensor. copy() additionally converts between
//    f32, f64, f16 and bf16 (round-to-nearest-even) and copies any dtype to the same dtype.
//  * 4-D operands may be NCHW or NHWC, independently of each other (Tensor::offset4).
//  * Each op loads its operands into float64 buffers, computes in float64 and rounds each output
//    element once. Loops are parallelised with OpenMP over independent outputs only, so results
//    are deterministic and independent of the thread count.
//  * Outputs may alias inputs (operands are fully loaded before any output is written).
// The member functions are defined one op family per file: conv.cpp, batchnorm.cpp,
// eltwise.cpp, pool.cpp, linear.cpp, loss.cpp, input.cpp, sgd.cpp; ref_backend.cpp holds the
// memory functions and supports().
#pragma once

#include "rn50/backend.h"

namespace rn50::ref {

class RefBackend final : public Backend {
 public:
  std::string name() const override { return "ref"; }
  Device device() const override { return Device{}; }
  /// True for every op with dtype f32 or f64, in either layout (for normalize_u8 the dtype is
  /// the destination's).
  bool supports(Op op, DType dtype, Layout layout) const override;

  Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void zero(Tensor& dst) override;
  void synchronize() override {}

  void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) override;
  void conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                           const Tensor& bias, const Tensor& z, bool relu, Tensor& y) override;
  void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                       Tensor& dx) override;
  void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                          Tensor& dw) override;

  void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                           Tensor& save_mean, Tensor& save_var) override;
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
  void check_finite(const Tensor& x, Tensor& state) override;
  void update_loss_scale(const LossScaleParams& p, Tensor& state) override;
};

}  // namespace rn50::ref
