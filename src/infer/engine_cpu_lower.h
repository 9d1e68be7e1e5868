// rn50 inference: the CPU engine's lowering passes before its steps are emitted
// (engine_cpu.cpp), for one input shape:
//   1. values (lower_values): the data type and INT8 scale of every value of the program and the
//      conversions between them (quantize before an INT8 conv, dequantize before the average
//      pool, f32 <-> bf16 for an INT8 engine's float ops), as nodes: one primitive each;
//   2. buffers (assign_buffers): activation buffers by liveness, a residual join writing over its
//      shortcut's buffer.
// Each convolution's implementation is chosen by src/backend/cpu/conv_infer_registry.h when its
// step is emitted; the activations' layout (NHWC or blocked) is the engine's, per value.
#pragma once

#include <array>
#include <cstdint>
#include <dnnl.hpp>
#include <vector>

#include "infer/engine_impl.h"

namespace rn50::cpu_engine {

/// Whether a value of type `d` holds 8-bit codes (u8 or s8) rather than floats.
inline bool is_int8(dnnl::memory::data_type d) {
  return d == dnnl::memory::data_type::u8 || d == dnnl::memory::data_type::s8;
}

/// One primitive to create: a program op, or a conversion between a value's stored data type
/// and the one an op reads (int8: quantize before the first INT8 conv, dequantize before the
/// average pool).
struct Node {
  int op = -1;  ///< index into the program's ops; -1 = a conversion (reorder) of `in` into `out`
  int in = 0, res = -1, out = 0;
};

/// The values of a program lowered for one input shape. Values are the program's (index 0 the
/// input image), then the conversions' copies appended by lower_values.
struct LoweredValues {
  std::vector<std::array<int64_t, 3>> shape;      ///< (C, H, W) per value (batch aside)
  std::vector<dnnl::memory::data_type> vdt;       ///< stored data type per value
  std::vector<float> scale;                       ///< INT8 values: real = code * scale; else 1
  std::vector<Node> nodes;                        ///< in execution order
  std::vector<int> last_read;                     ///< per value, the last node reading it (-1)
};

/// Pass 1 for an (h, w) input: an engine in `prec` (fp32, bf16 or int8) whose float
/// activations are `act` (f32, or bf16 for a bf16 engine). INT8: codes u8 where a value cannot
/// be negative, else s8, on the calibrated or QAT ranges (infer/quantize.h); a calibrated
/// model's float ops in bf16 where onednn::infer_int8_float_ops_bf16(). Throws rn50::Error
/// naming the op when the input is too small for it, and when QAT ranges miss a value stored
/// in 8 bits.
LoweredValues lower_values(const InferenceProgram& prog, EnginePrecision prec,
                           dnnl::memory::data_type act, int64_t h, int64_t w);

/// Pass 2: values to buffers for a batch of n.
struct BufferAssignment {
  std::vector<int> buf_of;    ///< per value, its buffer's index
  std::vector<size_t> bytes;  ///< per buffer, its size in bytes
};

/// Assigns buffers to `lv`'s values by liveness (a buffer is reused once the last node
/// reading its value has run); a conv that adds a shortcut writes over the shortcut's buffer
/// (the sum post-op accumulates into the destination). Throws rn50::Error naming the op when
/// a later op still reads that shortcut, or when it is stored in another element size.
BufferAssignment assign_buffers(const LoweredValues& lv, const InferenceProgram& prog,
                                int64_t n);

}  // namespace rn50::cpu_engine
