// rn50 inference: the INT8 quantization rules of the CPU engine, in one place (the engine and
// the tests use these; the formulas follow oneDNN's INT8 inference example,
// cnn_inference_int8.cpp, with symmetric ranges and no zero points):
//   weights      per output channel k: scale_k = max |W[k, ...]| / 127, q = W * (1 / scale_k);
//                / 63 (7-bit codes) for calibrated ranges on CPUs whose INT8 sums saturate
//                (int8_sums_saturate: no VNNI), so that no u8 x s8 pair sum overflows 16 bits
//   activations  per tensor: scale = absmax / 255 (u8: values after a ReLU) or absmax / 127 (s8);
//                ranges learnt by QAT (InferenceProgram::qat_ranges): absmax / 127 for both, the
//                fake-quant grid of src/core/fake_quant.h (codes clamped to [-127, 127])
//   quantize     q = saturate(round_half_even(x * (1 / scale)))     (oneDNN reorder semantics)
//   dequantize   x = q * scale
#pragma once

#include <cstdint>
#include <dnnl.hpp>
#include <vector>

#include "rn50/tensor.h"

namespace rn50::quant {

/// Per-output-channel scales of a host f32 weight (K, ...): max |W_k| / code_max; 1 for a
/// channel that is all zero (its codes are all 0 either way).
std::vector<float> weight_scales(const Tensor& w, float code_max = 127.f);

/// Whether oneDNN's INT8 convolutions on this CPU add u8 x s8 products pairwise in saturating
/// 16-bit sums (vpmaddubsw: CPUs without VNNI, e.g. AVX2-only ones), where 255 x 127 x 2 =
/// 64770 overflows (oneDNN's "Int8 Computation Aspects": scale data or weights to 7 bits).
/// Probed once: oneDNN then asks an s8-source convolution's weights for a scale adjustment
/// (it halves them itself there; u8 sources it leaves to the user).
bool int8_sums_saturate();

/// The largest weight code the CPU engine uses: 127, or 63 where int8_sums_saturate() and the
/// ranges are calibrated (2 x 255 x 63 = 32130 fits); QAT's grid (`qat_grid`) keeps 127 (its
/// activation codes stop at 127: 2 x 127 x 127 = 32258 fits).
float weight_code_max(bool qat_grid);

/// Per-tensor scale of an activation whose range is `absmax`: absmax / 255 when `is_unsigned`
/// (u8) and the range is calibrated, else absmax / 127 (s8, or any range learnt by QAT:
/// `qat_grid`); a non-positive or non-finite absmax counts as 1.
float activation_scale(float absmax, bool is_unsigned, bool qat_grid = false);

/// The oneDNN attribute that quantizes with `scales` (dst = src * (1 / scale)): mask 0 = one
/// scale for the tensor, 1 << d = one per index of dimension d.
dnnl::primitive_attr quantize_attr(const std::vector<float>& scales, int mask);

/// Quantizes host f32 `x` viewed as (rows, x.numel() / rows) with a oneDNN reorder and
/// quantize_attr: one scale per row when scales.size() == rows, else scales[0] for all.
/// Returns the codes as int32 (from u8 when `to_unsigned`, else s8). For the tests and tools.
std::vector<int32_t> quantize(const Tensor& x, int64_t rows, const std::vector<float>& scales,
                              bool to_unsigned);

}  // namespace rn50::quant
