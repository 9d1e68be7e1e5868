// rn50: training batch normalisation of NHWC activations in bf16 or f32 (see batchnorm_nhwc.h).
// Why our own loops: BatchNorm is memory-bound, and oneDNN 2.6's bf16 nspc kernel
// (bnorm_jit:avx512_core_bf16) takes as long as its f32 one on the same shapes although it moves
// half the bytes (measured in
// bench/results/cpu/2026-11-26-sapphire-rapids/batchnorm_bf16_own_loops.md); and oneDNN 2.6's batch
// norm cannot add a residual, which the loops fuse in (the block's residual join) in bf16 and f32
// alike. The element-wise passes are plain C++ that the compiler vectorises over the channels (the
// innermost, contiguous dimension); the statistics passes run AVX-512 tiles on AVX-512 CPUs (with a
// plain C++ fallback that gives the same bits, tested against each other). The loops are compiled
// three times, for the baseline, AVX2 + FMA and AVX-512 (batchnorm_nhwc_impl.inc in regions of
// core/isa_region.h), and cpu_info() picks one per call. bf16 widens exactly to f32 by a shift,
// results narrow once with round-to-nearest-even (core/bf16.h), and the ReLU's mask in the backward
// is y > 0 (for bf16 y's bits read as int16 > 0, the same test on the bits). Per-channel sums: each
// thread sums chunks of kChunk rows in f32 (short, so little rounding), adds each chunk into its
// own f64 totals, and the threads' totals are added in thread order after the loop: with OpenMP's
// static schedule the result does not depend on timing.
#include "backend/cpu/batchnorm_nhwc.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"

#include <immintrin.h>

#include "core/cpu_info.h"
#include "core/isa_region.h"

// The implementations, one per instruction set.
namespace rn50::onednn::bn_base {
#define RN50_BN_AVX512 0
#define RN50_BN_FMA 0
#include "backend/cpu/batchnorm_nhwc_impl.inc"
#undef RN50_BN_FMA
#undef RN50_BN_AVX512
}  // namespace rn50::onednn::bn_base

RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX2)
namespace rn50::onednn::bn_avx2 {
#define RN50_BN_AVX512 0
#define RN50_BN_FMA 1
#include "backend/cpu/batchnorm_nhwc_impl.inc"
#undef RN50_BN_FMA
#undef RN50_BN_AVX512
}  // namespace rn50::onednn::bn_avx2
RN50_ISA_END

RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX512)
namespace rn50::onednn::bn_avx512 {
#define RN50_BN_AVX512 1
#define RN50_BN_FMA 1
#include "backend/cpu/batchnorm_nhwc_impl.inc"
#undef RN50_BN_FMA
#undef RN50_BN_AVX512
}  // namespace rn50::onednn::bn_avx512
RN50_ISA_END

namespace rn50::onednn {

namespace {
/// The implementation this CPU runs: 2 AVX-512, 1 AVX2 + FMA, 0 the baseline.
int bn_isa() {
  const CpuInfo& c = cpu_info();
  return c.avx512_core() ? 2 : c.avx2_fma() ? 1 : 0;
}
}  // namespace

template <class T>
void bn_nhwc_fwd_train(const T* x, const T* residual, T* y, int64_t M, int64_t C,
                       const float* gamma, const float* beta, float eps, bool relu,
                       float* save_mean, float* save_var, BnLoops loops) {
  switch (bn_isa()) {
    case 2:
      return bn_avx512::bn_nhwc_fwd_train(x, residual, y, M, C, gamma, beta, eps, relu,
                                          save_mean, save_var, loops);
    case 1:
      return bn_avx2::bn_nhwc_fwd_train(x, residual, y, M, C, gamma, beta, eps, relu,
                                        save_mean, save_var, loops);
    default:
      return bn_base::bn_nhwc_fwd_train(x, residual, y, M, C, gamma, beta, eps, relu,
                                        save_mean, save_var, loops);
  }
}

template <class T>
void bn_nhwc_bwd(const T* x, const T* y, const T* dy, T* dx, int64_t M, int64_t C,
                 const float* gamma, const float* save_mean, const float* save_var, float eps,
                 bool relu, float* dgamma, float* dbeta) {
  switch (bn_isa()) {
    case 2:
      return bn_avx512::bn_nhwc_bwd(x, y, dy, dx, M, C, gamma, save_mean, save_var, eps, relu,
                                    dgamma, dbeta);
    case 1:
      return bn_avx2::bn_nhwc_bwd(x, y, dy, dx, M, C, gamma, save_mean, save_var, eps, relu,
                                  dgamma, dbeta);
    default:
      return bn_base::bn_nhwc_bwd(x, y, dy, dx, M, C, gamma, save_mean, save_var, eps, relu,
                                  dgamma, dbeta);
  }
}

template <class T>
void bn_nhwc_add_relu_bwd(const T* x, const T* y, const T* g1, const T* g2, T* dres, T* dx,
                          int64_t M, int64_t C, const float* gamma, const float* save_mean,
                          const float* save_var, float eps, float* dgamma, float* dbeta) {
  switch (bn_isa()) {
    case 2:
      return bn_avx512::bn_nhwc_add_relu_bwd(x, y, g1, g2, dres, dx, M, C, gamma, save_mean,
                                             save_var, eps, dgamma, dbeta);
    case 1:
      return bn_avx2::bn_nhwc_add_relu_bwd(x, y, g1, g2, dres, dx, M, C, gamma, save_mean,
                                           save_var, eps, dgamma, dbeta);
    default:
      return bn_base::bn_nhwc_add_relu_bwd(x, y, g1, g2, dres, dx, M, C, gamma, save_mean,
                                           save_var, eps, dgamma, dbeta);
  }
}

#define RN50_BN_NHWC_INSTANTIATE(T)                                                            \
  template void bn_nhwc_fwd_train<T>(const T*, const T*, T*, int64_t, int64_t, const float*,   \
                                     const float*, float, bool, float*, float*, BnLoops);      \
  template void bn_nhwc_bwd<T>(const T*, const T*, const T*, T*, int64_t, int64_t,             \
                               const float*, const float*, const float*, float, bool, float*, \
                               float*);                                                        \
  template void bn_nhwc_add_relu_bwd<T>(const T*, const T*, const T*, const T*, T*, T*,        \
                                        int64_t, int64_t, const float*, const float*,          \
                                        const float*, float, float*, float*);
RN50_BN_NHWC_INSTANTIATE(uint16_t)
RN50_BN_NHWC_INSTANTIATE(float)
#undef RN50_BN_NHWC_INSTANTIATE

}  // namespace rn50::onednn
