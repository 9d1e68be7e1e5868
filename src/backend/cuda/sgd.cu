// rn50 CUDA backend: the optimiser and the AMP loss-scale ops (see SgdParams, StepState and
// LossScaleParams in rn50/backend.h; the reference is src/backend/ref/sgd.cpp).
//  * sgd_update: torch.optim.SGD (dampening 0, nesterov false) over f32 1-D slabs, in torch's
//    order with every operation rounded separately (__fmul_rn / __fadd_rn: no FMA contraction):
//        g = grad * grad_scale;  g = g + weight_decay * p  (i < decay_count)
//        buf = momentum * buf + g;  p = p - lr * buf
//    With a step state, lr = state[lr], grad_scale = state[inv_loss_scale], and the whole update
//    is skipped when state[found_inf] != 0 (GradScaler.step skipping optimizer.step()). Then, in
//    the same pass, the optional mask (p = buf = 0 where mask == 0) and compute copy (p rounded
//    to f16/bf16, the next AMP step's weights). One fused grid-stride kernel; float4 packs when
//    the three f32 slabs are 16-byte aligned. F16 slabs (pure fp16, --use-pure-fp16): the same
//    update in f32 per element, p and buf rounded to f16 when stored (sgd_half_kernel).
//  * check_finite: state[found_inf] = 1 when any element of x (f32/f16/bf16, any shape) is inf
//    or NaN (an all-ones exponent field), else unchanged. 16-byte vector loads when aligned; one
//    store per warp that saw a bad value (several warps may store 1: a benign race).
//  * update_loss_scale: one thread, torch.cuda.amp.GradScaler.update() (torch's
//    _amp_update_scale_: a grown scale is only kept when it is finite), then
//    inv_loss_scale = 1 / loss_scale and found_inf = 0.
//  * load_step_inputs: one thread copies the ring row state[ring_pos] (lr, mixup lambda) into
//    the step state and advances ring_pos: the step's host inputs read by the step's own first
//    kernel from pinned host memory, so a replayed step needs no copy (core/step_state.cpp is
//    the host reference).
#include "backend/cuda/kernels_common.cuh"

#include <type_traits>

#include "core/step_state.h"

namespace rn50::cuda {

namespace {

using namespace kern;

struct SgdArgs {
  float lr, grad_scale, momentum, weight_decay;
  int64_t decay_count;
};

/// One element of the SGD update (torch order, each operation rounded).
__device__ __forceinline__ void sgd_one(float& w, float g, float& b, bool decay,
                                        const SgdArgs& a) {
  float d = __fmul_rn(g, a.grad_scale);
  if (decay) d = __fadd_rn(d, __fmul_rn(a.weight_decay, w));
  b = __fadd_rn(__fmul_rn(a.momentum, b), d);
  w = __fsub_rn(w, __fmul_rn(a.lr, b));
}

/// After the update of element i: the mask (p = buf = 0 where mask[i] == 0), then the compute
/// copy (p rounded to C). C = float means no compute copy.
template <class C>
__device__ __forceinline__ void sgd_after(float& w, float& b, int64_t i,
                                          const uint8_t* __restrict__ mask, C* __restrict__ copy) {
  if (mask && mask[i] == 0) w = 0.f, b = 0.f;
  if constexpr (!std::is_same_v<C, float>) copy[i] = from_float<C>(w);
}

/// V = 4: float4 packs (all pointers 16-byte aligned) then a scalar tail; V = 1: scalar.
template <int V, class C>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ b,
               int64_t n, SgdArgs a, const float* __restrict__ state,
               const uint8_t* __restrict__ mask, C* __restrict__ copy) {
  if (state) {
    if (state[StepState::found_inf] != 0.f) return;  // overflowing AMP step: skip
    a.lr = state[StepState::lr];
    a.grad_scale = state[StepState::inv_loss_scale];
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t npack = n / V;
  if constexpr (V == 4) {
    for (int64_t p = tid; p < npack; p += stride) {
      float4 wv = reinterpret_cast<const float4*>(w)[p];
      const float4 gv = reinterpret_cast<const float4*>(g)[p];
      float4 bv = reinterpret_cast<const float4*>(b)[p];
      const int64_t i = p * 4;
      sgd_one(wv.x, gv.x, bv.x, i < a.decay_count, a);
      sgd_one(wv.y, gv.y, bv.y, i + 1 < a.decay_count, a);
      sgd_one(wv.z, gv.z, bv.z, i + 2 < a.decay_count, a);
      sgd_one(wv.w, gv.w, bv.w, i + 3 < a.decay_count, a);
      sgd_after(wv.x, bv.x, i, mask, copy);
      sgd_after(wv.y, bv.y, i + 1, mask, copy);
      sgd_after(wv.z, bv.z, i + 2, mask, copy);
      sgd_after(wv.w, bv.w, i + 3, mask, copy);
      reinterpret_cast<float4*>(w)[p] = wv;
      reinterpret_cast<float4*>(b)[p] = bv;
    }
  }
  for (int64_t i = npack * V + tid; i < n; i += stride) {
    float wi = w[i], bi = b[i];
    sgd_one(wi, g[i], bi, i < a.decay_count, a);
    sgd_after(wi, bi, i, mask, copy);
    w[i] = wi;
    b[i] = bi;
  }
}

/// Pure fp16 slabs (__half): each element widened, updated in f32 as sgd_one (torch order, each
/// operation rounded), then p and buf rounded to f16 when stored; p takes the unrounded buf
/// (Paddle's momentum kernel with MT = float). Scalar loads: the f16 slabs are ranges of the
/// model's slab at any element offset.
__global__ void __launch_bounds__(kThreads)
    sgd_half_kernel(__half* __restrict__ w, const __half* __restrict__ g, __half* __restrict__ b,
                    int64_t n, SgdArgs a, const float* __restrict__ state,
                    const uint8_t* __restrict__ mask) {
  if (state) {
    if (state[StepState::found_inf] != 0.f) return;  // overflowing AMP step: skip
    a.lr = state[StepState::lr];
    a.grad_scale = state[StepState::inv_loss_scale];
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float wi = __half2float(w[i]), bi = __half2float(b[i]);
    sgd_one(wi, __half2float(g[i]), bi, i < a.decay_count, a);
    if (mask && mask[i] == 0) wi = 0.f, bi = 0.f;
    w[i] = __float2half_rn(wi);
    b[i] = __float2half_rn(bi);
  }
}

/// Whether the low 16 bits (or the 32 bits when MASK > 0xffff) of word hold a non-finite value.
template <uint32_t MASK>
__device__ __forceinline__ bool nonfinite(uint32_t word) {
  return (word & MASK) == MASK;
}

/// Non-finite check over n elements of U (uint32_t: f32 bits; uint16_t: f16/bf16 bits) whose
/// exponent field is MASK. VEC: 16-byte packs (x aligned) then a scalar tail.
template <class U, uint32_t MASK, bool VEC>
__global__ void __launch_bounds__(kThreads)
    check_finite_kernel(const U* __restrict__ x, int64_t n, float* __restrict__ state) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kPer = 16 / sizeof(U);
  const int64_t npack = VEC ? n / kPer : 0;
  bool bad = false;
  for (int64_t p = tid; p < npack; p += stride) {
    const uint4 v = reinterpret_cast<const uint4*>(x)[p];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (sizeof(U) == 4)
        bad |= nonfinite<MASK>(words[j]);
      else
        bad |= nonfinite<MASK>(words[j]) | nonfinite<MASK>(words[j] >> 16);
    }
  }
  for (int64_t i = npack * kPer + tid; i < n; i += stride)
    bad |= nonfinite<MASK>(static_cast<uint32_t>(x[i]));
  // Every thread of the (full) warp reaches this point.
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) state[StepState::found_inf] = 1.f;
}

__global__ void update_loss_scale_kernel(LossScaleParams p, float* __restrict__ s) {
  if (s[StepState::found_inf] != 0.f) {
    s[StepState::skipped_steps] += 1.f;
    s[StepState::growth_tracker] = 0.f;
    if (p.dynamic) s[StepState::loss_scale] *= p.backoff_factor;
  } else {
    const float successful = s[StepState::growth_tracker] + 1.f;
    if (p.dynamic && successful >= static_cast<float>(p.growth_interval)) {
      const float grown = s[StepState::loss_scale] * p.growth_factor;
      if (isfinite(grown)) s[StepState::loss_scale] = grown;
      s[StepState::growth_tracker] = 0.f;
    } else {
      s[StepState::growth_tracker] = successful;
    }
  }
  s[StepState::inv_loss_scale] = 1.f / s[StepState::loss_scale];
  s[StepState::found_inf] = 0.f;
}

/// Backend::load_step_inputs: ring f32 (rows, 2) in pinned host memory (read over the bus).
__global__ void load_step_inputs_kernel(const float* __restrict__ ring, int64_t rows,
                                        float* __restrict__ s) {
  int64_t r = static_cast<int64_t>(s[StepState::ring_pos]);
  if (r < 0 || r >= rows) r = 0;  // set_loss_scale wrote 0; nothing else writes the field
  s[StepState::lr] = ring[2 * r];
  s[StepState::mixup_lambda] = ring[2 * r + 1];
  s[StepState::ring_pos] = static_cast<float>((r + 1) % rows);
}

/// Checks a 1-D slab of length n and dtype dt.
void check_slab(const CudaBackend& be, const char* op, const char* name, const Tensor& t,
                int64_t n, DType dt) {
  be.check_device(op, name, t);
  RN50_CHECK(t.dtype() == dt && t.ndim() == 1 && t.dim(0) == n,
             "cuda {}: {} is {}, expected an {} 1-D slab of {} elements", op, name, t.str(),
             dtype_name(dt), n);
}

}  // namespace

void CudaBackend::sgd_update(const SgdParams& p, Tensor& params, const Tensor& grads,
                             Tensor& momentum_buf) {
  const char* op = "sgd_update";
  check_device(op, "params", params);
  const DType dt = params.dtype();
  RN50_CHECK((dt == DType::f32 || dt == DType::f16) && params.ndim() == 1,
             "cuda {}: params is {}, expected an F32 (or F16: pure fp16) 1-D slab", op,
             params.str());
  const int64_t n = params.numel();
  check_slab(*this, op, "grads", grads, n, dt);
  check_slab(*this, op, "momentum_buf", momentum_buf, n, dt);
  RN50_CHECK(p.decay_count >= 0 && p.decay_count <= n, "cuda {}: decay_count {} outside [0, {}]",
             op, p.decay_count, n);
  const float* st = nullptr;
  if (p.state.defined()) {
    check_state(*this, op, p.state);
    st = p.state.data_as<const float>();
  }
  check_sgd_extras("cuda sgd_update", p, n);
  if (p.mask.defined()) check_device(op, "mask", p.mask);
  if (p.compute_copy.defined()) check_device(op, "compute_copy", p.compute_copy);
  if (n == 0) return;
  const SgdArgs a{p.lr, p.grad_scale, p.momentum, p.weight_decay, p.decay_count};
  const uint8_t* mask = p.mask.defined() ? p.mask.data_as<const uint8_t>() : nullptr;
  if (dt == DType::f16) {
    RN50_CHECK(!p.compute_copy.defined(),
               "cuda {}: F16 slabs are the weights themselves (pure fp16): no compute_copy", op);
    sgd_half_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        static_cast<__half*>(params.data()), static_cast<const __half*>(grads.data()),
        static_cast<__half*>(momentum_buf.data()), n, a, st, mask);
    RN50_CUDA_LAUNCH_CHECK();
    return;
  }
  float* w = params.data_as<float>();
  const float* g = grads.data_as<const float>();
  float* b = momentum_buf.data_as<float>();
  const bool vec = aligned16(w) && aligned16(g) && aligned16(b) && n >= 4;
  auto launch = [&](auto* copy) {
    if (vec)
      sgd_kernel<4><<<grid_for(n / 4, kThreads), kThreads, 0, stream()>>>(w, g, b, n, a, st,
                                                                         mask, copy);
    else
      sgd_kernel<1><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(w, g, b, n, a, st, mask,
                                                                     copy);
  };
  if (!p.compute_copy.defined())
    launch(static_cast<float*>(nullptr));
  else if (p.compute_copy.dtype() == DType::f16)
    launch(static_cast<__half*>(p.compute_copy.data()));
  else
    launch(static_cast<__nv_bfloat16*>(p.compute_copy.data()));
  RN50_CUDA_LAUNCH_CHECK();
}

void CudaBackend::check_finite(const Tensor& x, Tensor& state) {
  const char* op = "check_finite";
  kern::check_float_tensor(*this, op, "x", x);
  check_state(*this, op, state);
  const int64_t n = x.numel();
  if (n == 0) return;
  float* st = state.data_as<float>();
  const bool vec = aligned16(x.data());
  const int per = x.dtype() == DType::f32 ? 4 : 8;
  const unsigned grid = grid_for(vec ? (n + per - 1) / per : n, kThreads, 2048);
  auto launch = [&](auto utag, auto mask) {
    using U = typename decltype(utag)::type;
    constexpr uint32_t M = decltype(mask)::value;
    const U* xp = static_cast<const U*>(x.data());
    if (vec)
      check_finite_kernel<U, M, true><<<grid, kThreads, 0, stream()>>>(xp, n, st);
    else
      check_finite_kernel<U, M, false><<<grid, kThreads, 0, stream()>>>(xp, n, st);
  };
  switch (x.dtype()) {
    case DType::f32:
      launch(Tag<uint32_t>{}, std::integral_constant<uint32_t, 0x7f800000u>{});
      break;
    case DType::f16:
      launch(Tag<uint16_t>{}, std::integral_constant<uint32_t, 0x7c00u>{});
      break;
    default:  // bf16 (check_float_tensor admits f32, f16, bf16 only)
      launch(Tag<uint16_t>{}, std::integral_constant<uint32_t, 0x7f80u>{});
      break;
  }
  RN50_CUDA_LAUNCH_CHECK();
}

void CudaBackend::update_loss_scale(const LossScaleParams& p, Tensor& state) {
  const char* op = "update_loss_scale";
  check_state(*this, op, state);
  RN50_CHECK(p.growth_interval >= 1 && p.growth_factor > 0.f && p.backoff_factor > 0.f,
             "cuda {}: invalid loss-scale parameters (growth x{} every {} steps, backoff x{})", op,
             p.growth_factor, p.growth_interval, p.backoff_factor);
  update_loss_scale_kernel<<<1, 1, 0, stream()>>>(p, state.data_as<float>());
  RN50_CUDA_LAUNCH_CHECK();
}

// The ring is host memory the kernel reads at the same address (pinned memory under unified
// addressing is device-accessible: CUDA Runtime API, "Unified Addressing"); pageable memory
// would fault, so it is refused.
void CudaBackend::load_step_inputs(const Tensor& ring, Tensor& state) {
  const char* op = "load_step_inputs";
  check_step_input_ring(op, ring);
  RN50_CHECK(is_pinned(ring.data()),
             "cuda {}: the step-input ring {} must be pinned host memory (alloc_host), which "
             "kernels read directly",
             op, ring.str());
  check_state(*this, op, state);
  load_step_inputs_kernel<<<1, 1, 0, stream()>>>(ring.data_as<const float>(), ring.dim(0),
                                                 state.data_as<float>());
  RN50_CUDA_LAUNCH_CHECK();
}

}  // namespace rn50::cuda
