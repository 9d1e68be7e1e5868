// rn50 CUDA backend: batch normalisation, torch.nn.BatchNorm2d semantics (see BatchNormParams in
// rn50/backend.h and the reference src/backend/ref/batchnorm.cpp), optionally fused with ReLU.
//
// Tensors: x, y, dy, dx (N,C,H,W), one dtype (f32, f16 or bf16) and one layout (NCHW or NHWC);
// gamma, beta, running_*, save_*, dgamma, dbeta f32 (C). Per channel c over M = N*H*W values:
//   training forward  mean = sum x / M, var = sum (x - mean)^2 / M (biased),
//                     y = (x - mean) * (gamma / sqrt(var + eps)) + beta  [max(y, 0) if relu],
//                     running_mean = (1 - momentum) * running_mean + momentum * mean,
//                     running_var  = (1 - momentum) * running_var + momentum * var * M / (M - 1)
//   inference         y = (x - running_mean) * (gamma / sqrt(running_var + eps)) + beta [relu]
//   backward          g = relu ? (y > 0 ? dy : 0) : dy, invstd = 1 / sqrt(save_var + eps),
//                     dbeta = sum g, dgamma = invstd * sum g * (x - mean),
//                     dx = gamma * invstd / M * (M * g - dbeta - xhat * dgamma)
//                        = a * g - e * (x - mean) - f   with a = gamma * invstd,
//                          e = a * dgamma * invstd / M, f = a * dbeta / M
//                     (torch's batch_norm_backward, training mode).
//
// Kernels (all on the backend stream; per-channel reductions are deterministic: no atomics,
// a fixed reduction tree for a given shape):
//  1. stats: every block reduces a slice of rows for a range of channels and writes one partial
//     per (block row, channel) into bn_scratch. Forward partials are (count, mean, M2) from a
//     per-thread Welford update (float), merged in the block with Chan's formula; backward
//     partials are the float sums (sum g, sum g * (x - mean)).
//       NHWC: x seen as an (M, C) row-major matrix; threads along C (16-byte packs of 4 floats /
//             8 halves when C allows), block rows along M: coalesced, no index division.
//       NCHW: one block column per channel; threads walk the channel's M values (one 32-bit
//             division per element).
//  2. finalize: one warp per channel combines the G partials in double (Chan merge / sums),
//     writes save_mean/save_var and the running statistics (forward) or dgamma/dbeta
//     (backward), and the per-channel coefficients of the elementwise pass into bn_scratch.
//  3. apply: a flat grid-stride pass over the elements (16-byte packs when the layout allows),
//     computing y (forward) or dx (backward) from the per-channel coefficients.
// The fused residual join (batchnorm_add_relu_*, RN50_CUDA_BN_JOIN=fused; its entry points are
// in batchnorm_join.cpp) uses the same three kernels: the forward apply adds the residual
// before the ReLU; the backward statistics pass forms the join's gradient
// g = y > 0 ? g1 + g2 : 0, writes it rounded as dres and sums the rounded values, and the apply
// pass reads dres as dy.
// With RN50_CUDA_BN=cudnn, bn_forward_train and bn_backward hand the configurations cuDNN takes
// (CudaBackend::bn_cudnn_refusal: NHWC f16/bf16, C % 4 == 0) to batchnorm_cudnn.cpp after the
// argument checks here; bn_var_from_inv_std is its kernel that fills save_var.
// bn_scratch holds the partials and the coefficients; its size depends on C only (see scratch()),
// it is grown on the first call with a larger C and then reused: captured graphs never allocate.
#include "backend/cuda/kernels_common.cuh"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

namespace rn50::cuda {

namespace {

using namespace kern;

/// Maximum number of row slices (partials per channel) of the stats kernels.
constexpr uint32_t kMaxSlices = 1024;
/// Target number of rows (NHWC) or values (NCHW) each thread reduces.
constexpr uint32_t kRowsPerThread = 16;
/// Finalize kernels: channels (warps) per block.
constexpr int kFinalizeWarps = 8;

#include "backend/cuda/batchnorm_kernels.inc"  // the kernels: in this namespace

// ------------------------------------------------------------------ launch configuration

uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

/// Launch shape of the NHWC stats kernels for C channels in packs of V and M rows.
struct NhwcStatsCfg {
  dim3 grid, block;
  uint32_t slices = 1;  // gridDim.y: partials per channel
};
NhwcStatsCfg nhwc_stats_cfg(uint32_t M, uint32_t C, int V) {
  const uint32_t packs = C / V;
  const uint32_t tx = std::min<uint32_t>(32, next_pow2(packs));
  const uint32_t ty = kThreads / tx;
  NhwcStatsCfg cfg;
  cfg.slices = std::clamp<uint32_t>(ceil_div(M, uint64_t{ty} * kRowsPerThread), 1, kMaxSlices);
  cfg.block = dim3(tx, ty);
  cfg.grid = dim3(ceil_div(packs, tx), cfg.slices);
  return cfg;
}

/// Slices (gridDim.y) of the NCHW stats kernels.
uint32_t nchw_slices(uint32_t M) {
  return std::clamp<uint32_t>(ceil_div(M, uint64_t{kThreads} * kRowsPerThread), 1, kMaxSlices);
}

/// Elements per pack of the apply kernels for a tensor of dtype T: 16-byte packs when every
/// pointer is aligned and packs stay inside one channel run, else 1.
template <class T>
int apply_vec(bool nhwc, uint32_t C, uint32_t HW, std::initializer_list<const void*> ptrs) {
  constexpr int V = kVec16<T>;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return 1;
  return (nhwc ? C % V == 0 : HW % V == 0) ? V : 1;
}

/// The grid of an NHWC apply pass with fixed channels (the kernels' FIXED): at most `cap` blocks
/// (0: not asked for), rounded up to a multiple of C / gcd(C, kThreads * V) blocks so that the
/// stride in elements is a multiple of C. 0 when not asked for or no such grid fits.
unsigned fixed_channel_grid(uint64_t npack, int V, uint32_t C, unsigned cap) {
  if (cap == 0 || C == 0) return 0;
  const uint64_t per_block = static_cast<uint64_t>(kThreads) * V;
  const uint64_t q = C / std::gcd<uint64_t>(C, per_block);
  uint64_t g = std::min<uint64_t>(ceil_div(npack, kThreads), cap);
  g = (g + q - 1) / q * q;
  return g <= 65535ULL * 8 ? static_cast<unsigned>(g) : 0;
}

/// bn_scratch for C channels; the callers lay out `partial_planes` planes of slices * C partials
/// followed by `coeff_planes` planes of C coefficients in it. Every batchnorm op asks for the
/// same size, that of the largest layout (3 planes of kMaxSlices * C partials + 4 coefficient
/// planes), which depends on C only: the buffer stops growing once the largest C of the
/// network has been seen in the first (eager) step, whatever the batch size of later calls, so
/// it is never reallocated under a captured graph that recorded its address.
float* scratch(DeviceBuffer& buf, uint32_t C) {
  const size_t floats = (3 * static_cast<size_t>(kMaxSlices) + 4) * C;
  return static_cast<float*>(buf.ensure(floats * sizeof(float)));
}

unsigned finalize_grid(uint32_t C) { return ceil_div(C, kFinalizeWarps); }

/// Forward apply launch (dispatches pack width, layout).
/// fixed_cap: CudaBackend::bn_fixed_channel_blocks() (0: per-element coefficients).
template <class T>
void launch_fwd_apply(cudaStream_t st, const T* x, const T* res, T* y, uint32_t n, uint32_t C,
                      uint32_t HW, bool nhwc, const float* mean, const float* scale,
                      const float* shift, bool relu, unsigned fixed_cap) {
  constexpr int VV = kVec16<T>;
  const int V = apply_vec<T>(nhwc, C, HW, {x, res, y});
  const unsigned fixed = nhwc ? fixed_channel_grid(n / V, V, C, fixed_cap) : 0;
  const unsigned grid = fixed ? fixed : grid_for(n / V, kThreads);
  auto launch = [&](auto vtag, auto ltag, auto ftag) {
    bn_fwd_apply<T, decltype(vtag)::value, decltype(ltag)::value, decltype(ftag)::value>
        <<<grid, kThreads, 0, st>>>(x, res, y, n, C, HW, mean, scale, shift, relu);
  };
  using VecT = std::integral_constant<int, VV>;
  using One = std::integral_constant<int, 1>;
  using Yes = std::true_type;
  using No = std::false_type;
  if (V == VV) {
    if (nhwc)
      fixed ? launch(VecT{}, Yes{}, Yes{}) : launch(VecT{}, Yes{}, No{});
    else
      launch(VecT{}, No{}, No{});
  } else {
    if (nhwc)
      fixed ? launch(One{}, Yes{}, Yes{}) : launch(One{}, Yes{}, No{});
    else
      launch(One{}, No{}, No{});
  }
  RN50_CUDA_LAUNCH_CHECK();
}

/// var[c] = max(1 / inv_std[c]^2 - eps, 0) in double (CudaBackend::bn_var_from_inv_std).
__global__ void bn_var_from_inv_std_kernel(const float* __restrict__ inv_std, double eps,
                                           uint32_t C, float* __restrict__ var) {
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double s = inv_std[c];
  const double v = 1.0 / (s * s) - eps;
  var[c] = static_cast<float>(v > 0.0 ? v : 0.0);
}

}  // namespace

void CudaBackend::bn_var_from_inv_std(const float* inv_std, double eps, uint32_t C, float* var) {
  if (C == 0) return;
  bn_var_from_inv_std_kernel<<<ceil_div(C, kThreads), kThreads, 0, stream()>>>(inv_std, eps, C,
                                                                               var);
  RN50_CUDA_LAUNCH_CHECK();
}

// ------------------------------------------------------------------ ops

/// Checks the activations of a batchnorm op: 4-D, float dtype, one shape, dtype and layout.
void CudaBackend::check_bn_acts(
    const char* op,
    std::initializer_list<std::pair<const char*, const Tensor*>> acts) const {
  const auto& [n0, t0] = *acts.begin();
  for (const auto& [name, t] : acts) {
    check_float4(*this, op, name, *t);
    RN50_CHECK(t->same_shape(*t0) && t->dtype() == t0->dtype() && t->layout() == t0->layout(),
               "cuda {}: {} {} and {} {} must have the same shape, dtype and layout", op, n0,
               t0->str(), name, t->str());
  }
}

void CudaBackend::batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      Tensor& running_mean, Tensor& running_var, Tensor& y,
                                      Tensor& save_mean, Tensor& save_var) {
  const char* op = "batchnorm_fwd_train";
  check_bn_acts(op, {{"x", &x}, {"y", &y}});
  bn_forward_train(op, p, p.relu, x, Tensor(), gamma, beta, running_mean, running_var, y,
                   save_mean, save_var);
}

void CudaBackend::bn_forward_train(const char* op, const BatchNormParams& p, bool relu,
                                   const Tensor& x, const Tensor& residual, const Tensor& gamma,
                                   const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                                   Tensor& y, Tensor& save_mean, Tensor& save_var) {
  const uint32_t C = static_cast<uint32_t>(x.c()), HW = static_cast<uint32_t>(x.h() * x.w());
  const uint32_t M = static_cast<uint32_t>(x.n()) * HW;
  check_channel_vec(*this, op, "gamma", gamma, C);
  check_channel_vec(*this, op, "beta", beta, C);
  check_channel_vec(*this, op, "running_mean", running_mean, C);
  check_channel_vec(*this, op, "running_var", running_var, C);
  check_channel_vec(*this, op, "save_mean", save_mean, C);
  check_channel_vec(*this, op, "save_var", save_var, C);
  RN50_CHECK(M > 1, "cuda {}: expected more than 1 value per channel when training, got x {}",
             op, x.str());
  if (C == 0) return;
  // RN50_CUDA_BN=cudnn, where cuDNN takes the configuration: its fused BN.
  if (!bn_cudnn_refusal(p, x.dtype(), x.layout(), C) &&
      cudnn_bn_forward_train(p, relu, x, residual, gamma, beta, running_mean, running_var, y,
                             save_mean, save_var))
    return;
  const bool nhwc = x.layout() == Layout::NHWC;
  const uint32_t n = static_cast<uint32_t>(x.numel());
  cudaStream_t st = stream();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int VV = kVec16<T>;
    const T* xp = x.data_as<const T>();
    const T* rp = residual.defined() ? residual.data_as<const T>() : nullptr;
    T* yp = y.data_as<T>();
    // 1. partial statistics
    float *p_cnt, *p_mean, *p_m2, *k_mean, *k_scale;
    uint32_t slices;
    auto carve = [&](uint32_t s) {
      slices = s;
      float* base = scratch(bn_scratch, C);
      const size_t plane = static_cast<size_t>(s) * C;
      p_cnt = base;
      p_mean = base + plane;
      p_m2 = base + 2 * plane;
      k_mean = base + 3 * plane;
      k_scale = k_mean + C;
    };
    if (nhwc) {
      const int V = (C % VV == 0 && aligned16(xp)) ? VV : 1;
      const NhwcStatsCfg cfg = nhwc_stats_cfg(M, C, V);
      carve(cfg.slices);
      if (V == VV)
        bn_fwd_stats_nhwc<T, VV>
            <<<cfg.grid, cfg.block, 0, st>>>(xp, M, C, p_cnt, p_mean, p_m2);
      else
        bn_fwd_stats_nhwc<T, 1><<<cfg.grid, cfg.block, 0, st>>>(xp, M, C, p_cnt, p_mean, p_m2);
    } else {
      carve(nchw_slices(M));
      bn_fwd_stats_nchw<T>
          <<<dim3(C, slices), kThreads, 0, st>>>(xp, M, C, HW, p_cnt, p_mean, p_m2);
    }
    RN50_CUDA_LAUNCH_CHECK();
    // 2. statistics, running statistics, coefficients
    bn_fwd_finalize<<<finalize_grid(C), kFinalizeWarps * 32, 0, st>>>(
        p_cnt, p_mean, p_m2, slices, C, static_cast<double>(M), p.eps, p.momentum,
        gamma.data_as<const float>(), running_mean.data_as<float>(),
        running_var.data_as<float>(), save_mean.data_as<float>(), save_var.data_as<float>(),
        k_mean, k_scale);
    RN50_CUDA_LAUNCH_CHECK();
    // 3. y
    launch_fwd_apply<T>(st, xp, rp, yp, n, C, HW, nhwc, k_mean, k_scale,
                        beta.data_as<const float>(), relu, bn_fixed_channel_blocks());
  });
}

void CudaBackend::batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      Tensor& y) {
  const char* op = "batchnorm_fwd_infer";
  check_bn_acts(op, {{"x", &x}, {"y", &y}});
  const uint32_t C = static_cast<uint32_t>(x.c()), HW = static_cast<uint32_t>(x.h() * x.w());
  check_channel_vec(*this, op, "gamma", gamma, C);
  check_channel_vec(*this, op, "beta", beta, C);
  check_channel_vec(*this, op, "running_mean", running_mean, C);
  check_channel_vec(*this, op, "running_var", running_var, C);
  if (x.numel() == 0) return;
  const bool nhwc = x.layout() == Layout::NHWC;
  const uint32_t n = static_cast<uint32_t>(x.numel());
  cudaStream_t st = stream();
  float* k_scale = scratch(bn_scratch, C);
  bn_infer_coeffs<<<ceil_div(C, kThreads), kThreads, 0, st>>>(
      gamma.data_as<const float>(), running_var.data_as<const float>(), C, p.eps, k_scale);
  RN50_CUDA_LAUNCH_CHECK();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_fwd_apply<T>(st, x.data_as<const T>(), nullptr, y.data_as<T>(), n, C, HW, nhwc,
                        running_mean.data_as<const float>(), k_scale,
                        beta.data_as<const float>(), p.relu, bn_fixed_channel_blocks());
  });
}

void CudaBackend::batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_var, Tensor& dx, Tensor& dgamma,
                                Tensor& dbeta) {
  const char* op = "batchnorm_bwd";
  if (p.relu)
    check_bn_acts(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}, {"y (ReLU mask)", &y}});
  else
    check_bn_acts(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  Tensor no_dres;
  bn_backward(op, p, p.relu, x, y, dy, Tensor(), no_dres, gamma, save_mean, save_var, dx, dgamma,
              dbeta);
}

void CudaBackend::bn_backward(const char* op, const BatchNormParams& p, bool relu,
                              const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& g2, Tensor& dres, const Tensor& gamma,
                              const Tensor& save_mean, const Tensor& save_var, Tensor& dx,
                              Tensor& dgamma, Tensor& dbeta) {
  const uint32_t C = static_cast<uint32_t>(x.c()), HW = static_cast<uint32_t>(x.h() * x.w());
  const uint32_t M = static_cast<uint32_t>(x.n()) * HW;
  check_channel_vec(*this, op, "gamma", gamma, C);
  check_channel_vec(*this, op, "save_mean", save_mean, C);
  check_channel_vec(*this, op, "save_var", save_var, C);
  check_channel_vec(*this, op, "dgamma", dgamma, C);
  check_channel_vec(*this, op, "dbeta", dbeta, C);
  RN50_CHECK(M > 0, "cuda {}: x {} has no values per channel", op, x.str());
  if (C == 0) return;
  // RN50_CUDA_BN=cudnn: cuDNN's backward where this layer's forward ran on cuDNN.
  if (!bn_cudnn_refusal(p, x.dtype(), x.layout(), C) &&
      cudnn_bn_backward(p, relu, x, y, dy, g2, dres, gamma, save_mean, dx, dgamma, dbeta))
    return;
  const bool nhwc = x.layout() == Layout::NHWC;
  const uint32_t n = static_cast<uint32_t>(x.numel());
  cudaStream_t st = stream();
  const float* mean = save_mean.data_as<const float>();
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int VV = kVec16<T>;
    const T* xp = x.data_as<const T>();
    const T* yp = relu ? y.data_as<const T>() : nullptr;
    const T* dyp = dy.data_as<const T>();
    const T* g2p = g2.defined() ? g2.data_as<const T>() : nullptr;
    T* drp = dres.defined() ? dres.data_as<T>() : nullptr;
    T* dxp = dx.data_as<T>();
    // 1. partial sums
    float *p_s1, *p_s2, *k_a, *k_e, *k_f;
    uint32_t slices;
    auto carve = [&](uint32_t s) {
      slices = s;
      float* base = scratch(bn_scratch, C);
      const size_t plane = static_cast<size_t>(s) * C;
      p_s1 = base;
      p_s2 = base + plane;
      k_a = base + 2 * plane;
      k_e = k_a + C;
      k_f = k_e + C;
    };
    if (nhwc) {
      const bool vec = C % VV == 0 && aligned16(xp) && aligned16(dyp) && (!yp || aligned16(yp)) &&
                       (!g2p || aligned16(g2p)) && (!drp || aligned16(drp));
      const int V = vec ? VV : 1;
      const NhwcStatsCfg cfg = nhwc_stats_cfg(M, C, V);
      carve(cfg.slices);
      if (vec) {
        if (relu)
          bn_bwd_stats_nhwc<T, VV, true>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, g2p, drp, M, C, mean, p_s1, p_s2);
        else
          bn_bwd_stats_nhwc<T, VV, false>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, g2p, drp, M, C, mean, p_s1, p_s2);
      } else {
        if (relu)
          bn_bwd_stats_nhwc<T, 1, true>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, g2p, drp, M, C, mean, p_s1, p_s2);
        else
          bn_bwd_stats_nhwc<T, 1, false>
              <<<cfg.grid, cfg.block, 0, st>>>(xp, yp, dyp, g2p, drp, M, C, mean, p_s1, p_s2);
      }
    } else {
      carve(nchw_slices(M));
      const dim3 grid(C, slices);
      if (relu)
        bn_bwd_stats_nchw<T, true>
            <<<grid, kThreads, 0, st>>>(xp, yp, dyp, g2p, drp, M, C, HW, mean, p_s1, p_s2);
      else
        bn_bwd_stats_nchw<T, false>
            <<<grid, kThreads, 0, st>>>(xp, yp, dyp, g2p, drp, M, C, HW, mean, p_s1, p_s2);
    }
    RN50_CUDA_LAUNCH_CHECK();
    // 2. dgamma, dbeta, coefficients
    bn_bwd_finalize<<<finalize_grid(C), kFinalizeWarps * 32, 0, st>>>(
        p_s1, p_s2, slices, C, static_cast<double>(M), p.eps, gamma.data_as<const float>(),
        save_var.data_as<const float>(), dgamma.data_as<float>(), dbeta.data_as<float>(), k_a,
        k_e, k_f);
    RN50_CUDA_LAUNCH_CHECK();
    // 3. dx; with the join, from dres (masked by the statistics pass)
    const T* gp = drp ? drp : dyp;
    const bool mask = relu && !drp;
    const T* mp = mask ? yp : nullptr;
    const int V = apply_vec<T>(nhwc, C, HW, {xp, mp, gp, dxp});
    const unsigned fixed = nhwc ? fixed_channel_grid(n / V, V, C, bn_fixed_channel_blocks()) : 0;
    const unsigned grid = fixed ? fixed : grid_for(n / V, kThreads);
    auto launch = [&](auto vtag, auto ltag, auto rtag) {
      constexpr int VT = decltype(vtag)::value;
      constexpr bool L = decltype(ltag)::value, R = decltype(rtag)::value;
      if (L && fixed)
        bn_bwd_apply<T, VT, L, R, L>
            <<<grid, kThreads, 0, st>>>(xp, mp, gp, dxp, n, C, HW, mean, k_a, k_e, k_f);
      else
        bn_bwd_apply<T, VT, L, R>
            <<<grid, kThreads, 0, st>>>(xp, mp, gp, dxp, n, C, HW, mean, k_a, k_e, k_f);
    };
    using VecT = std::integral_constant<int, VV>;
    using One = std::integral_constant<int, 1>;
    using Yes = std::true_type;
    using No = std::false_type;
    if (V == VV) {
      if (nhwc)
        mask ? launch(VecT{}, Yes{}, Yes{}) : launch(VecT{}, Yes{}, No{});
      else
        mask ? launch(VecT{}, No{}, Yes{}) : launch(VecT{}, No{}, No{});
    } else {
      if (nhwc)
        mask ? launch(One{}, Yes{}, Yes{}) : launch(One{}, Yes{}, No{});
      else
        mask ? launch(One{}, No{}, Yes{}) : launch(One{}, No{}, No{});
    }
    RN50_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace rn50::cuda
