// rn50: ResNet::init — torchvision's initialisation (torchvision/models/resnet.py,
// ResNet.__init__):
//   Conv2d:      kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, sqrt(2 / fan_out)),
//                fan_out = K * R * S.
//   BatchNorm2d: weight 1, bias 0; with zero_init_residual the last BN of each residual branch
//                (bn3 of a Bottleneck, bn2 of a BasicBlock) gets weight 0.
//   Linear (fc): nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) for the weight, i.e.
//                U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias U(-1/sqrt(fan_in), ..) too.
// Running statistics: mean 0, var 1, num_batches_tracked 0.
// Random numbers: std::mt19937_64(seed), 53-bit uniforms, Box-Muller normals; parameters are
// drawn in torchvision state_dict order, so the result depends only on seed and architecture.
#include <cmath>
#include <cstring>
#include <random>

#include "core/check.h"
#include "model/resnet_impl.h"

namespace rn50 {

namespace {

/// Deterministic uniform/normal source (no dependence on the standard library's distribution
/// implementations, which differ between vendors).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  /// Uniform in (0, 1].
  double uniform01() { return (static_cast<double>(gen_() >> 11) + 1.0) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * (uniform01() - 0x1.0p-53); }
  /// Standard normal by Box-Muller (both values of a pair are used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double r = std::sqrt(-2.0 * std::log(uniform01()));
    double t = 2.0 * M_PI * uniform01();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

void ResNet::init(uint64_t seed) {
  Impl& m = *impl_;
  Rng rng(seed);
  Tensor host = Tensor::empty({m.desc.num_params}, DType::f32);
  float* slab = host.data_as<float>();

  // Last BN of each residual branch, for zero_init_residual.
  std::vector<bool> last_bn(m.desc.params.size(), false);
  for (const Layer& l : m.desc.layers)
    if (l.residual_last_bn) last_bn[static_cast<size_t>(l.params[0])] = true;

  for (size_t i = 0; i < m.desc.params.size(); ++i) {
    const ParamInfo& p = m.desc.params[i];
    float* dst = slab + p.offset;
    const int64_t n = p.numel();
    switch (p.kind) {
      case ParamKind::conv_weight: {
        const double fan_out = static_cast<double>(p.shape[0] * p.shape[2] * p.shape[3]);
        const double std = std::sqrt(2.0 / fan_out);
        for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(std * rng.normal());
        break;
      }
      case ParamKind::bn_weight: {
        const float v = m.opt.zero_init_residual && last_bn[i] ? 0.f : 1.f;
        for (int64_t j = 0; j < n; ++j) dst[j] = v;
        break;
      }
      case ParamKind::bn_bias:
        std::memset(dst, 0, n * sizeof(float));
        break;
      case ParamKind::fc_weight:
      case ParamKind::fc_bias: {
        // fan_in of the Linear layer (fc.weight is (K, C)).
        const double bound = 1.0 / std::sqrt(static_cast<double>(m.desc.feature_channels));
        for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(rng.uniform(-bound, bound));
        break;
      }
    }
  }
  if (m.weight_layout == Layout::NCHW && !m.pure) {
    m.be.copy(host, m.param_slab);
  } else {
    // Conv weights move into the slab's KRSC layout one by one, and under pure fp16 conv/fc
    // parameters into their f16 slab (Backend::copy converts, rounding to nearest even).
    for (size_t i = 0; i < m.desc.params.size(); ++i) {
      const ParamInfo& p = m.desc.params[i];
      Tensor dst = m.param_view(static_cast<int>(i));
      m.be.copy(Tensor::view(slab + p.offset, p.shape, DType::f32), dst);
    }
  }
  m.be.zero(m.grad_slab);
  impl_->reset_qat_state();  // QAT: fresh ranges
  refresh_compute_params();

  Tensor stats = Tensor::zeros(m.stat_slab.shape(), DType::f32);
  for (const model_detail::BnState& bn : m.bns)
    for (int64_t c = 0; c < bn.channels; ++c)
      stats.data_as<float>()[bn.stat_offset + bn.channels + c] = 1.f;
  m.be.copy(stats, m.stat_slab);
  m.nbt.fill(0);
  m.have_train_state = false;
}

}  // namespace rn50
