// rn50 inference: the CPU engine (oneDNN, NHWC or blocked nChw16c/8c; fp32; bf16 activations and
// weights with f32 bias, accumulation and logits; or int8 convolutions as in rn50/inference.h).
// Per input shape a Plan holds one oneDNN primitive per program op (forward_inference), the
// activation buffers and the weights packed in the layout each convolution chose
// (format_tag::any), built once:
//   conv            convolution_forward with bias; post-ops: the shortcut's add (the
//                   destination is the residual's own buffer: the adding conv is the shortcut's
//                   last reader), as a sum post-op or, where oneDNN's sum is slow, a binary add
//                   reading that buffer (infer/conv_epilogue.h), then eltwise_relu
//   maxpool         pooling_forward, pooling_max
//   global avgpool  pooling_forward, pooling_avg_exclude_padding over the whole plane
//   fc              inner_product_forward with bias
//   int8            the same convs with u8/s8 src and dst, s8 weights (per-channel scales),
//                   output scales and a sum post-op whose scale and data type are the shortcut's;
//                   reorders quantize the stem's output and dequantize the last block's. A
//                   calibrated model's float ops (stem, max pool, fc) run in bf16 where the CPU
//                   has native bf16 (onednn::infer_int8_float_ops_bf16), else in f32.
//                   QAT ranges: every activation scale absmax / 127, the ReLU replaced by
//                   eltwise_clip [0, 127] (codes; [-127, 127] without ReLU) and f32 -> u8 done
//                   as f32 -> s8 -> u8, so codes stop at 127 as in fake_quant.h
// Activation buffers are assigned by liveness (a buffer is reused once the last op reading its
// value has run), so ResNet-50 needs a handful of buffers, not one per layer.
// Convolutions: each runs the first implementation of the engine's list that builds
// (src/backend/cpu/conv_infer_registry.h, which holds every condition, the rule table's and
// RN50_CONV_IMPL's; its name is in --profile rows and RN50_CONV_LOG):
//   onednn_winograd        oneDNN's Winograd F(4x4, 3x3), f32 3x3 stride-1 convs without a
//                          shortcut, in the primitive's blocked layout: on AVX-512 CPUs the
//                          blocked engine's own nChw16c; otherwise between two reorder steps
//                          ("reorder activations (winograd)") through two buffers all such
//                          convs share;
//   own_winograd_f43       where oneDNN has no Winograd (CPUs without AVX-512), ours on the
//                          blocked engine's nChw8c buffers (src/backend/cpu/winograd_f43.h),
//                          shortcut allowed, its products in our own panel GEMM;
//   own_winograd_f23_bf16  bf16 engines on CPUs with AVX-512 BF16 and no AMX (oneDNN 2.6 has
//                          no bf16 Winograd): ours on the NHWC buffers (winograd_f23_bf16.h);
//   onednn_direct          everything else, with the epilogue above.
// Our Winograds transform the weights once, shared by every batch size's plan, with bias,
// shortcut and ReLU fused into the output transform; they have a profile row of their own.
// No Winograd while calibrating int8 (the observer reads NHWC destinations) nor for a
// batch-invariant engine (EngineOptions::batch_invariant: rn50 serve).
// Activation layout (CpuActivationLayout, rn50/inference.h): NHWC, or for f32 by default the
// blocked nChw16c (AVX-512) or nChw8c (without), the input image then NCHW (the stem's kernel
// reads it) and every value whose channel count is a multiple of the block blocked; the
// pooled (N, C, 1, 1) features are then the same bytes as NHWC, so the fc reads them as (N, C)
// either way.
// Batch invariance: the direct convolutions, pooling and reorders compute each image alone
// (checked on AVX-512 and AVX2 CPUs), but oneDNN's inner product is a GEMM whose kernel follows
// the number of rows (on an AVX2-only EPYC, 1 row and 4 rows of the same image give other bits):
// a batch-invariant engine runs the fc as one 1-row primitive per image.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_infer_registry.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "backend/cpu/winograd_f43.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/fake_quant.h"
#include "infer/conv_epilogue.h"
#include "infer/engine_cpu_lower.h"
#include "infer/engine_impl.h"
#include "infer/quantize.h"
#include "rn50/profile.h"

namespace rn50 {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;
using dt = memory::data_type;

// The engine's ops in a profile (rn50/profile.h): each primitive of the plan, the input's load
// and the logits' copy out.
constexpr ProfileOp kLoadInput{"reorder input (f32 -> engine layout)", "reorder", "-"};
constexpr ProfileOp kConvOp{"conv fwd (bias, add, relu fused)", "conv", "fwd"};
constexpr ProfileOp kOwnWinoConvOp{"conv fwd, own winograd (bias, add, relu fused)", "conv",
                                   "fwd"};
constexpr ProfileOp kMaxpoolOp{"maxpool fwd", "pool", "fwd"};
constexpr ProfileOp kAvgpoolOp{"global avgpool fwd", "pool", "fwd"};
constexpr ProfileOp kFcOp{"linear fwd", "linear", "fwd"};
constexpr ProfileOp kConvertOp{"reorder (quantize / dequantize)", "reorder", "-"};
constexpr ProfileOp kWinoReorderOp{"reorder activations (winograd)", "reorder", "-"};
constexpr ProfileOp kLogitsOp{"copy logits", "copy", "-"};

/// The bytes a step's primitive reads and writes (every argument but the scratchpad, once)
/// and the compute precision of its source ("int8", "bf16", "fp32"); nullptr for a reorder,
/// overhead that the roofline asks no time for (rn50/profile.h).
struct Traffic {
  double bytes = 0;
  const char* precision = nullptr;
};

/// One primitive with its arguments, or an op of our own (`custom`, which then runs instead;
/// `args` still name its source, weights and destination for the observer and the traffic).
struct Step {
  dnnl::primitive prim;
  std::function<void()> custom;
  std::unordered_map<int, memory> args;
  int value = 0;  ///< the value the step writes (for the calibration observer)
  const ProfileOp* op = &kConvertOp;  ///< what it is in a profile
  /// A convolution's implementation (conv_infer_registry.h's name), named in profile rows.
  const char* impl = nullptr;
  double flops = 0;                   ///< 2 x its multiply-adds (conv, fc)
  Traffic traffic;                    ///< set when the plan is built (traffic_of)
};

using cpu_engine::is_int8;
using cpu_engine::Node;

/// A step's traffic, computed once per plan so that the profiled loop adds no host time
/// between its ops.
Traffic traffic_of(const Step& s) {
  Traffic t;
  for (const auto& [arg, mem] : s.args)
    if (arg != DNNL_ARG_SCRATCHPAD) t.bytes += static_cast<double>(mem.get_desc().get_size());
  if (std::strcmp(s.op->family, "reorder") == 0) return t;
  const auto src = s.args.find(DNNL_ARG_SRC);
  const memory::data_type d =
      src == s.args.end() ? memory::data_type::f32 : src->second.get_desc().data_type();
  t.precision = is_int8(d) ? "int8" : d == memory::data_type::bf16 ? "bf16" : "fp32";
  return t;
}

struct Plan {
  int64_t n = 0, h = 0, w = 0;
  /// Activation storage, 64-byte aligned (core/aligned.h; bf16 and 8-bit values packed into
  /// floats).
  std::vector<aligned_vector<float>> buffers;
  std::vector<Step> steps;
  std::vector<memory> packed;              ///< packed conv/fc weights, kept alive
  std::vector<Tensor> owned;               ///< QAT: fake-quantized f32 weights (fc, stem)
  std::vector<std::vector<float>> biases;  ///< int8: biases in accumulator units
  memory input;  ///< the network input buffer, NHWC (NCHW with blocked activations)
  /// Per value (the program's, then the INT8 conversions' copies): how it is stored and its
  /// scale (8-bit codes), for the observer.
  std::vector<ObservedValue::Type> value_type;
  std::vector<float> value_scale;
  /// The user's f32 input (NCHW [0] or NHWC [1]) into `input`, built on first use.
  dnnl::reorder load_input[2];
  const float* logits = nullptr;
};

class CpuEngine final : public InferenceEngine {
 public:
  CpuEngine(InferenceProgram p, EnginePrecision precision, ValueObserver observer,
            bool batch_invariant, CpuActivationLayout layout)
      : prog_(std::move(p)),
        prec_(precision),
        precision_(engine_precision_name(precision)),
        act_(precision == EnginePrecision::bf16 ? dt::bf16 : dt::f32),
        observer_(std::move(observer)),
        batch_invariant_(batch_invariant),
        blocked_(precision == EnginePrecision::fp32 && !observer_ &&
                 (layout == CpuActivationLayout::blocked ||
                  (layout == CpuActivationLayout::automatic &&
                   onednn::infer_blocked_activations_preferred()))),
        eng_(dnnl::engine::kind::cpu, 0),
        strm_(eng_) {
    RN50_CHECK(prec_ == EnginePrecision::fp32 || prec_ == EnginePrecision::bf16 ||
                   prec_ == EnginePrecision::int8,
               "inference: --precision {}: the CPU engine computes in fp32, bf16 or int8 (fp16 "
               "and tf32 are the GPU engine's)",
               precision_);
    RN50_CHECK(prec_ != EnginePrecision::int8 ||
                   prog_.value_absmax.size() == prog_.producer.size(),
               "inference: --precision int8 needs a calibrated model (activation ranges); export "
               "it with rn50 export --precision int8 --image-root DIR --calib-images N (or from "
               "weights trained with --qat, which hold their ranges)");
    RN50_CHECK(!observer_ || prec_ == EnginePrecision::fp32 || prec_ == EnginePrecision::int8,
               "inference: the observer needs fp32 or int8");
  }

  Tensor run(const Tensor& x) override {
    check_image_batch(x);
    std::lock_guard<std::mutex> lock(mu_);
    Plan& plan = plan_for(x.n(), x.h(), x.w());
    // The input into the plan's buffer (a reorder or a copy/conversion).
    const bool nhwc = x.layout() == Layout::NHWC;
    memory user(memory::desc({x.n(), 3, x.h(), x.w()}, dt::f32, nhwc ? tag::nhwc : tag::nchw), eng_,
                x.data());
    dnnl::reorder& load = plan.load_input[nhwc];
    if (!load) load = dnnl::reorder(user, plan.input);
    // An active profiler times each primitive (it runs synchronously on the CPU; the wait is
    // for certainty), else the loop runs untouched.
    const bool profiled = OpProfiler::current() != nullptr;
    {
      OpProfiler::Scope timed(kLoadInput, 0,
                              static_cast<double>(x.nbytes() + plan.input.get_desc().get_size()),
                              nullptr);
      load.execute(strm_, user, plan.input);
      if (profiled) strm_.wait();
    }
    if (observer_) observe(plan, 0, plan.input);
    for (Step& s : plan.steps) {
      if (profiled) {
        OpProfiler::Scope timed(*s.op, s.flops, s.traffic.bytes, s.traffic.precision);
        if (s.impl) OpProfiler::note_impl(s.impl);
        s.custom ? s.custom() : s.prim.execute(strm_, s.args);
        strm_.wait();
      } else {
        s.custom ? s.custom() : s.prim.execute(strm_, s.args);
      }
      if (observer_) observe(plan, s.value, s.args.at(DNNL_ARG_DST));
    }
    strm_.wait();
    OpProfiler::Scope timed(kLogitsOp);
    Tensor out = Tensor::empty({x.n(), prog_.num_classes}, DType::f32);
    std::memcpy(out.data(), plan.logits, out.nbytes());
    return out;
  }

  int num_classes() const override { return prog_.num_classes; }

  /// Hands the value just written to the observer (the buffer may be reused later).
  void observe(const Plan& plan, int value, const memory& m) {
    strm_.wait();
    ObservedValue o;
    o.value = value;
    o.data = m.get_data_handle();
    o.type = plan.value_type.at(static_cast<size_t>(value));
    o.scale = plan.value_scale.at(static_cast<size_t>(value));
    o.count = static_cast<int64_t>(m.get_desc().get_size() /
                                   memory::data_type_size(m.get_desc().data_type()));
    observer_(o);
  }

  const std::string& precision() const override { return precision_; }
  const InferenceProgram& program() const override { return prog_; }

 private:
  Plan& plan_for(int64_t n, int64_t h, int64_t w) {
    auto key = std::make_tuple(n, h, w);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    // Drop plans for other shapes beyond a few (a server sees a handful of batch sizes).
    if (plans_.size() >= 8) plans_.erase(plans_.begin());
    std::unique_ptr<Plan> plan;
    try {
      plan = build(n, h, w);
    } catch (const dnnl::error& e) {
      RN50_FAIL(
          "inference: oneDNN cannot run {} {} for a {}x{}x{} input on this CPU ({}); use "
          "--precision fp32",
          prog_.arch, precision_, n, h, w, e.what());
    }
    for (Step& s : plan->steps) s.traffic = traffic_of(s);  // for a profile
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

  std::unique_ptr<Plan> build(int64_t n, int64_t h, int64_t w) {
    const auto& ops = prog_.ops;
    const bool int8 = prec_ == EnginePrecision::int8;
    const bool qat = int8 && prog_.qat_ranges;  // QAT's grid (rn50/inference.h)
    // The lowering passes (engine_cpu_lower.h): each value's data type and scale with the
    // conversions between them, then the buffers by liveness.
    const cpu_engine::LoweredValues lv = cpu_engine::lower_values(prog_, prec_, act_, h, w);
    const auto& shape = lv.shape;
    const auto& vdt = lv.vdt;
    const auto& scale = lv.scale;
    const auto& nodes = lv.nodes;
    auto plan = std::make_unique<Plan>();
    for (size_t v = 0; v < shape.size(); ++v) {
      plan->value_type.push_back(vdt[v] == dt::u8     ? ObservedValue::Type::u8
                                 : vdt[v] == dt::s8   ? ObservedValue::Type::s8
                                 : vdt[v] == dt::bf16 ? ObservedValue::Type::bf16
                                                      : ObservedValue::Type::f32);
      plan->value_scale.push_back(is_int8(vdt[v]) ? scale[v] : 1.f);
    }
    plan->n = n;
    plan->h = h;
    plan->w = w;
    const cpu_engine::BufferAssignment bufs = cpu_engine::assign_buffers(lv, prog_, n);
    for (size_t bytes : bufs.bytes)
      plan->buffers.emplace_back((bytes + sizeof(float) - 1) / sizeof(float));
    const std::vector<int>& buf_of = bufs.buf_of;
    auto ptr = [&](int v) {
      return plan->buffers[static_cast<size_t>(buf_of[static_cast<size_t>(v)])].data();
    };
    // Value v's channel block in its buffer: block_ where it is blocked, 0 where it is plain
    // (NHWC, or the input image's NCHW).
    auto block_of = [&](int v) {
      return blocked_ && v != 0 && shape[static_cast<size_t>(v)][0] % block_ == 0 ? block_ : 0;
    };
    auto act_md = [&](int v) {
      const auto& s = shape[static_cast<size_t>(v)];
      const tag t = block_of(v) == 16 ? tag::nChw16c
                    : block_of(v) == 8 ? tag::nChw8c
                    : blocked_ && v == 0 ? tag::nchw
                                         : tag::nhwc;
      return memory::desc({n, s[0], s[1], s[2]}, vdt[static_cast<size_t>(v)], t);
    };
    plan->input = memory(act_md(0), eng_, ptr(0));
    // Winograd convs' sources [0] and destinations [1] in the primitive's layout: two buffers
    // shared by all of them (the steps run one after another), bound after the loop.
    std::array<std::vector<memory>, 2> wino_mems;

    for (const Node& nd : nodes) {
      Step st;
      st.value = nd.out;
      const memory::desc src = act_md(nd.in), dst = act_md(nd.out);
      memory src_m(src, eng_, ptr(nd.in)), dst_m(dst, eng_, ptr(nd.out));
      const float s_in = scale[static_cast<size_t>(nd.in)],
                  s_out = scale[static_cast<size_t>(nd.out)];
      if (nd.op < 0) {
        // quantize (f32/bf16 -> u8/s8: x / s_out), dequantize (q * s_in), codes into codes
        // (s8 -> u8, same scale) or floats into floats (f32 -> bf16)
        const bool from_codes = is_int8(vdt[static_cast<size_t>(nd.in)]),
                   to_codes = is_int8(vdt[static_cast<size_t>(nd.out)]);
        dnnl::primitive_attr attr;
        if (from_codes && !to_codes)
          attr.set_output_scales(0, {s_in});
        else if (!from_codes && to_codes)
          attr = quant::quantize_attr({s_out}, 0);
        else if (from_codes)
          RN50_CHECK(s_in == s_out, "inference: int8 conversion between scales");
        dnnl::reorder::primitive_desc pd(eng_, src, eng_, dst, attr);
        st.prim = dnnl::reorder(pd);
        st.args = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_DST, dst_m}};
        plan->steps.push_back(std::move(st));
        continue;
      }
      const InferOp& op = ops[static_cast<size_t>(nd.op)];
      switch (op.kind) {
        case InferOp::Kind::conv: {
          const ConvSpec& c = op.conv;
          const dt in_dt = vdt[static_cast<size_t>(nd.in)];
          const bool q = is_int8(in_dt);
          const memory::dims wd{c.out_channels, c.in_channels, c.kernel, c.kernel};
          const memory::desc w_any(wd, q ? dt::s8 : in_dt, tag::any),
              b_md({c.out_channels}, dt::f32, tag::x);
          const auto& oshape = shape[static_cast<size_t>(nd.out)];
          // The implementation: the first candidate of the engine's list (Winograd: see the
          // file comment) that builds.
          const onednn::InferConvQuery query{
              .dt = act_ == dt::bf16 ? DType::bf16 : DType::f32,
              .int8 = q,
              .n = n,
              .c = c.in_channels,
              .k = c.out_channels,
              .kernel = c.kernel,
              .stride = c.stride,
              .pad = c.pad,
              .oh = oshape[1],
              .ow = oshape[2],
              .residual = nd.res >= 0,
              .block = block_of(nd.in) != 0 && block_of(nd.out) != 0 ? block_ : 0,
              .batch_invariant = batch_invariant_,
              .observed = static_cast<bool>(observer_)};
          const std::vector<const onednn::InferConvImpl*> candidates =
              onednn::infer_conv_candidates(query);
          const memory::desc wsrc(src.dims(), dt::f32, tag::any),
              wdst(dst.dims(), dt::f32, tag::any);
          auto conv_desc = [&](bool wino) {
            return dnnl::convolution_forward::desc(
                prop_kind::forward_inference,
                wino ? algorithm::convolution_winograd : algorithm::convolution_direct,
                wino ? wsrc : src, w_any, b_md, wino ? wdst : dst, {c.stride, c.stride},
                {c.pad, c.pad}, {c.pad, c.pad});
          };
          // The epilogue (infer/conv_epilogue.h): output scales, the shortcut, the ReLU.
          onednn::ConvEpilogue ep;
          std::vector<float> w_scale;  // int8: per output channel, real W = q * w_scale[k]
          const float* bias = op.bias.data_as<const float>();
          if (nd.res >= 0) {
            ep.residual = true;
            ep.residual_md = act_md(nd.res);
          }
          if (q) {
            w_scale = quant::weight_scales(op.weight, quant::weight_code_max(qat));
            // dst = oscale[k] * (acc + bias'[k]) (+ sum) then ReLU, with acc in units of
            // s_in * w_scale[k]: bias' = b / (s_in w_scale[k]), oscale = s_in w_scale[k] / s_out.
            ep.output_scales.resize(w_scale.size());
            std::vector<float>& qb = plan->biases.emplace_back(w_scale.size());
            for (size_t k = 0; k < w_scale.size(); ++k) {
              ep.output_scales[k] = s_in * w_scale[k] / s_out;
              qb[k] = op.bias.data_as<const float>()[k] / (s_in * w_scale[k]);
            }
            bias = qb.data();
            if (nd.res >= 0) ep.residual_scale = scale[static_cast<size_t>(nd.res)] / s_out;
          }
          if (q && qat) {
            // The codes QAT's fake quantizer can give (after the output scale, before
            // rounding; clipping at integers commutes with the rounding): [0, 127] with the
            // ReLU, [-127, 127] without (s8 alone would reach -128).
            ep.tail = algorithm::eltwise_clip;
            ep.tail_alpha = op.relu ? 0.f : -127.f;
            ep.tail_beta = 127.f;
          } else if (op.relu) {
            ep.tail = algorithm::eltwise_relu;
          }
          const dnnl::primitive_attr attr = ep.sum_attr();
          dnnl::convolution_forward::primitive_desc pd;
          const onednn::InferConvImpl* impl = nullptr;
          for (const onednn::InferConvImpl* cand : candidates) {
            if (cand->kind == onednn::InferConvKind::onednn_winograd) {
              try {
                pd = dnnl::convolution_forward::primitive_desc(conv_desc(true), attr, eng_);
              } catch (const dnnl::error&) {
                continue;  // oneDNN has no Winograd for this shape / CPU: the next candidate
              }
            }
            impl = cand;
            break;
          }
          RN50_CHECK(impl != nullptr, "inference: op {}: no convolution implementation", nd.op);
          const bool wino = impl->kind == onednn::InferConvKind::onednn_winograd;
          onednn::log_infer_conv(query, impl->name);
          st.op = &kConvOp;
          st.impl = impl->name;
          st.flops = 2.0 * static_cast<double>(n * oshape[0] * oshape[1] * oshape[2]) *
                     static_cast<double>(c.in_channels * c.kernel * c.kernel);
          // An f32 conv of a QAT engine (the stem, above) computes with its trained weights.
          const Tensor cw = qat && !q ? fake_quantized(op.weight, *plan) : op.weight;
          // A conv our own Winograd runs (st.custom set) into the plan, its arguments naming the
          // transformed weights `u_m` (Step: for the observer and the traffic).
          auto push_own = [&](const memory& u_m) {
            st.args = {{DNNL_ARG_SRC, src_m},
                       {DNNL_ARG_WEIGHTS, u_m},
                       {DNNL_ARG_BIAS, memory(b_md, eng_, const_cast<float*>(bias))},
                       {DNNL_ARG_DST, dst_m}};
            plan->steps.push_back(std::move(st));
          };
          if (impl->kind == onednn::InferConvKind::own_winograd_f43) {
            // Our own Winograd on the nChw8c buffers (file comment), its transformed weights
            // shared by the plans of every batch size.
            const onednn::WinogradF43Conv::Shape ws{n, c.in_channels, c.out_channels,
                                                    oshape[1], oshape[2]};
            auto& u = wino_weights_[nd.op];
            if (!u) u = onednn::WinogradF43Conv::transform_weights(cw.data_as<const float>(),
                                                                   ws.c, ws.k);
            auto conv = std::make_shared<onednn::WinogradF43Conv>(ws, u, bias, op.relu,
                                                                  nd.res >= 0);
            const memory u_m({{36, ws.c, ws.k}, dt::f32, tag::abc}, eng_,
                             const_cast<float*>(u->data()));
            st.custom = [conv, x = ptr(nd.in), y = ptr(nd.out)] { conv->run(x, y); };
            st.op = &kOwnWinoConvOp;
            push_own(u_m);
            continue;
          }
          if (impl->kind == onednn::InferConvKind::own_winograd_f23_bf16) {
            const onednn::WinogradF23Bf16::Shape ws2{n, c.in_channels, c.out_channels,
                                                     oshape[1], oshape[2]};
            // Our own bf16 Winograd on the NHWC buffers (file comment), bias, residual sum and
            // ReLU in its output transform, U from the f32 weights rounded once.
            auto& u = wino_bf16_weights_[nd.op];
            if (!u) {
              auto t = std::make_shared<aligned_vector<uint16_t>>(
                  onednn::WinogradF23Bf16::weight_elems(ws2));
              onednn::WinogradF23Bf16::transform_weights_into(
                  cw.data_as<const float>(), ws2.c, ws2.k,
                  onednn::WinogradF23Bf16::WeightOrder::oihw, t->data());
              u = std::move(t);
            }
            auto conv = std::make_shared<onednn::WinogradF23Bf16>(
                eng_, ws2, onednn::WinogradF23Bf16::Epilogue{bias, op.relu, nd.res >= 0});
            const memory u_m({{16, ws2.c, ws2.k}, dt::bf16, tag::abc}, eng_,
                             const_cast<uint16_t*>(u->data()));
            st.custom = [conv, u, x = ptr(nd.in), y = ptr(nd.out)] {
              conv->run(u->data(), reinterpret_cast<const uint16_t*>(x),
                        reinterpret_cast<uint16_t*>(y));
            };
            st.op = &kOwnWinoConvOp;
            push_own(u_m);
            continue;
          }
          int binary_post_op = -1;  // the shortcut as a binary add: its post-op index
          if (!wino) {
            onednn::EpilogueConv ec =
                onednn::make_epilogue_conv(conv_desc(false), ep, eng_, batch_invariant_);
            pd = ec.pd;
            binary_post_op = ec.binary_post_op;
          }
          st.prim = dnnl::convolution_forward(pd);
          const memory w =
              pack(cw, memory::desc(wd, dt::f32, tag::oihw), pd.weights_desc(), w_scale);
          const memory b(b_md, eng_, const_cast<float*>(bias));
          st.args = {{DNNL_ARG_SRC, src_m},
                     {DNNL_ARG_WEIGHTS, w},
                     {DNNL_ARG_BIAS, b},
                     {DNNL_ARG_DST, dst_m}};
          // The binary add reads the shortcut from the destination's own buffer.
          if (binary_post_op >= 0)
            st.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(binary_post_op) | DNNL_ARG_SRC_1] = dst_m;
          plan->packed.push_back(w);
          plan->packed.push_back(b);
          // A Winograd conv whose layouts are the buffers' (nChw16c) reads and writes them as
          // a direct one does; otherwise:
          if (wino && (pd.src_desc() != src || pd.dst_desc() != dst)) {
            // Through the two shared Winograd buffers (bound once the plan is built): NHWC ->
            // the primitive's layout, the conv, and back.
            memory bsrc(pd.src_desc(), eng_, DNNL_MEMORY_NONE);
            memory bdst(pd.dst_desc(), eng_, DNNL_MEMORY_NONE);
            wino_mems[0].push_back(bsrc);
            wino_mems[1].push_back(bdst);
            Step in;
            in.value = nd.in;
            in.op = &kWinoReorderOp;
            in.prim = dnnl::reorder(dnnl::reorder::primitive_desc(eng_, src, eng_, pd.src_desc()));
            in.args = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_DST, bsrc}};
            plan->steps.push_back(std::move(in));
            st.args[DNNL_ARG_SRC] = bsrc;
            st.args[DNNL_ARG_DST] = bdst;
            plan->steps.push_back(std::move(st));
            Step back;
            back.value = nd.out;
            back.op = &kWinoReorderOp;
            back.prim =
                dnnl::reorder(dnnl::reorder::primitive_desc(eng_, pd.dst_desc(), eng_, dst));
            back.args = {{DNNL_ARG_SRC, bdst}, {DNNL_ARG_DST, dst_m}};
            plan->steps.push_back(std::move(back));
            continue;
          }
          break;
        }
        case InferOp::Kind::maxpool:
        case InferOp::Kind::global_avgpool: {
          const bool mx = op.kind == InferOp::Kind::maxpool;
          const auto& s = shape[static_cast<size_t>(nd.in)];
          const memory::dims k =
              mx ? memory::dims{op.pool.kernel, op.pool.kernel} : memory::dims{s[1], s[2]};
          const memory::dims stride =
              mx ? memory::dims{op.pool.stride, op.pool.stride} : memory::dims{1, 1};
          const memory::dims pad = mx ? memory::dims{op.pool.pad, op.pool.pad} : memory::dims{0, 0};
          dnnl::pooling_forward::desc d(
              prop_kind::forward_inference,
              mx ? algorithm::pooling_max : algorithm::pooling_avg_exclude_padding, src, dst,
              stride, k, pad, pad);
          dnnl::pooling_forward::primitive_desc pd(d, eng_);
          st.prim = dnnl::pooling_forward(pd);
          st.op = mx ? &kMaxpoolOp : &kAvgpoolOp;
          st.args = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_DST, dst_m}};
          break;
        }
        case InferOp::Kind::fc: {
          const int64_t k = prog_.num_classes, c = op.weight.dim(1);
          const dt xdt = vdt[static_cast<size_t>(nd.in)];
          // Rows per primitive call: all n, or one (batch invariance, file comment).
          const int64_t rows = batch_invariant_ ? 1 : n;
          const memory::desc x2({rows, c}, xdt, tag::nc), y2({rows, k}, dt::f32, tag::nc);
          const memory::desc w_any({k, c}, xdt, tag::any), b_md({k}, dt::f32, tag::x);
          dnnl::inner_product_forward::desc d(prop_kind::forward_inference, x2, w_any, b_md, y2);
          dnnl::inner_product_forward::primitive_desc pd(d, eng_);
          st.prim = dnnl::inner_product_forward(pd);
          st.op = &kFcOp;
          st.flops = 2.0 * static_cast<double>(rows * k * c);
          const Tensor fw = qat ? fake_quantized(op.weight, *plan) : op.weight;
          const memory w =
              pack(fw, memory::desc({k, c}, dt::f32, tag::oi), pd.weights_desc(), {});
          const memory b(b_md, eng_, op.bias.data());
          // One step per `rows` images; all but the last pushed here, the last below.
          const size_t x_row = static_cast<size_t>(c) * (xdt == dt::bf16 ? 2 : 4);
          const size_t y_row = static_cast<size_t>(k) * sizeof(float);
          auto* xp = reinterpret_cast<char*>(ptr(nd.in));
          auto* yp = reinterpret_cast<char*>(ptr(nd.out));
          for (int64_t r0 = 0; r0 < n; r0 += rows) {
            st.args = {{DNNL_ARG_SRC, memory(x2, eng_, xp + static_cast<size_t>(r0) * x_row)},
                       {DNNL_ARG_WEIGHTS, w},
                       {DNNL_ARG_BIAS, b},
                       {DNNL_ARG_DST, memory(y2, eng_, yp + static_cast<size_t>(r0) * y_row)}};
            if (r0 + rows < n) plan->steps.push_back(st);
          }
          plan->packed.push_back(w);
          plan->packed.push_back(b);
          plan->logits = ptr(nd.out);
          break;
        }
      }
      plan->steps.push_back(std::move(st));
    }
    for (size_t r = 0; r < wino_mems.size(); ++r) {
      size_t bytes = 0;
      for (const memory& m : wino_mems[r]) bytes = std::max(bytes, m.get_desc().get_size());
      if (bytes == 0) continue;
      aligned_vector<float>& buf =
          plan->buffers.emplace_back((bytes + sizeof(float) - 1) / sizeof(float));
      for (memory& m : wino_mems[r]) m.set_data_handle(buf.data());
    }
    strm_.wait();
    return plan;
  }

  /// `w` (host f32 in `user` layout) reordered into `want`; the program's tensor itself when the
  /// layouts agree. With w_scale (int8 weights), output channel k is divided by w_scale[k]
  /// (rounded to nearest even, saturated to [-127, 127] by the range of the scale).
  memory pack(const Tensor& w, const memory::desc& user, const memory::desc& want,
              const std::vector<float>& w_scale) {
    memory u(user, eng_, const_cast<void*>(w.data()));
    if (user == want && w_scale.empty()) return u;
    memory m(want, eng_);
    const dnnl::primitive_attr attr =
        w_scale.empty() ? dnnl::primitive_attr() : quant::quantize_attr(w_scale, 1 << 0);
    dnnl::reorder(dnnl::reorder::primitive_desc(eng_, user, eng_, want, attr)).execute(strm_, u, m);
    return m;
  }

  /// `w` (K, ...) on QAT's weight grid, per output channel (src/core/fake_quant.h), in a
  /// tensor the plan owns.
  static Tensor fake_quantized(const Tensor& w, Plan& plan) {
    const int64_t k = w.dim(0), c = w.numel() / k;
    Tensor q = Tensor::empty(w.shape(), DType::f32);
    const float* src = w.data_as<const float>();
    float* dst = q.data_as<float>();
    for (int64_t r = 0; r < k; ++r) {
      const fake_quant::Grid<float> g(fake_quant::absmax_of(src + r * c, c));
      for (int64_t i = 0; i < c; ++i) dst[r * c + i] = g(src[r * c + i]);
    }
    plan.owned.push_back(q);
    return q;
  }

  InferenceProgram prog_;
  EnginePrecision prec_;
  std::string precision_;  ///< prec_'s name (InferenceEngine::precision)
  dt act_;  ///< float activations and conv/fc weights: f32, or bf16 (bias, accumulation, logits
            ///< f32)
  ValueObserver observer_;
  /// EngineOptions::batch_invariant: no Winograd, the fc image by image (file comment).
  bool batch_invariant_;
  /// f32 activations blocked (EngineOptions::cpu_activations; file comment).
  bool blocked_;
  /// The channel block of blocked_ activations: 16 on CPUs with AVX-512, else 8.
  int block_ = onednn::infer_activation_block();
  /// Our own Winograd's transformed weights by program op (file comment), for every plan.
  std::map<int, std::shared_ptr<const aligned_vector<float>>> wino_weights_;
  /// The same for the bf16 Winograd F(2x2, 3x3) (16 x C x K bf16).
  std::map<int, std::shared_ptr<const aligned_vector<uint16_t>>> wino_bf16_weights_;
  dnnl::engine eng_;
  dnnl::stream strm_;
  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace

std::unique_ptr<InferenceEngine> make_cpu_engine(InferenceProgram program,
                                                 EnginePrecision precision,
                                                 ValueObserver observer,
                                                 bool batch_invariant,
                                                 CpuActivationLayout layout) {
  return std::make_unique<CpuEngine>(std::move(program), precision, std::move(observer),
                                     batch_invariant, layout);
}

}  // namespace rn50
