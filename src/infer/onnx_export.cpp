// rn50 inference: writes an InferenceModel as ONNX (opset 13) through the ONNX project's own
// protobuf classes and checker (Debian libonnx-dev). Built only when CMake found ONNX
// (RN50_HAVE_ONNX); otherwise save_onnx_model refuses with an error saying how to get it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fileio.h"
#include "infer/quantize.h"
#include "rn50/inference.h"

#ifdef RN50_HAVE_ONNX
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#endif

namespace rn50 {

bool onnx_export_available() {
#ifdef RN50_HAVE_ONNX
  return true;
#else
  return false;
#endif
}

#ifndef RN50_HAVE_ONNX

void save_onnx_model(const InferenceModel&, const std::string& path, bool) {
  RN50_FAIL(
      "'{}': this rn50 was built without ONNX support (CMake did not find libonnx-dev and "
      "libprotobuf-dev); run scripts/setup.sh and rebuild, or export with --format rn50",
      path);
}

#else

namespace {

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;

void add_ints(NodeProto* n, const char* name, std::initializer_list<int64_t> v) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void add_int(NodeProto* n, const char* name, int64_t v) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::INT);
  a->set_i(v);
}

NodeProto* add_node(onnx::GraphProto* g, const char* type, const std::string& name,
                    std::initializer_list<std::string> inputs, const std::string& output) {
  NodeProto* n = g->add_node();
  n->set_op_type(type);
  n->set_name(name);
  for (const std::string& in : inputs) n->add_input(in);
  n->add_output(output);
  return n;
}

/// An f32 initializer holding `t` (host f32, row-major) as little-endian raw_data.
void add_initializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  TensorProto* p = g->add_initializer();
  p->set_name(name);
  p->set_data_type(TensorProto::FLOAT);
  for (int64_t d : t.shape()) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(t.data()), t.nbytes()));
}

/// A scalar (dims {}) or 1-D initializer of `type` (FLOAT or INT8) from raw little-endian bytes.
void add_raw_initializer(onnx::GraphProto* g, const std::string& name, int type,
                         const std::vector<int64_t>& dims, const void* data, size_t bytes) {
  TensorProto* p = g->add_initializer();
  p->set_name(name);
  p->set_data_type(type);
  for (int64_t d : dims) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(data), bytes));
}

/// Which values the INT8 CPU engine stores in 8 bits (engine_cpu.cpp's lowering): those every
/// conv but the stem (a conv reading the network input) reads, adds or writes.
std::vector<bool> int8_values(const InferenceProgram& p) {
  std::vector<bool> q(p.producer.size(), false);
  for (const InferOp& op : p.ops) {
    // QAT ranges: the stem conv and the fc's input too (the engine runs them on the trained
    // grid); calibrated models keep the stem conv, the average pool and the fc in float.
    switch (op.kind) {
      case InferOp::Kind::conv:
        if (op.input == 0 && !p.qat_ranges) break;
        for (int v : {op.input, op.residual, op.output})
          if (v >= 0) q.at(static_cast<size_t>(v)) = true;
        break;
      case InferOp::Kind::fc:
        if (p.qat_ranges) q.at(static_cast<size_t>(op.input)) = true;
        break;
      case InferOp::Kind::maxpool:
      case InferOp::Kind::global_avgpool:
        break;  // nothing of their own: the convs reading or writing their values mark them
    }
  }
  return q;
}

/// Adds `name`'s weight (K, ...) as int8 codes with per-output-channel scales (the engine's:
/// quant::weight_scales, round half to even) and a DequantizeLinear (axis 0) writing `out`.
void add_int8_weight(onnx::GraphProto* g, const std::string& name, const Tensor& w,
                     const std::string& out) {
  const int64_t k = w.dim(0);
  const std::vector<float> ws = quant::weight_scales(w);
  const std::vector<int32_t> codes = quant::quantize(w, k, ws, false);
  const std::vector<int8_t> q8(codes.begin(), codes.end());
  const std::vector<int8_t> zero(static_cast<size_t>(k), 0);
  add_raw_initializer(g, name + ".weight_quantized", TensorProto::INT8, w.shape(), q8.data(),
                      q8.size());
  add_raw_initializer(g, name + ".weight_scale", TensorProto::FLOAT, {k}, ws.data(),
                      ws.size() * sizeof(float));
  add_raw_initializer(g, name + ".weight_zero_point", TensorProto::INT8, {k}, zero.data(),
                      zero.size());
  NodeProto* dq = add_node(g, "DequantizeLinear", name + ".weight_dequantize",
                           {name + ".weight_quantized", name + ".weight_scale",
                            name + ".weight_zero_point"},
                           out);
  add_int(dq, "axis", 0);
}

void set_float_tensor_type(onnx::ValueInfoProto* v, const std::string& name,
                           const std::vector<std::string>& dims_or_params) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  for (const std::string& d : dims_or_params) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0])))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

void add_metadata(onnx::ModelProto* m, const std::string& key, const std::string& value) {
  auto* kv = m->add_metadata_props();
  kv->set_key(key);
  kv->set_value(value);
}

std::string join_floats(const std::vector<float>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? "," : "", v[i]);
  return s;
}

}  // namespace

void save_onnx_model(const InferenceModel& model, const std::string& path, bool int8) {
  const InferenceProgram& p = model.program;
  RN50_CHECK(!p.ops.empty() && p.ops.back().kind == InferOp::Kind::fc,
             "'{}': the program to export is empty or does not end in the fc", path);
  RN50_CHECK(!int8 || p.value_absmax.size() == p.producer.size(),
             "'{}': an int8 (QDQ) ONNX needs the model's activation ranges (rn50 export "
             "--precision int8)",
             path);
  const std::vector<bool> quantized = int8 ? int8_values(p) : std::vector<bool>();
  onnx::ModelProto m;
  m.set_ir_version(7);  // the IR version that introduced opset 13 (ONNX 1.8)
  m.set_producer_name("rn50");
  m.set_model_version(1);
  m.set_doc_string(fmt::format(
      "{} with BatchNorm folded into the convolutions; input: NCHW float32 normalised with the "
      "mean/std in metadata_props after resize_short + center crop_size",
      p.arch));
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  add_metadata(&m, "arch", p.arch);
  add_metadata(&m, "num_classes", std::to_string(p.num_classes));
  add_metadata(&m, "classes", nlohmann::json(model.info.classes).dump());
  add_metadata(&m, "mean", join_floats(model.info.mean));
  add_metadata(&m, "std", join_floats(model.info.std));
  add_metadata(&m, "resize_short", std::to_string(model.info.resize_short));
  add_metadata(&m, "crop_size", std::to_string(model.info.crop_size));
  add_metadata(&m, "precision", int8 ? "int8" : "fp32");
  if (int8) {
    add_metadata(&m, "int8",
                 "QDQ, as rn50's INT8 CPU engine: every conv but the stem reads its input and "
                 "weight through DequantizeLinear (activations per tensor, int8, zero point 0, "
                 "scale absmax/127; weights int8 per output channel, axis 0, scale "
                 "max|W_k|/127; bias float); each value those convs read or write is "
                 "quantized once where it is computed; the stem conv, the average pool and "
                 "the fc are float (with QAT ranges: the stem conv, the input and the fc's "
                 "input and weights too, as the engine)");
    add_metadata(&m, "calibration",
                 p.qat_ranges ? std::string("qat") : model.info.calibration.method);
  }

  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(p.arch);
  const std::string crop = std::to_string(model.info.crop_size);
  set_float_tensor_type(g->add_input(), "input", {"batch", "3", crop, crop});
  set_float_tensor_type(g->add_output(), "logits", {"batch", std::to_string(p.num_classes)});

  // Value index -> the ONNX name of the tensor holding it.
  std::vector<std::string> value(p.producer.size());
  // Quantizes tensor `t` (value v) once where it is computed; every reader takes the
  // dequantized tensor, whose name is returned.
  auto qdq = [&](const std::string& t, int v) {
    const float scale = quant::activation_scale(p.value_absmax.at(static_cast<size_t>(v)), false);
    const int8_t zero = 0;
    add_raw_initializer(g, t + ".scale", TensorProto::FLOAT, {}, &scale, sizeof scale);
    add_raw_initializer(g, t + ".zero_point", TensorProto::INT8, {}, &zero, 1);
    add_node(g, "QuantizeLinear", t + ".quantize", {t, t + ".scale", t + ".zero_point"},
             t + ".quantized");
    add_node(g, "DequantizeLinear", t + ".dequantize",
             {t + ".quantized", t + ".scale", t + ".zero_point"}, t + ".dequantized");
    return t + ".dequantized";
  };
  value.at(0) = int8 && quantized.at(0) ? qdq("input", 0) : "input";
  for (const InferOp& op : p.ops) {
    const std::string& in = value.at(static_cast<size_t>(op.input));
    RN50_CHECK(!in.empty(), "'{}': op '{}' reads a value no earlier op writes", path, op.name);
    std::string out;
    switch (op.kind) {
      case InferOp::Kind::conv: {
        const ConvSpec& c = op.conv;
        if (int8 && (op.input != 0 || p.qat_ranges)) {
          // int8 codes and per-output-channel scales of the folded weight, as the engine's.
          add_int8_weight(g, op.name, op.weight, op.name + ".weight");
        } else {
          add_initializer(g, op.name + ".weight", op.weight);
        }
        add_initializer(g, op.name + ".bias", op.bias);
        out = op.name;
        NodeProto* n =
            add_node(g, "Conv", op.name, {in, op.name + ".weight", op.name + ".bias"}, out);
        add_ints(n, "kernel_shape", {c.kernel, c.kernel});
        add_ints(n, "strides", {c.stride, c.stride});
        add_ints(n, "pads", {c.pad, c.pad, c.pad, c.pad});
        add_ints(n, "dilations", {1, 1});
        add_int(n, "group", 1);
        if (op.residual >= 0) {
          const std::string& res = value.at(static_cast<size_t>(op.residual));
          add_node(g, "Add", op.name + ".add", {out, res}, op.name + ".add");
          out = op.name + ".add";
        }
        if (op.relu) {
          add_node(g, "Relu", op.name + ".relu", {out}, op.name + ".relu");
          out = op.name + ".relu";
        }
        break;
      }
      case InferOp::Kind::maxpool: {
        out = op.name;
        NodeProto* n = add_node(g, "MaxPool", op.name, {in}, out);
        add_ints(n, "kernel_shape", {op.pool.kernel, op.pool.kernel});
        add_ints(n, "strides", {op.pool.stride, op.pool.stride});
        add_ints(n, "pads", {op.pool.pad, op.pool.pad, op.pool.pad, op.pool.pad});
        break;
      }
      case InferOp::Kind::global_avgpool:
        out = op.name;
        add_node(g, "GlobalAveragePool", op.name, {in}, out);
        break;
      case InferOp::Kind::fc: {
        if (int8 && p.qat_ranges)  // the fc's weights on their trained grid, as the engine's
          add_int8_weight(g, op.name, op.weight, op.name + ".weight");
        else
          add_initializer(g, op.name + ".weight", op.weight);
        add_initializer(g, op.name + ".bias", op.bias);
        NodeProto* f = add_node(g, "Flatten", op.name + ".flatten", {in}, op.name + ".flatten");
        add_int(f, "axis", 1);
        out = &op == &p.ops.back() ? "logits" : op.name;
        NodeProto* n =
            add_node(g, "Gemm", op.name,
                     {op.name + ".flatten", op.name + ".weight", op.name + ".bias"}, out);
        add_int(n, "transB", 1);
        break;
      }
    }
    if (int8 && quantized.at(static_cast<size_t>(op.output)))
      out = qdq(out, op.output);
    value.at(static_cast<size_t>(op.output)) = out;
  }
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    RN50_FAIL("'{}': the ONNX model rn50 built fails onnx.checker: {}", path, e.what());
  }
  std::string bytes;
  RN50_CHECK(m.SerializeToString(&bytes), "'{}': protobuf could not serialise the ONNX model",
             path);
  write_file_atomic(path, bytes);
}

#endif  // RN50_HAVE_ONNX

}  // namespace rn50
