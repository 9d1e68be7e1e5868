// rn50: the backend interface. Every compute op the model, loss and optimiser need, with typed
// parameter structs. Backends: "ref" (naive, float64 accumulation: the tests' oracle),
// "onednn" (CPU, oneDNN primitives cached per shape), later "cuda" (cuDNN/cuBLASLt + kernels).
//
// Shared conventions for every op:
//  * 4-D activations have logical shape (N, C, H, W) in the layout the tensor carries; a backend
//    accepts NCHW and NHWC inputs, and writes outputs in the layout of the output tensor it is
//    given (callers allocate outputs). Conv weights are (K, C, R, S) NCHW (torchvision OIHW).
//  * Outputs are overwritten, never accumulated, unless an op says otherwise.
//  * All tensors passed to a backend live on backend.device(). dtype f32 unless stated; backends
//    that support f16/bf16 compute say so in supports().
//  * Shape mismatches throw rn50::Error with the op name and the offending shapes.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rn50/tensor.h"

namespace rn50 {

/// 2-D convolution, square kernel taken from the weight's (R, S), dilation 1, groups 1, no bias.
/// Output size: OH = (H + 2*pad - R) / stride + 1 (floor), likewise OW.
struct Conv2dParams {
  int stride = 1;
  int pad = 0;
};

/// BatchNorm2d as torch.nn.BatchNorm2d: y = gamma * (x - mean) / sqrt(var + eps) + beta,
/// optionally followed by ReLU (relu = true fuses y = max(y, 0)).
/// Training mode uses batch statistics over (N, H, W) with the BIASED variance, and updates
/// running_mean = (1 - momentum) * running_mean + momentum * mean,
/// running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1), M = N*H*W
/// (torch's unbiased running variance). Defaults are torch's (eps 1e-5, momentum 0.1).
struct BatchNormParams {
  double eps = 1e-5;
  double momentum = 0.1;
  bool relu = false;
};

/// Max pooling with a square window; torch.nn.MaxPool2d semantics (padding never selected).
/// OH = (H + 2*pad - kernel) / stride + 1 (floor).
struct Pool2dParams {
  int kernel = 3;
  int stride = 2;
  int pad = 1;
};

/// Per-step scalars kept on the backend's device, so that a training step recorded once as a
/// CUDA graph replays with a new learning rate and loss scale, and so that the decision to skip
/// an overflowing AMP step never goes through the host. A step state is an f32 tensor of
/// StepState::size elements on the backend device; these are the element indices.
struct StepState {
  enum : int {
    lr = 0,              ///< learning rate of the step (load_step_inputs, from the host's ring)
    loss_scale = 1,      ///< AMP loss scale S (1 without AMP)
    inv_loss_scale = 2,  ///< 1 / S, the factor that unscales gradients in sgd_update
    found_inf = 3,       ///< 1 when this step's gradients hold an inf/NaN (check_finite)
    growth_tracker = 4,  ///< consecutive finite steps since the scale last changed
    skipped_steps = 5,   ///< total steps skipped for overflow (read back for logging)
    mixup_lambda = 6,    ///< mixup weight lam of the step (--mixup; load_step_inputs, from the
                         ///< host's ring; read by mixup_images and softmax_xent_mixup_*)
    ring_pos = 7,        ///< the row of the step-input ring the next load_step_inputs reads
    size = 8
  };
};

/// SGD with momentum, exactly torch.optim.SGD with dampening 0 and nesterov false:
///   g = grad + weight_decay * p   (only for the first `decay_count` elements of the slab)
///   buf = momentum * buf + g      (buf starts at zero, identical to torch's first-step clone)
///   p = p - lr * buf
/// grad_scale multiplies grad first (1 / loss_scale under AMP; 1 otherwise).
/// When `state` is defined (a step state, see StepState), lr and grad_scale are read on the
/// device from state[lr] and state[inv_loss_scale] (the fields here are then ignored), and the
/// whole update is skipped (params and momentum untouched) when state[found_inf] != 0
/// (torch.cuda.amp.GradScaler.step skips optimizer.step() the same way).
/// After the update (and only when it is not skipped):
///   mask          optional u8 slab of the same length: where mask[i] == 0, p[i] = buf[i] = 0
///                 (masked weights held at exactly zero, momentum and weight decay included:
///                 2:4 structured sparsity, apex ASP's masked step);
///   compute_copy  optional f16/bf16 slab of the same length: compute_copy[i] = p[i] rounded
///                 to nearest even (the half-precision weights of the next AMP step, written in
///                 the same pass instead of a separate conversion).
/// Slab dtypes: params, grads and momentum share one dtype, f32 (every backend; f64 on ref), or
/// f16 (ref and cuda: pure fp16, DLE --use-pure-fp16 / Paddle O2 without master weights): each
/// element is widened to f32, updated in f32 as above, and p and buf are rounded to f16 (nearest
/// even) when stored; p is updated with the unrounded buf, as Paddle's momentum kernel does. An
/// update smaller than half an f16 ulp of p is lost: the accuracy risk of pure fp16. Half slabs
/// take no compute_copy. Where sgd_takes_bf16_grads(), grads may also be bf16 with f32 params.
struct SgdParams {
  float lr = 0.f;
  float momentum = 0.875f;
  float weight_decay = 3.0517578125e-05f;
  int64_t decay_count = 0;
  float grad_scale = 1.f;
  Tensor state;
  Tensor mask;
  Tensor compute_copy;
};

/// Dynamic loss scaling, torch.cuda.amp.GradScaler semantics and defaults (growth x2 after
/// 2000 finite steps in a row, backoff x0.5 on an overflow). dynamic = false keeps the scale
/// fixed (a static --scale-loss) while still counting skipped steps.
struct LossScaleParams {
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;
  bool dynamic = true;
};

/// Op families, for supports() queries and the test harness.
enum class Op {
  conv2d, batchnorm, relu, add, add_relu, maxpool2d, global_avgpool, linear,
  softmax_xent, topk, normalize_u8, sgd, amp, mixup, fake_quant,
  conv_bias_act,      ///< inference convolution with its fused epilogue (conv2d_bias_act_fwd)
  batchnorm_add_relu  ///< training BatchNorm fused with a residual join, forward and backward
};

/// A recorded sequence of backend work (a CUDA graph) that replays with the same tensors.
class Graph {
 public:
  virtual ~Graph() = default;
  /// Queues one replay of the recorded work on the backend's stream (asynchronous).
  virtual void replay() = 0;
};

/// Construction options of a backend (make_backend).
struct BackendOptions {
  int device_index = 0;     ///< CUDA ordinal (--device cuda:N); ignored by CPU backends
  bool allow_tf32 = true;   ///< f32 convolutions and GEMMs may use TF32 tensor cores (--no-tf32)
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "ref", "onednn", "cuda".
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  /// Whether `op` runs on this backend with activations of `dtype` in `layout`.
  virtual bool supports(Op op, DType dtype, Layout layout) const = 0;

  /// Allocate an uninitialised tensor on this backend's device (64-byte aligned on CPU).
  virtual Tensor alloc(std::vector<int64_t> shape, DType dtype, Layout layout = Layout::NCHW) = 0;
  /// Copy src into dst: same logical shape; may change layout (4-D) and cross host/device; dtype
  /// conversion f32<->f16/bf16 where supported. Throws on shape mismatch.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  /// dst = 0.
  virtual void zero(Tensor& dst) = 0;
  /// Wait until all work queued on this backend is done (no-op on synchronous CPU backends).
  virtual void synchronize() = 0;
  /// The backend's native stream handle (cudaStream_t on CUDA) for libraries that enqueue work
  /// in its order (NCCL); nullptr on host backends.
  virtual void* native_stream() const { return nullptr; }
  /// Device memory in use, in bytes (CUDA: cudaMemGetInfo's total - free, i.e. what the GPU has
  /// allocated for every process, the CUDA context and library handles included); -1 on host
  /// backends.
  virtual int64_t device_memory_used_bytes() const { return -1; }
  /// What the backend runs on and with, as (key, value) pairs for benchmark records: oneDNN:
  /// {"onednn", version}; CUDA: {"gpu", name}, {"gpu_memory_bytes"}, {"driver"}, {"cuda_runtime"},
  /// {"cudnn"}, {"cublaslt"} (versions as "major.minor.patch"). Never throws.
  virtual std::vector<std::pair<std::string, std::string>> environment() const { return {}; }
  /// Host memory that copy() moves to and from the device fastest and asynchronously (pinned
  /// memory on CUDA). CPU backends return Tensor::empty.
  virtual Tensor alloc_host(std::vector<int64_t> shape, DType dtype,
                            Layout layout = Layout::NCHW) {
    return Tensor::empty(std::move(shape), dtype, layout);
  }
  /// Input upload that overlaps compute: copies the host tensor `src` (same shape and dtype as
  /// dst) into the device tensor `dst` on a side stream, after the work that read dst before
  /// the last release_input(dst) is done; work queued afterwards waits for the copy. Pageable
  /// `src` is staged through pinned memory and may be reused as soon as this returns; pinned
  /// `src` (alloc_host: the data loader's batches) is copied from directly, and the backend
  /// keeps a reference to its storage until the copy has run (the next upload into dst, or
  /// forget_input): do not write into it before then (a batch pool never reuses a storage
  /// someone still holds). CPU backends: copy(src, dst).
  virtual void upload_input(const Tensor& src, Tensor& dst) { copy(src, dst); }
  /// Marks that the work queued so far is the last to read `dst` before the next upload_input
  /// into it (double-buffered inputs). CPU backends: no-op.
  virtual void release_input(const Tensor& dst) {}
  /// `dst` will not be uploaded into again (its owner is going away): frees what upload_input
  /// keeps for it (CUDA: pinned staging and events), after its last upload completed.
  virtual void forget_input(const Tensor& dst) {}
  /// Records the backend work that fn() queues, without running it, and returns it as a Graph
  /// to replay (CUDA stream capture). fn must not allocate, synchronise or read device memory
  /// on the host (run the same work once eagerly first so that every cached algorithm, plan and
  /// workspace exists). Returns nullptr, without calling fn, when the backend cannot record
  /// (CPU backends). Throws rn50::Error when recording fails.
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& fn) { return nullptr; }
  /// Marks the start (true) or the end (false) of a timed region for an external profiler:
  /// CUDA calls cudaProfilerStart / cudaProfilerStop, the range that `nsys
  /// --capture-range=cudaProfilerApi` and tools/ktrace (KTRACE_RANGE=profiler) record; no-op on
  /// other backends. The benchmarks call it around their measured steps, the device idle.
  virtual void profiler_range(bool start) {}

  /// The memory layout this backend wants conv weights (and their gradients) in, given the
  /// activation layout: NCHW (= OIHW) on CPU backends; the activation layout on CUDA (cuDNN's
  /// tensor-core kernels want KRSC filters with NHWC activations). Every backend accepts both.
  virtual Layout preferred_weight_layout(Layout activation_layout) const { return Layout::NCHW; }

  // ---- convolution: x (N,C,H,W), w (K,C,R,S), y (N,K,OH,OW). w and dw are 4-D tensors in
  // either layout: NCHW = OIHW (torchvision) or NHWC = KRSC (see preferred_weight_layout). ----
  virtual void conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) = 0;
  /// Inference convolution with a fused epilogue (a folded BatchNorm's shift, the residual
  /// shortcut and ReLU; cudnnConvolutionBiasActivationForward, oneDNN's post-ops):
  ///   y = act(conv(x, w) + bias[k] + z),  act = max(., 0) when relu, else the identity.
  /// bias: (K) in y's dtype; z: undefined (no residual) or y's shape, dtype and layout; y may
  /// not alias x or z. The result is rounded once to y's dtype where the backend can (ref),
  /// else after the f32 accumulation (CUDA: the epilogue runs on the f32 accumulator).
  /// Backends without it (supports(Op::conv_bias_act, ...) false) throw rn50::Error.
  virtual void conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                                   const Tensor& bias, const Tensor& z, bool relu, Tensor& y);
  /// dx = conv_transpose(dy, w): the gradient w.r.t. x.
  virtual void conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                               Tensor& dx) = 0;
  /// dw = correlation of x and dy summed over the batch: the gradient w.r.t. w (overwritten).
  virtual void conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                                  Tensor& dw) = 0;

  // ---- batch normalisation: x, y (N,C,H,W); gamma, beta, running_*, save_* f32 (C) ----
  /// Training forward: writes y, save_mean (batch mean) and save_var (biased batch variance), and
  /// updates running_mean / running_var in place (see BatchNormParams).
  virtual void batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                                   Tensor& y, Tensor& save_mean, Tensor& save_var) = 0;
  /// Training forward of a block's last BatchNorm fused with the residual join after it:
  ///   y = max(BN(x) + residual, 0)
  /// with BN's statistics written and updated as by batchnorm_fwd_train (p.relu is ignored: the
  /// ReLU follows the add). residual, y: x's shape, dtype and layout; y may not alias x or
  /// residual. A backend whose supports(Op::batchnorm_add_relu, ...) is true does it in one
  /// pass over y, rounding once to the dtype (the separate ops round BN(x) first); the default
  /// runs batchnorm_fwd_train into y, then add_relu_fwd(y, residual, y). The training schedule
  /// uses it only where supports() says so (src/model/schedule.cpp).
  virtual void batchnorm_add_relu_fwd_train(const BatchNormParams& p, const Tensor& x,
                                            const Tensor& residual, const Tensor& gamma,
                                            const Tensor& beta, Tensor& running_mean,
                                            Tensor& running_var, Tensor& y, Tensor& save_mean,
                                            Tensor& save_var);
  /// Inference forward with running statistics.
  virtual void batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, const Tensor& running_mean,
                                   const Tensor& running_var, Tensor& y) = 0;
  /// Backward of the training forward. y is the forward output (used for the ReLU mask when
  /// p.relu; may be undefined otherwise). Writes dx, dgamma, dbeta (overwritten).
  virtual void batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                             const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_var, Tensor& dx, Tensor& dgamma,
                             Tensor& dbeta) = 0;
  /// Backward of batchnorm_add_relu_fwd_train: the join's ReLU backward and the BN's in one.
  ///   dres = y > 0 ? g1 + g2 : 0   (g2 undefined: y > 0 ? g1 : 0), rounded once to the dtype
  /// is the gradient of both join inputs: written for the residual's producer, and the dy of
  /// batchnorm_bwd (without ReLU) on x, which writes dx, dgamma, dbeta. y is the join's output
  /// (the fused forward's y); g1, g2 (the join output's gradient, in one or two parts), dres,
  /// dx: x's shape, dtype and layout. dres may alias g1 (in place); dx may not alias the others.
  /// A backend whose supports(Op::batchnorm_add_relu, ...) is true reads g1 and g2 once and
  /// dres once more (the default reads dres twice more); its bits equal the default's, which
  /// runs add_relu_bwd (or relu_bwd) into dres, then batchnorm_bwd.
  virtual void batchnorm_add_relu_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                      const Tensor& g1, const Tensor& g2, const Tensor& gamma,
                                      const Tensor& save_mean, const Tensor& save_var,
                                      Tensor& dres, Tensor& dx, Tensor& dgamma, Tensor& dbeta);

  // ---- elementwise (any shape; 4-D operands may differ in layout) ----
  virtual void relu_fwd(const Tensor& x, Tensor& y) = 0;
  /// dx = dy * (y > 0), y the forward output.
  virtual void relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  /// y = a + b.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  /// y = max(a + b, 0): the residual join of a block. Its backward is relu_bwd on y.
  virtual void add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  /// dx = y > 0 ? g1 + g2 : 0: relu_bwd of a join whose output gradient arrives in two parts (a
  /// residual block's input feeds its branch and its shortcut), fused; equal to add(g1, g2, t)
  /// then relu_bwd(y, t, dx), the sum rounded once to the dtype. One logical shape and dtype;
  /// dx may alias g1 or g2 when their layouts agree.
  virtual void add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) = 0;

  // ---- pooling ----
  /// y (N,C,OH,OW) = max over windows of x (N,C,H,W).
  virtual void maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) = 0;
  /// dx: each dy routed to the first (row-major in the window) maximum of its window, summed.
  virtual void maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                             const Tensor& dy, Tensor& dx) = 0;
  /// y (N,C) = mean of x (N,C,H,W) over H, W.
  virtual void global_avgpool_fwd(const Tensor& x, Tensor& y) = 0;
  /// dx (N,C,H,W) = dy (N,C) / (H*W) broadcast.
  virtual void global_avgpool_bwd(const Tensor& dy, Tensor& dx) = 0;

  // ---- fully connected: x (N,C), w (K,C), b (K), y (N,K); y = x w^T + b (torch Linear) ----
  virtual void linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  /// dx = dy w; dw = dy^T x; db = sum_n dy (all overwritten). dx may be undefined (skipped).
  virtual void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                          Tensor& dw, Tensor& db) = 0;

  // ---- loss: softmax cross-entropy with label smoothing eps over K classes (torch
  // CrossEntropyLoss(label_smoothing=eps), mean reduction). Target distribution
  // q = (1 - eps) * onehot(label) + eps / K. logits (N,K) f32, labels i32 (N).
  /// Writes loss (f32, shape {1}: mean over the batch) and probs (N,K) = softmax(logits).
  virtual void softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing,
                                Tensor& loss, Tensor& probs) = 0;
  /// dlogits = scale * (probs - q) / N. `scale` is the AMP loss scale (1 without AMP); when
  /// `state` (a step state, see StepState) is defined, scale is further multiplied on the device
  /// by state[loss_scale].
  virtual void softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing,
                                float scale, Tensor& dlogits, const Tensor& state) = 0;

  /// Mixup targets (Zhang et al. 2018, "mixup: Beyond Empirical Risk Minimization"; DLE
  /// --mixup): as softmax_xent_fwd, with row n's target
  ///   lam * q(labels[n]) + (1 - lam) * q(labels_b[n]),  lam = state[StepState::mixup_lambda]
  /// read on the device, i.e. loss = lam * CE(labels) + (1 - lam) * CE(labels_b), both
  /// label-smoothed (the loss is linear in the target). labels_b: i32 (N), the labels of the
  /// samples each row was mixed with. state: a step state (required).
  virtual void softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels,
                                      const Tensor& labels_b, float smoothing, const Tensor& state,
                                      Tensor& loss, Tensor& probs) = 0;
  /// dlogits = scale * state[loss_scale] * (probs - q) / N with the mixup target q above.
  virtual void softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels,
                                      const Tensor& labels_b, float smoothing, float scale,
                                      Tensor& dlogits, const Tensor& state) = 0;

  // ---- metrics ----
  /// Top-1 and top-5 hits of a batch: hits (f32 {2} on the device) is overwritten with the
  /// number of rows of logits (N,K) f32 whose label (i32 (N)) is among the 1, resp. 5, highest
  /// logits. A label's rank = the classes with a larger logit + those with an equal logit and a
  /// lower index (a stable descending sort, as torch.topk on distinct values); a NaN logit of
  /// the label ranks last (never a hit), NaNs of other classes never outrank it. Exact for
  /// N < 2^24. Labels outside [0, K) never count as hits (host backends throw instead).
  virtual void topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) = 0;

  // ---- input ----
  /// src: u8 (N,3,H,W) in Layout::NHWC (decoded pixels, RGB). dst: (N,3,H,W) f32 (or the compute
  /// dtype) in dst's layout, dst = (src / 255 - mean[c]) / std[c]; or (N,4,H,W), whose fourth
  /// channel is written 0 (DLE --image-shape 4,H,W).
  virtual void normalize_u8(const Tensor& src, const std::array<float, 3>& mean,
                            const std::array<float, 3>& std, Tensor& dst) = 0;

  /// Mixup of a batch with itself in reversed order (DLE --mixup), in place:
  ///   x[n] = lam * x[n] + (1 - lam) * x[N-1-n]  for every n,  lam = state[StepState::mixup_lambda]
  /// read on the device (the pairs (n, N-1-n) are formed from the values before the call; the
  /// middle sample of an odd batch is unchanged). x: (N,C,H,W) in either layout, the compute
  /// dtype (the sum is formed in f32, f64 for f64 tensors, and rounded once). Runs after
  /// normalize_u8, so the mixed images are what the network sees.
  virtual void mixup_images(Tensor& x, const Tensor& state) = 0;

  // ---- quantization-aware training (--qat; the arithmetic: src/core/fake_quant.h) ----
  /// Fake quantization of an activation, per tensor, 8 bits symmetric, with DLE's moving-average
  /// abs-max range. qstate: f32 {fake_quant::state_size} on the device ({amax, state, accum,
  /// scratch}). update (a training forward): the range is first updated from max |x| of this
  /// batch (state = 0.9 state + 1, accum = 0.9 accum + max|x|, amax = accum / state; unchanged
  /// when max|x| is not finite); then, with s = amax / 127 read on the device,
  ///   y = clamp(nearbyint(x / s), -127, 127) * s   (torch.fake_quantize_per_tensor_affine)
  /// x, y: the same shape, dtype (f32/f16/bf16) and layout; y may be x (in place).
  virtual void fake_quant_act(const Tensor& x, Tensor& qstate, bool update, Tensor& y) = 0;
  /// Fake quantization of a weight per output channel (dim 0), 8 bits symmetric:
  /// s_k = max |w[k, ...]| / 127, y[k, ...] = clamp(nearbyint(w / s_k), -127, 127) * s_k
  /// (torch.fake_quantize_per_channel_affine; y[k] = 0 when w[k] is all zero). w: f32 with the
  /// output channel outermost (OIHW, KRSC or (classes, C)); y: the same shape and layout in f32
  /// or the compute dtype (the fake-quantized f32 value rounded once).
  virtual void fake_quant_weight(const Tensor& w, Tensor& y) = 0;

  // ---- optimiser over whole slabs (1-D f32 tensors of equal length) ----
  virtual void sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                          Tensor& momentum_buf) = 0;
  /// Whether sgd_update takes bf16 `grads` with f32 params and momentum (each gradient widened
  /// exactly to f32, then the update above, so the result equals that of the widened f32
  /// slab). CPU AMP's optimiser then reads the conv/fc gradients in the bf16 slab backward
  /// wrote, without converting them into the f32 slab first (ResNet::set_grads_in_compute_slab).
  virtual bool sgd_takes_bf16_grads() const { return false; }

  // ---- AMP (dynamic loss scaling; state is a step state, see StepState) ----
  /// Sets state[found_inf] = 1 when any element of x (f32/f16/bf16, any shape) is inf or NaN;
  /// leaves it unchanged otherwise (several slabs may be checked in a row).
  virtual void check_finite(const Tensor& x, Tensor& state) = 0;
  /// End of a step, torch.cuda.amp.GradScaler.update(): when state[found_inf] != 0:
  /// skipped_steps += 1, growth_tracker = 0 and (if p.dynamic) loss_scale *= backoff_factor;
  /// else growth_tracker += 1, and when it reaches growth_interval (p.dynamic only):
  /// loss_scale *= growth_factor (unless that overflows to inf: the scale is then kept, as
  /// torch's _amp_update_scale_), growth_tracker = 0. Then inv_loss_scale = 1 / loss_scale and
  /// found_inf = 0.
  virtual void update_loss_scale(const LossScaleParams& p, Tensor& state) = 0;
  /// Start of a step: the step's host inputs without a copy. `ring`: f32 (R, 2) host memory
  /// from alloc_host() (pinned, and so readable by the device's kernels under unified
  /// addressing: CUDA Programming Guide, "Unified Virtual Address Space"), row r = {lr, mixup
  /// lambda} of a step, written by the host before it queues that step. With
  /// r = state[ring_pos]: state[lr] = ring[r][0], state[mixup_lambda] = ring[r][1],
  /// state[ring_pos] = (r + 1) % R. The host must not rewrite a row before the step that reads
  /// it has run (TrainStep keeps at most R steps in flight). Default (CPU backends): on the
  /// host (core/step_state.h). Throws rn50::Error when ring is not host f32 (R, 2) or the
  /// state is not a step state of this backend.
  virtual void load_step_inputs(const Tensor& ring, Tensor& state);
};

/// Backends by name: "ref" and "onednn" always (CPU); "cuda" when built with RN50_CUDA.
/// Throws rn50::Error naming the backend when unknown, not built, or (cuda) when no GPU is
/// usable (the message gives the CUDA error).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opt = {});
/// Names of the backends compiled into this build AND usable on this machine, e.g.
/// {"ref", "onednn"} or {"ref", "onednn", "cuda"} (cuda only when a GPU is present).
std::vector<std::string> available_backends();
/// Names of the backends compiled into this build ("cuda" even without a GPU).
std::vector<std::string> compiled_backends();
/// A resolved --device.
struct DeviceChoice {
  std::string backend;  ///< "onednn" or "cuda"
  int index = 0;        ///< CUDA ordinal
  std::string name;     ///< "cpu" or "cuda:N"
};
/// Parses --device: "auto" -> cuda:0 when a GPU is usable, else cpu; "cpu" -> backend "onednn";
/// "cuda" / "cuda:N" -> backend "cuda" on device N. Throws rn50::Error naming --device and the
/// value when it is malformed, when CUDA is not built or no GPU is usable (with the reason), or
/// when N is not below the number of GPUs.
DeviceChoice resolve_device(const std::string& device);

/// Number of usable CUDA devices: 0 when the CUDA backend is not built or no GPU/driver is
/// present (never throws).
int cuda_device_count();
/// Why CUDA is unusable, e.g. "not built (configure with -DRN50_CUDA=ON)" or the CUDA error of
/// cudaGetDeviceCount; empty when cuda_device_count() > 0.
std::string cuda_unavailable_reason();

}  // namespace rn50
