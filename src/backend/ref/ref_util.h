// rn50 reference backend: element access, dtype conversion and argument checks shared by the
// naive reference ops. Every ref op loads its operands into float64 buffers in a canonical
// element order, computes in float64 and rounds once when storing the result.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "rn50/tensor.h"

namespace rn50::ref {

/// IEEE binary16 <-> float32, round-to-nearest-even (subnormals, inf and NaN handled).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
/// bfloat16 <-> float32, round-to-nearest-even (NaN kept quiet): core/bf16.h.
using rn50::bf16_to_float;
using rn50::float_to_bf16;

/// Whether a loop doing about `work` multiply-adds is worth an OpenMP parallel region (small
/// ops run serially: thread start-up dominates them, especially on a loaded machine).
inline bool parallel_worth(int64_t work) { return work >= (int64_t{1} << 16); }
inline bool parallel_worth(size_t work) { return parallel_worth(static_cast<int64_t>(work)); }

/// Whether the reference ops accept operands of this dtype: f32 and f64, and f16/bf16 (AMP
/// tensors: loaded exactly into float64, results rounded once to the operand's dtype).
inline bool is_compute_dtype(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

/// Element i (in memory order) of a host f32/f64/f16/bf16 tensor, as double.
inline double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data_as<const float>()[i];
    case DType::f64:
      return t.data_as<const double>()[i];
    case DType::f16:
      return half_to_float(t.data_as<const uint16_t>()[i]);
    case DType::bf16:
      return bf16_to_float(t.data_as<const uint16_t>()[i]);
    default:
      RN50_FAIL("ref: cannot read {} as a floating-point value", t.str());
  }
}

/// Stores v (rounded to the tensor's dtype) at element i (memory order).
inline void set(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::f32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case DType::f64:
      t.data_as<double>()[i] = v;
      break;
    case DType::f16:
      t.data_as<uint16_t>()[i] = float_to_half(static_cast<float>(v));
      break;
    case DType::bf16:
      t.data_as<uint16_t>()[i] = float_to_bf16(static_cast<float>(v));
      break;
    default:
      RN50_FAIL("ref: cannot write a floating-point value into {}", t.str());
  }
}

/// Throws unless t is defined, on the host and of dtype f32 or f64. `op` and `name` (e.g.
/// "conv2d_fwd", "x") appear in the message together with t.str().
void check_float(const char* op, const char* name, const Tensor& t);
/// Throws unless t (checked with check_float) has ndim 4.
void check_float4(const char* op, const char* name, const Tensor& t);
/// Throws unless t has exactly `shape`.
void check_shape(const char* op, const char* name, const Tensor& t,
                 const std::vector<int64_t>& shape);
/// "[2,3,4]" for messages.
std::string shape_str(const std::vector<int64_t>& shape);

/// All elements of t as double in LOGICAL order: (N,C,H,W) row-major for 4-D tensors whatever
/// their layout when order == NCHW, (N,H,W,C) when order == NHWC; row-major for other ranks.
std::vector<double> load(const Tensor& t, Layout order = Layout::NCHW);
/// Inverse of load(): writes v (in `order`, see load) into t, rounding to t's dtype.
void store(const std::vector<double>& v, Tensor& t, Layout order = Layout::NCHW);

}  // namespace rn50::ref
