// rn50 inference: the program on a compute Backend — the GPU engine (CUDA) and, for the tests,
// the same engine on the reference backend.
//
// Every conv op is one Backend::conv2d_bias_act_fwd: the folded BatchNorm's shift, the residual
// shortcut and the ReLU in the convolution's epilogue (cudnnConvolutionBiasActivationForward
// on CUDA). Activations are NHWC in the engine's compute dtype, conv weights in the backend's
// preferred layout (KRSC on CUDA), uploaded and converted once. Per input shape a plan holds
// every value's buffer; its first run goes op by op (cuDNN chooses its algorithms then), and on
// a backend that records (CUDA) the op sequence is then captured once as a CUDA graph that
// later runs replay: one graph per batch size. The logits come back as f32.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "infer/engine_impl.h"
#include "rn50/backend.h"

namespace rn50 {

namespace {

/// The activations' dtype of `precision`; throws rn50::Error for int8 (the CPU engine's).
DType dtype_of(EnginePrecision precision) {
  switch (precision) {
    case EnginePrecision::fp16: return DType::f16;
    case EnginePrecision::bf16: return DType::bf16;
    case EnginePrecision::fp32:
    case EnginePrecision::tf32: return DType::f32;
    case EnginePrecision::int8: break;
  }
  RN50_FAIL("inference: --precision int8 runs on the CPU engine only; use --device cpu");
}

class DeviceEngine final : public InferenceEngine {
 public:
  DeviceEngine(InferenceProgram program, std::unique_ptr<Backend> backend,
               EnginePrecision precision)
      : prog_(std::move(program)),
        be_(std::move(backend)),
        precision_(engine_precision_name(precision)),
        dt_(dtype_of(precision)) {
    RN50_CHECK(be_->supports(Op::conv_bias_act, dt_, Layout::NHWC),
               "inference: the {} backend has no {} inference convolution", be_->name(),
               precision_);
    const Layout wl = be_->preferred_weight_layout(Layout::NHWC);
    for (const InferOp& op : prog_.ops) {
      Weights w;
      switch (op.kind) {
        case InferOp::Kind::conv:
        case InferOp::Kind::fc: {
          const Layout l = op.kind == InferOp::Kind::conv ? wl : Layout::NCHW;
          w.weight = be_->alloc(op.weight.shape(), dt_, l);
          be_->copy(op.weight, w.weight);  // OIHW f32 host -> the backend's layout and dtype
          w.bias = be_->alloc(op.bias.shape(), dt_);
          be_->copy(op.bias, w.bias);
          break;
        }
        case InferOp::Kind::maxpool:
        case InferOp::Kind::global_avgpool:
          break;  // no weights
      }
      weights_.push_back(std::move(w));
    }
    be_->synchronize();
  }

  Tensor run(const Tensor& x) override {
    check_image_batch(x);
    std::lock_guard<std::mutex> lock(mu_);
    Plan& plan = plan_for(x.n(), x.h(), x.w());
    // Host f32 -> a device f32 copy in the caller's layout (a plain transfer), then one
    // conversion on the device into the NHWC compute-dtype input.
    Tensor& staged = plan.staging[x.layout() == Layout::NHWC];
    if (!staged.defined()) staged = be_->alloc(x.shape(), DType::f32, x.layout());
    be_->copy(x, staged);
    forward(plan, staged);
    Tensor out = Tensor::empty({x.n(), prog_.num_classes}, DType::f32);
    be_->copy(plan.logits, out);
    be_->synchronize();
    return out;
  }

  bool stage_on_device(const Tensor& x) override {
    check_image_batch(x);
    std::lock_guard<std::mutex> lock(mu_);
    Plan& plan = plan_for(x.n(), x.h(), x.w());
    Tensor& staged = plan.staging[x.layout() == Layout::NHWC];
    if (!staged.defined()) staged = be_->alloc(x.shape(), DType::f32, x.layout());
    be_->copy(x, staged);
    be_->synchronize();
    resident_ = &plan;
    resident_input_ = staged;
    return true;
  }

  void run_device_resident() override {
    std::lock_guard<std::mutex> lock(mu_);
    RN50_CHECK(resident_ != nullptr,
               "inference: run_device_resident before stage_on_device: nothing is on the device");
    forward(*resident_, resident_input_);
    be_->synchronize();
  }

  int num_classes() const override { return prog_.num_classes; }
  const std::string& precision() const override { return precision_; }
  const InferenceProgram& program() const override { return prog_; }

 private:
  struct Weights {
    Tensor weight, bias;  ///< conv / fc: on the device, compute dtype
  };
  /// The buffers of one input shape: every value the program materialises, on the device.
  struct Plan {
    std::vector<Tensor> values;  ///< by value index; [0] is the input
    Tensor staging[2];           ///< f32 input as the caller lays it out: [0] NCHW, [1] NHWC
    Tensor logits;               ///< f32 (N, classes) on the device
    std::unique_ptr<Graph> graph;
  };

  /// The device f32 input `staged` (the caller's layout) converted into the plan's input, the
  /// network (its graph once recorded) and the logits into plan.logits, queued on the backend.
  void forward(Plan& plan, const Tensor& staged) {
    be_->copy(staged, plan.values[0]);
    if (plan.graph) {
      plan.graph->replay();
    } else {
      run_ops(plan);
      // The eager run chose every algorithm and grew every workspace: record it now (CPU
      // backends return no graph at once, without calling the function).
      plan.graph = be_->capture([&] { run_ops(plan); });
    }
    be_->copy(plan.values[static_cast<size_t>(prog_.ops.back().output)], plan.logits);
  }

  void run_ops(Plan& plan) {
    for (size_t i = 0; i < prog_.ops.size(); ++i) {
      const InferOp& op = prog_.ops[i];
      const Tensor& in = plan.values[static_cast<size_t>(op.input)];
      Tensor& out = plan.values[static_cast<size_t>(op.output)];
      switch (op.kind) {
        case InferOp::Kind::conv: {
          Conv2dParams cp;
          cp.stride = op.conv.stride;
          cp.pad = op.conv.pad;
          const Tensor z =
              op.residual >= 0 ? plan.values[static_cast<size_t>(op.residual)] : Tensor();
          be_->conv2d_bias_act_fwd(cp, in, weights_[i].weight, weights_[i].bias, z, op.relu, out);
          break;
        }
        case InferOp::Kind::maxpool: {
          Pool2dParams pp;
          pp.kernel = op.pool.kernel;
          pp.stride = op.pool.stride;
          pp.pad = op.pool.pad;
          be_->maxpool2d_fwd(pp, in, out);
          break;
        }
        case InferOp::Kind::global_avgpool:
          be_->global_avgpool_fwd(in, out);
          break;
        case InferOp::Kind::fc:
          be_->linear_fwd(in, weights_[i].weight, weights_[i].bias, out);
          break;
      }
    }
  }

  Plan& plan_for(int64_t n, int64_t h, int64_t w) {
    const auto key = std::make_tuple(n, h, w);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    if (plans_.size() >= 8) {  // a server sees a few batch sizes
      if (resident_ == plans_.begin()->second.get()) resident_ = nullptr;
      plans_.erase(plans_.begin());
    }
    auto plan = std::make_unique<Plan>();
    plan->values.resize(prog_.producer.size());
    plan->values[0] = be_->alloc({n, 3, h, w}, dt_, Layout::NHWC);
    // Shapes walked through the ops (each op's input is written before it).
    std::vector<std::vector<int64_t>> shape(prog_.producer.size());
    shape[0] = {n, 3, h, w};
    for (const InferOp& op : prog_.ops) {
      const std::vector<int64_t>& s = shape[static_cast<size_t>(op.input)];
      RN50_CHECK(!s.empty(), "inference: '{}' reads value {} before it is written", op.name,
                 op.input);
      std::vector<int64_t> o;
      auto out_hw = [&](int64_t v, int k, int st, int pad) { return (v + 2 * pad - k) / st + 1; };
      switch (op.kind) {
        case InferOp::Kind::conv:
          RN50_CHECK(
              s[2] + 2 * op.conv.pad >= op.conv.kernel && s[3] + 2 * op.conv.pad >= op.conv.kernel,
              "inference: a {}x{} input is too small for {} ({}x{} kernel at a {}x{} "
              "map)",
              h, w, op.name, op.conv.kernel, op.conv.kernel, s[2], s[3]);
          o = {n, op.conv.out_channels, out_hw(s[2], op.conv.kernel, op.conv.stride, op.conv.pad),
               out_hw(s[3], op.conv.kernel, op.conv.stride, op.conv.pad)};
          break;
        case InferOp::Kind::maxpool:
          RN50_CHECK(s[2] + 2 * op.pool.pad >= op.pool.kernel,
                     "inference: a {}x{} input is too small for {}", h, w, op.name);
          o = {n, s[1], out_hw(s[2], op.pool.kernel, op.pool.stride, op.pool.pad),
               out_hw(s[3], op.pool.kernel, op.pool.stride, op.pool.pad)};
          break;
        case InferOp::Kind::global_avgpool:
          o = {n, s[1]};
          break;
        case InferOp::Kind::fc:
          o = {n, op.weight.dim(0)};
          break;
      }
      shape[static_cast<size_t>(op.output)] = o;
      plan->values[static_cast<size_t>(op.output)] =
          be_->alloc(o, dt_, o.size() == 4 ? Layout::NHWC : Layout::NCHW);
    }
    plan->logits = be_->alloc({n, prog_.num_classes}, DType::f32);
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

  InferenceProgram prog_;
  std::unique_ptr<Backend> be_;
  std::string precision_;
  DType dt_;
  std::vector<Weights> weights_;  ///< by op index
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
  std::mutex mu_;
  /// stage_on_device's plan and device input (run_device_resident); null before.
  Plan* resident_ = nullptr;
  Tensor resident_input_;
};

}  // namespace

std::unique_ptr<InferenceEngine> make_device_engine(InferenceProgram program,
                                                    std::unique_ptr<Backend> backend,
                                                    EnginePrecision precision) {
  return std::make_unique<DeviceEngine>(std::move(program), std::move(backend), precision);
}

}  // namespace rn50
