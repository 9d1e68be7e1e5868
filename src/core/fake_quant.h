// rn50: fake quantization for quantization-aware training (--qat): the arithmetic every backend
// implements, in one place (the CUDA kernels in src/backend/cuda/fake_quant.cu repeat it in
// device code, operation for operation).
//
// 8 bits, symmetric, codes -127..127 (Paddle's fake quantizers with bit_length 8: bin_cnt 127;
// NVIDIA pytorch-quantization's narrow range), no zero point:
//   step  s = amax / 127                                  (f32 division)
//   y     = clamp(nearbyint(x * (1 / s)), -127, 127) * s  (f32; round half to even)
// which is torch.fake_quantize_per_tensor_affine(x, s, 0, -127, 127) and
// torch.fake_quantize_per_channel_affine(w, s_k, 0, 0, -127, 127) bit for bit (torch computes
// inv_scale = 1.0f / scale and std::nearbyint(x * inv_scale) in
// aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp). amax <= 0 (an all-zero
// weight channel): y = 0.
//
// Weights: per output channel k (dim 0), amax_k = max |W[k, ...]|, every step from the master
// weights. Activations: per tensor, amax from DLE's (Paddle's) moving-average abs-max
// (paddle/fluid/operators/fake_quantize_op.h, FindMovingAverageAbsMaxFunctor, moving_rate 0.9),
// updated from the batch before quantizing it in a training forward:
//   state = 0.9 state + 1;  accum = 0.9 accum + max|x|;  amax = accum / state
// with state = accum = 1 (so amax = 1) before the first batch. After batch maxima 2, 4, 1:
// amax = 1.526316, 2.439114, 2.020646. A batch whose max |x| is not finite (an fp16 overflow
// in a step AMP will skip) leaves the state unchanged.
//
// Backward: the straight-through estimator in Paddle's unclipped form (d x = d y everywhere,
// fake_quantize_dequantize ops' grad kernels), as DLE's QAT recipe runs on Paddle: it needs
// nothing saved from the forward and no mask pass.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace rn50::fake_quant {

inline constexpr float kMaxCode = 127.f;    ///< largest code magnitude (8 bits, symmetric)
inline constexpr float kMovingRate = 0.9f;  ///< Paddle's moving_rate
/// Elements of an activation quantizer's state tensor (f32, on the backend device):
enum StateIndex : int {
  amax = 0,     ///< the current range: x is quantized with step amax / 127
  state = 1,    ///< moving-average denominator (starts at 1)
  accum = 2,    ///< moving-average numerator (starts at 1)
  scratch = 3,  ///< working space of the backends (the batch's max |x|); not part of the state
  state_size = 4
};

/// The quantization step of a range: amax / 127 (F = float: the definition; F = double: the
/// reference backend's f64 tensors, for float64 golden comparisons).
template <class F>
inline F step_of(F amax) {
  return amax / F(kMaxCode);
}

/// y for one value with step s and inv = 1 / s (s > 0).
template <class F>
inline F quantize_dequantize(F x, F s, F inv) {
  const F q = std::nearbyint(x * inv);
  return std::min(F(kMaxCode), std::max(-F(kMaxCode), q)) * s;
}

/// The fake quantizer of one range (one tensor, or one weight channel): y = quantize_dequantize
/// with amax's step, and 0 when amax <= 0. F = float (the definition) or double (the reference
/// backend's f64 tensors).
template <class F = float>
struct Grid {
  explicit Grid(float amax) : on(amax > 0), s(step_of<F>(amax)), inv(F(1) / s) {}
  F operator()(F x) const { return on ? quantize_dequantize(x, s, inv) : F(0); }
  bool on;
  F s, inv;
};

/// max |w[i]| over n values: a weight channel's range.
inline float absmax_of(const float* w, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

/// One moving-average update with a batch's max |x| (see above); a non-finite batch_absmax
/// changes nothing.
inline void moving_average_update(float* st, float batch_absmax) {
  if (!std::isfinite(batch_absmax)) return;
  // Products rounded on their own (volatile: no fused multiply-add), as the CUDA kernel's
  // __fmul_rn/__fadd_rn and numpy's float32 arithmetic, so every implementation agrees bit
  // for bit.
  volatile float ps = kMovingRate * st[state], pa = kMovingRate * st[accum];
  const float s = ps + 1.f;
  const float a = pa + batch_absmax;
  st[state] = s;
  st[accum] = a;
  st[amax] = a / s;
}

}  // namespace rn50::fake_quant
