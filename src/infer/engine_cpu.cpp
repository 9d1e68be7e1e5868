// rn50 inference: the CPU engine (oneDNN, NHWC; fp32, or bf16 activations and weights with f32
// bias, accumulation and logits). Per input shape a Plan holds one oneDNN
// primitive per program op (forward_inference), the activation buffers and the weights packed in
// the layout each convolution chose (format_tag::any), built once:
//   conv            convolution_forward with bias; post-ops: sum (the destination is the
//                   residual's own buffer: the adding conv is the shortcut's last reader) then
//                   eltwise_relu
//   maxpool         pooling_forward, pooling_max
//   global avgpool  pooling_forward, pooling_avg_exclude_padding over the whole plane
//   fc              inner_product_forward with bias
// Activation buffers are assigned by liveness (a buffer is reused once the last op reading its
// value has run), so ResNet-50 needs a handful of buffers, not one per layer.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "core/check.h"
#include "infer/engine_impl.h"

namespace rn50 {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;
using dt = memory::data_type;

/// One primitive with its arguments.
struct Step {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
};

struct Plan {
  int64_t n = 0, h = 0, w = 0;
  /// Activation storage (bf16 values packed two per float).
  std::vector<std::vector<float>> buffers;
  std::vector<Step> steps;
  std::vector<memory> packed;  ///< packed conv/fc weights, kept alive
  memory input;                ///< the network input buffer, nhwc
  /// The user's f32 input (NCHW [0] or NHWC [1]) into `input`, built on first use.
  dnnl::reorder load_input[2];
  const float* logits = nullptr;
};

class CpuEngine final : public InferenceEngine {
 public:
  CpuEngine(InferenceProgram p, const std::string& precision)
      : prog_(std::move(p)),
        precision_(precision),
        act_(precision == "bf16" ? dt::bf16 : dt::f32),
        eng_(dnnl::engine::kind::cpu, 0),
        strm_(eng_) {}

  Tensor run(const Tensor& x) override {
    RN50_CHECK(x.defined() && x.is_cpu() && x.dtype() == DType::f32 && x.ndim() == 4 &&
                   x.c() == 3 && (x.layout() == Layout::NCHW || x.layout() == Layout::NHWC),
               "inference: expected a host f32 (N, 3, H, W) image batch, got {}", x.str());
    std::lock_guard<std::mutex> lock(mu_);
    Plan& plan = plan_for(x.n(), x.h(), x.w());
    // The input into the plan's nhwc buffer (a reorder from NCHW, a copy/conversion from NHWC).
    const bool nhwc = x.layout() == Layout::NHWC;
    memory user(memory::desc({x.n(), 3, x.h(), x.w()}, dt::f32, nhwc ? tag::nhwc : tag::nchw), eng_,
                x.data());
    dnnl::reorder& load = plan.load_input[nhwc];
    if (!load) load = dnnl::reorder(user, plan.input);
    load.execute(strm_, user, plan.input);
    for (Step& s : plan.steps) {
      s.prim.execute(strm_, s.args);
    }
    strm_.wait();
    Tensor out = Tensor::empty({x.n(), prog_.num_classes}, DType::f32);
    std::memcpy(out.data(), plan.logits, out.nbytes());
    return out;
  }

  int num_classes() const override { return prog_.num_classes; }
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
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

  std::unique_ptr<Plan> build(int64_t n, int64_t h, int64_t w) {
    const auto& ops = prog_.ops;
    const size_t nv = prog_.producer.size();
    // Shapes (C, H, W) of every value, and the last op reading each.
    std::vector<std::array<int64_t, 3>> shape(nv, {0, 0, 0});
    std::vector<int> last_read(nv, -1);
    shape[0] = {3, h, w};
    for (size_t i = 0; i < ops.size(); ++i) {
      const InferOp& op = ops[i];
      const auto in = shape[static_cast<size_t>(op.input)];
      std::array<int64_t, 3> o{};
      auto out_size = [&](int64_t s, int k, int st, int pad) { return (s + 2 * pad - k) / st + 1; };
      switch (op.kind) {
        case InferOp::Kind::conv:
          o = {op.conv.out_channels, out_size(in[1], op.conv.kernel, op.conv.stride, op.conv.pad),
               out_size(in[2], op.conv.kernel, op.conv.stride, op.conv.pad)};
          break;
        case InferOp::Kind::maxpool:
          o = {in[0], out_size(in[1], op.pool.kernel, op.pool.stride, op.pool.pad),
               out_size(in[2], op.pool.kernel, op.pool.stride, op.pool.pad)};
          break;
        case InferOp::Kind::global_avgpool:
          o = {in[0], 1, 1};
          break;
        case InferOp::Kind::fc:
          o = {prog_.num_classes, 1, 1};
          break;
      }
      RN50_CHECK(o[1] >= 1 && o[2] >= 1,
                 "inference: a {}x{} input is too small for {} (at '{}'); use a larger crop", h, w,
                 prog_.arch, op.name);
      shape[static_cast<size_t>(op.output)] = o;
      last_read[static_cast<size_t>(op.input)] = static_cast<int>(i);
      if (op.residual >= 0) last_read[static_cast<size_t>(op.residual)] = static_cast<int>(i);
    }
    auto plan = std::make_unique<Plan>();
    plan->n = n;
    plan->h = h;
    plan->w = w;
    // Liveness assignment of buffers: value -> buffer index.
    std::vector<int> buf_of(nv, -1);
    std::vector<size_t> buf_size;  // bytes
    std::vector<int> free_bufs;
    const size_t logits_value = static_cast<size_t>(ops.back().output);
    auto bytes = [&](size_t v) {  // activations in act_, the logits in f32
      const size_t e = static_cast<size_t>(n * shape[v][0] * shape[v][1] * shape[v][2]);
      return e * (v == logits_value ? sizeof(float) : memory::data_type_size(act_));
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
    std::vector<bool> in_place(ops.size(), false);
    for (size_t i = 0; i < ops.size(); ++i) {
      const InferOp& op = ops[i];
      const auto out = static_cast<size_t>(op.output);
      if (op.residual >= 0) {
        // The sum post-op accumulates into the destination: write over the shortcut's own
        // buffer, which this conv reads last in every ResNet block.
        RN50_CHECK(last_read[static_cast<size_t>(op.residual)] == static_cast<int>(i) &&
                       op.residual != op.input,
                   "inference: '{}' adds a shortcut that a later op still reads; the CPU engine "
                   "needs the adding conv to be the shortcut's last reader",
                   op.name);
        buf_of[out] = buf_of[static_cast<size_t>(op.residual)];
        in_place[i] = true;
      } else {
        take(out);
      }
      for (int v : {op.input, op.residual}) {
        if (v < 0 || last_read[static_cast<size_t>(v)] != static_cast<int>(i)) continue;
        if (in_place[i] && v == op.residual) continue;
        free_bufs.push_back(buf_of[static_cast<size_t>(v)]);
      }
    }
    plan->buffers.resize(buf_size.size());
    for (size_t b = 0; b < buf_size.size(); ++b)
      plan->buffers[b].resize((buf_size[b] + sizeof(float) - 1) / sizeof(float));
    auto ptr = [&](int v) {
      return plan->buffers[static_cast<size_t>(buf_of[static_cast<size_t>(v)])].data();
    };
    auto act_md = [&](int v) {
      const auto& s = shape[static_cast<size_t>(v)];
      return memory::desc({n, s[0], s[1], s[2]}, act_, tag::nhwc);
    };
    plan->input = memory(act_md(0), eng_, ptr(0));

    for (size_t i = 0; i < ops.size(); ++i) {
      const InferOp& op = ops[i];
      Step st;
      const memory::desc src = act_md(op.input), dst = act_md(op.output);
      memory src_m(src, eng_, ptr(op.input)), dst_m(dst, eng_, ptr(op.output));
      switch (op.kind) {
        case InferOp::Kind::conv: {
          const ConvSpec& c = op.conv;
          const memory::dims wd{c.out_channels, c.in_channels, c.kernel, c.kernel};
          const memory::desc w_any(wd, act_, tag::any), b_md({c.out_channels}, dt::f32, tag::x);
          dnnl::convolution_forward::desc d(prop_kind::forward_inference,
                                            algorithm::convolution_direct, src, w_any, b_md, dst,
                                            {c.stride, c.stride}, {c.pad, c.pad}, {c.pad, c.pad});
          dnnl::post_ops po;
          if (op.residual >= 0) po.append_sum(1.f);
          if (op.relu) po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
          dnnl::primitive_attr attr;
          attr.set_post_ops(po);
          dnnl::convolution_forward::primitive_desc pd(d, attr, eng_);
          st.prim = dnnl::convolution_forward(pd);
          const memory w = pack(op.weight, memory::desc(wd, dt::f32, tag::oihw), pd.weights_desc());
          const memory b(b_md, eng_, op.bias.data());
          st.args = {{DNNL_ARG_SRC, src_m},
                     {DNNL_ARG_WEIGHTS, w},
                     {DNNL_ARG_BIAS, b},
                     {DNNL_ARG_DST, dst_m}};
          plan->packed.push_back(w);
          plan->packed.push_back(b);
          break;
        }
        case InferOp::Kind::maxpool:
        case InferOp::Kind::global_avgpool: {
          const bool mx = op.kind == InferOp::Kind::maxpool;
          const auto& s = shape[static_cast<size_t>(op.input)];
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
          st.args = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_DST, dst_m}};
          break;
        }
        case InferOp::Kind::fc: {
          const int64_t k = prog_.num_classes, c = op.weight.dim(1);
          const memory::desc x2({n, c}, act_, tag::nc), y2({n, k}, dt::f32, tag::nc);
          const memory::desc w_any({k, c}, act_, tag::any), b_md({k}, dt::f32, tag::x);
          dnnl::inner_product_forward::desc d(prop_kind::forward_inference, x2, w_any, b_md, y2);
          dnnl::inner_product_forward::primitive_desc pd(d, eng_);
          st.prim = dnnl::inner_product_forward(pd);
          const memory w =
              pack(op.weight, memory::desc({k, c}, dt::f32, tag::oi), pd.weights_desc());
          const memory b(b_md, eng_, op.bias.data());
          st.args = {{DNNL_ARG_SRC, memory(x2, eng_, ptr(op.input))},
                     {DNNL_ARG_WEIGHTS, w},
                     {DNNL_ARG_BIAS, b},
                     {DNNL_ARG_DST, memory(y2, eng_, ptr(op.output))}};
          plan->packed.push_back(w);
          plan->packed.push_back(b);
          plan->logits = ptr(op.output);
          break;
        }
      }
      plan->steps.push_back(std::move(st));
    }
    strm_.wait();
    return plan;
  }

  /// `w` (host f32 in `user` layout) reordered into `want`; the program's tensor itself when the
  /// layouts agree.
  memory pack(const Tensor& w, const memory::desc& user, const memory::desc& want) {
    memory u(user, eng_, w.data());
    if (user == want) return u;
    memory m(want, eng_);
    dnnl::reorder(u, m).execute(strm_, u, m);
    return m;
  }

  InferenceProgram prog_;
  std::string precision_;
  dt act_;  ///< activations and conv/fc weights: f32, or bf16 (bias, accumulation, logits f32)
  dnnl::engine eng_;
  dnnl::stream strm_;
  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace

std::unique_ptr<InferenceEngine> make_cpu_engine(InferenceProgram program,
                                                 const std::string& precision) {
  return std::make_unique<CpuEngine>(std::move(program), precision);
}

}  // namespace rn50
