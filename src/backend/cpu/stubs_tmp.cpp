// temporary stubs (being replaced op family by op family)
#include "backend/cpu/onednn_backend.h"
#include "core/check.h"
namespace rn50::onednn {
#define NI(n) RN50_FAIL("onednn " #n ": not implemented")
void OnednnBackend::conv2d_fwd(const Conv2dParams&, const Tensor&, const Tensor&, Tensor&) { NI(conv2d_fwd); }
void OnednnBackend::conv2d_bwd_data(const Conv2dParams&, const Tensor&, const Tensor&, Tensor&) { NI(conv2d_bwd_data); }
void OnednnBackend::conv2d_bwd_weights(const Conv2dParams&, const Tensor&, const Tensor&, Tensor&) { NI(conv2d_bwd_weights); }
void OnednnBackend::batchnorm_fwd_train(const BatchNormParams&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&, Tensor&) { NI(batchnorm_fwd_train); }
void OnednnBackend::batchnorm_fwd_infer(const BatchNormParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) { NI(batchnorm_fwd_infer); }
void OnednnBackend::batchnorm_bwd(const BatchNormParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) { NI(batchnorm_bwd); }
void OnednnBackend::relu_fwd(const Tensor&, Tensor&) { NI(relu_fwd); }
void OnednnBackend::relu_bwd(const Tensor&, const Tensor&, Tensor&) { NI(relu_bwd); }
void OnednnBackend::add(const Tensor&, const Tensor&, Tensor&) { NI(add); }
void OnednnBackend::add_relu_fwd(const Tensor&, const Tensor&, Tensor&) { NI(add_relu_fwd); }
void OnednnBackend::maxpool2d_fwd(const Pool2dParams&, const Tensor&, Tensor&) { NI(maxpool2d_fwd); }
void OnednnBackend::maxpool2d_bwd(const Pool2dParams&, const Tensor&, const Tensor&, const Tensor&, Tensor&) { NI(maxpool2d_bwd); }
void OnednnBackend::global_avgpool_fwd(const Tensor&, Tensor&) { NI(global_avgpool_fwd); }
void OnednnBackend::global_avgpool_bwd(const Tensor&, Tensor&) { NI(global_avgpool_bwd); }
void OnednnBackend::linear_fwd(const Tensor&, const Tensor&, const Tensor&, Tensor&) { NI(linear_fwd); }
void OnednnBackend::linear_bwd(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) { NI(linear_bwd); }
void OnednnBackend::softmax_xent_fwd(const Tensor&, const Tensor&, float, Tensor&, Tensor&) { NI(softmax_xent_fwd); }
void OnednnBackend::softmax_xent_bwd(const Tensor&, const Tensor&, float, float, Tensor&) { NI(softmax_xent_bwd); }
void OnednnBackend::normalize_u8(const Tensor&, const std::array<float, 3>&, const std::array<float, 3>&, Tensor&) { NI(normalize_u8); }
void OnednnBackend::sgd_update(const SgdParams&, Tensor&, const Tensor&, Tensor&) { NI(sgd_update); }
}  // namespace rn50::onednn
