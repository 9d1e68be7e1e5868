// rn50 inference: the CPU engine's lowering passes (engine_cpu_lower.h).
#include "infer/engine_cpu_lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "backend/cpu/conv_algo.h"
#include "core/check.h"
#include "infer/quantize.h"

namespace rn50::cpu_engine {

using dt = dnnl::memory::data_type;

LoweredValues lower_values(const InferenceProgram& prog, EnginePrecision prec, dt act, int64_t h,
                           int64_t w) {
  const auto& ops = prog.ops;
  const bool int8 = prec == EnginePrecision::int8;
  const bool qat = int8 && prog.qat_ranges;  // QAT's grid (rn50/inference.h)
  // Values: the program's, then conversion copies appended by the lowering below.
  std::vector<std::array<int64_t, 3>> shape(prog.producer.size(), {0, 0, 0});
  std::vector<dt> vdt(shape.size(), act);
  std::vector<float> scale(shape.size(), 1.f);  // int8 values: real = q * scale
  std::vector<bool> nonneg(shape.size(), false);
  // The data type of the ops an INT8 engine keeps in floating point (the stem conv, its max
  // pool, the fc): bf16 where the CPU computes it natively and the ranges were calibrated
  // (onednn::infer_int8_float_ops_bf16), else f32.
  const dt flt =
      !int8 ? act : !qat && onednn::infer_int8_float_ops_bf16() ? dt::bf16 : dt::f32;
  shape[0] = {3, h, w};
  vdt[0] = flt;
  auto add_value = [&](int like, dt d, float sc) {
    shape.push_back(shape[static_cast<size_t>(like)]);
    vdt.push_back(d);
    scale.push_back(sc);
    nonneg.push_back(nonneg[static_cast<size_t>(like)]);
    return static_cast<int>(shape.size()) - 1;
  };
  // The range of a value the engine stores in 8 bits. QAT ranges exist only where training
  // had a quantizer: a value without one cannot be put on the trained grid.
  auto absmax_of = [&](size_t v, const std::string& op) {
    const float a = prog.value_absmax.at(v);
    RN50_CHECK(!qat || (a > 0 && std::isfinite(a)),
               "inference: the QAT ranges have none for the output of '{}' (value {}), which "
               "the INT8 engine stores in 8 bits",
               op, v);
    return a;
  };
  std::vector<std::string> writer(shape.size(), "the input");
  for (const InferOp& op : prog.ops) writer.at(static_cast<size_t>(op.output)) = op.name;
  std::vector<Node> nodes;
  std::map<std::pair<int, int>, int> copies;  // (value, data type) -> its converted copy
  auto as = [&](int v, dt want) {
    const dt have = vdt[static_cast<size_t>(v)];
    if (want == dt::s8 && is_int8(have)) return v;  // any int8 value feeds an INT8 conv
    if (want == have) return v;
    auto key = std::make_pair(v, static_cast<int>(want));
    auto it = copies.find(key);
    if (it != copies.end()) return it->second;
    dt d = want;
    float sc = scale[static_cast<size_t>(v)];
    if (want == dt::s8) {  // quantize: u8 when the value cannot be negative
      d = nonneg[static_cast<size_t>(v)] ? dt::u8 : dt::s8;
      sc = quant::activation_scale(
          absmax_of(static_cast<size_t>(v), writer.at(static_cast<size_t>(v))), d == dt::u8, qat);
    }
    int c;
    if (qat && d == dt::u8) {
      // QAT's grid stops at code 127: quantize into s8 (saturating at 127; the value is not
      // negative), then widen the codes to u8 for the convs.
      const int s8 = add_value(v, dt::s8, sc);
      nodes.push_back({-1, v, -1, s8});
      c = add_value(v, dt::u8, sc);
      nodes.push_back({-1, s8, -1, c});
    } else {
      c = add_value(v, d, d == dt::f32 || d == dt::bf16 ? 1.f : sc);
      nodes.push_back({-1, v, -1, c});
    }
    copies.emplace(key, c);
    return c;
  };
  auto out_size = [&](int64_t s, int k, int st, int pad) { return (s + 2 * pad - k) / st + 1; };
  for (size_t i = 0; i < ops.size(); ++i) {
    const InferOp& op = ops[i];
    const auto in_shape = shape[static_cast<size_t>(op.input)];
    std::array<int64_t, 3> o{};
    Node nd{static_cast<int>(i), op.input, -1, op.output};
    const auto out = static_cast<size_t>(op.output);
    bool stem_f32 = false;  // QAT's stem in f32 (below)
    switch (op.kind) {
      case InferOp::Kind::conv: {
        o = {op.conv.out_channels,
             out_size(in_shape[1], op.conv.kernel, op.conv.stride, op.conv.pad),
             out_size(in_shape[2], op.conv.kernel, op.conv.stride, op.conv.pad)};
        nonneg[out] = op.relu;
        // The stem conv reads the f32 image: INT8 only with QAT ranges (training quantized
        // the image with a learnt range; calibration keeps the stem in f32). Where oneDNN
        // would halve an s8-source conv's weights (quant::int8_sums_saturate), QAT's stem
        // runs in f32 on the image's and the weights' grid, then quantizes its output.
        stem_f32 = int8 && qat && op.input == 0 && op.relu && quant::int8_sums_saturate();
        if (stem_f32) {
          nd.in = as(as(op.input, dt::s8), dt::f32);
          vdt[out] = dt::u8;
          scale[out] = quant::activation_scale(absmax_of(out, op.name), true, true);
        } else if (int8 && (op.input != 0 || qat)) {
          nd.in = as(op.input, dt::s8);
          if (op.residual >= 0) nd.res = as(op.residual, dt::s8);
          vdt[out] = op.relu ? dt::u8 : dt::s8;
          scale[out] = quant::activation_scale(absmax_of(out, op.name), op.relu, qat);
        } else {
          nd.res = op.residual;
          vdt[out] = flt;
        }
        break;
      }
      case InferOp::Kind::maxpool:
        o = {in_shape[0], out_size(in_shape[1], op.pool.kernel, op.pool.stride, op.pool.pad),
             out_size(in_shape[2], op.pool.kernel, op.pool.stride, op.pool.pad)};
        // Max commutes with a positive scale: pool the stored values, keep their scale.
        vdt[out] = vdt[static_cast<size_t>(op.input)];
        scale[out] = scale[static_cast<size_t>(op.input)];
        nonneg[out] = nonneg[static_cast<size_t>(op.input)];
        break;
      case InferOp::Kind::global_avgpool:
        o = {in_shape[0], 1, 1};
        if (int8) nd.in = as(op.input, dt::f32);
        vdt[out] = int8 ? dt::f32 : act;
        nonneg[out] = nonneg[static_cast<size_t>(op.input)];
        break;
      case InferOp::Kind::fc:
        o = {prog.num_classes, 1, 1};
        // QAT: the fc's input on its trained grid (quantized, then dequantized for the f32 fc,
        // whose weights are fake-quantized per output channel below), as in training.
        if (qat) nd.in = as(as(op.input, dt::s8), dt::f32);
        // bf16 float ops: the pooled f32 features rounded once for a bf16 fc.
        if (int8 && flt == dt::bf16) nd.in = as(op.input, dt::bf16);
        vdt[out] = dt::f32;  // the logits
        break;
    }
    RN50_CHECK(o[1] >= 1 && o[2] >= 1,
               "inference: a {}x{} input is too small for {} (at '{}'); use a larger crop", h, w,
               prog.arch, op.name);
    shape[out] = o;
    if (stem_f32) {  // conv -> f32, quantized into s8 (codes stop at 127) -> u8
      nd.out = add_value(op.output, dt::f32, 1.f);
      nodes.push_back(nd);
      const int s8 = add_value(op.output, dt::s8, scale[out]);
      nodes.push_back({-1, nd.out, -1, s8});
      nodes.push_back({-1, s8, -1, op.output});
    } else {
      nodes.push_back(nd);
    }
  }
  // The last node reading each value.
  std::vector<int> last_read(shape.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    last_read[static_cast<size_t>(nodes[i].in)] = static_cast<int>(i);
    if (nodes[i].res >= 0) last_read[static_cast<size_t>(nodes[i].res)] = static_cast<int>(i);
  }
  return LoweredValues{std::move(shape), std::move(vdt), std::move(scale), std::move(nodes),
                       std::move(last_read)};
}

BufferAssignment assign_buffers(const LoweredValues& lv, const InferenceProgram& prog,
                                int64_t n) {
  const auto& shape = lv.shape;
  const auto& vdt = lv.vdt;
  const auto& nodes = lv.nodes;
  const auto& last_read = lv.last_read;
  const auto& ops = prog.ops;
  // Liveness assignment of buffers: value -> buffer index.
  std::vector<int> buf_of(shape.size(), -1);
  std::vector<size_t> buf_size;  // bytes
  std::vector<int> free_bufs;
  auto bytes = [&](size_t v) {
    const size_t e = static_cast<size_t>(n * shape[v][0] * shape[v][1] * shape[v][2]);
    return e * dnnl::memory::data_type_size(vdt[v]);
  };
  auto take = [&](size_t v) {
    int b;
    if (!free_bufs.empty()) {
      b = free_bufs.back();
      free_bufs.pop_back();
    } else {
      b = static_cast<int>(buf_size.size());
      buf_size.push_back(0);
    }
    buf_size[static_cast<size_t>(b)] = std::max(buf_size[static_cast<size_t>(b)], bytes(v));
    buf_of[v] = b;
  };
  take(0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& nd = nodes[i];
    const auto out = static_cast<size_t>(nd.out);
    const std::string& name = nd.op >= 0 ? ops[static_cast<size_t>(nd.op)].name : "convert";
    if (nd.res >= 0) {
      // The sum post-op accumulates into the destination: write over the shortcut's own
      // buffer, which this conv reads last in every ResNet block.
      RN50_CHECK(last_read[static_cast<size_t>(nd.res)] == static_cast<int>(i) && nd.res != nd.in,
                 "inference: '{}' adds a shortcut that a later op still reads; the CPU engine "
                 "needs the adding conv to be the shortcut's last reader",
                 name);
      RN50_CHECK(dnnl::memory::data_type_size(vdt[static_cast<size_t>(nd.res)]) ==
                     dnnl::memory::data_type_size(vdt[out]),
                 "inference: '{}' adds a shortcut stored in another element size", name);
      buf_of[out] = buf_of[static_cast<size_t>(nd.res)];
    } else {
      take(out);
    }
    for (int v : {nd.in, nd.res}) {
      if (v < 0 || v == nd.res || last_read[static_cast<size_t>(v)] != static_cast<int>(i))
        continue;
      free_bufs.push_back(buf_of[static_cast<size_t>(v)]);
    }
  }
  return BufferAssignment{std::move(buf_of), std::move(buf_size)};
}

}  // namespace rn50::cpu_engine
