// rn50: bfloat16 <-> float32 conversion on the host (the upper 16 bits of an IEEE float32;
// Google Brain's format, as torch.bfloat16 and oneDNN's bf16). float -> bf16 rounds to nearest,
// ties to even, as torch's and oneDNN's conversions do; a NaN stays a (quiet) NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace rn50 {

/// Exact: bf16 bits b -> the float32 with the same upper 16 bits.
inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

/// float32 -> bf16 bits, round to nearest even; NaN -> quiet NaN (sign and payload top kept).
inline uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

/// Element access for host loops templated on float or bf16 bits (uint16_t): widen() reads a
/// value as float (exact), narrow() stores a float result (rounded once for bf16).
inline float widen(float v) { return v; }
inline float widen(uint16_t b) { return bf16_to_float(b); }
inline void narrow(float& dst, float v) { dst = v; }
inline void narrow(uint16_t& dst, float v) { dst = float_to_bf16(v); }

}  // namespace rn50
