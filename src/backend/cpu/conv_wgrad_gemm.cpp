// rn50: the weight gradient of an NHWC convolution as our own AVX-512 GEMM, in bf16 and in f32
// (see conv_wgrad_gemm.h).
// Why bf16: on CPUs with AVX-512 BF16 but no AMX, oneDNN 2.6 computes these with its
// jit_bf16_1x1 / jit_bf16 avx512_core_bf16 kernels, which are weakest where the outputs are
// smallest (ResNet-50's 7x7 layers); there this GEMM was measured faster: see
// bench/results/cpu/2026-11-28-zen4-epyc/own_wgrad_bf16_7x7.md (conv_rules.cpp links the
// measurements of every shape it takes). oneDNN's matmul with a transposed dY was no faster in the
// step. The weight gradient is a GEMM whose reduction runs over the pixels, the slow dimension of
// both NHWC operands, so vdpbf16ps (which sums products of element PAIRS along the reduction) needs
// two consecutive pixels interleaved in both operands: packed here per chunk of pixels into small
// cache-resident buffers (the B panel 32 KiB, the A block of the thread's rows), the register tile
// 6 rows x 64 channels (24 f32 accumulators) held over the whole chunk. A KxK conv is the same GEMM
// with R x S times the columns, each tap's panels packed from the input pixels that tap reads (the
// pixels whose tap falls in the padding left out of both operands). Outputs larger than 7x7 are
// split between the threads by pixel chunks, each thread streaming its own pixels of both operands
// into its own f32 partial and prefetching its next chunk's lines while the current chunk's tiles
// run; the partials are added after a barrier. There it is level with oneDNN or ahead (the 1x1s
// that are strided or widen fourfold); at 56x56 the packing, not the tile, is what it loses time to
// (bench/results/cpu/2026-11-29-zen4-epyc/own_wgrad_bf16_pixel_split.md).
// Why f32: the same GEMM with one pixel per step (vfmadd231ps, the A element broadcast from a
// block packed tile by tile) and chunks of 64 pixels (a 16 KiB panel); it was measured ahead
// of oneDNN 2.6's jit:avx512_core f32 kernels for some 1x1 weight gradients, which ones
// depending on the CPU's AVX-512 units (conv_rules.cpp takes them per CPU class and links the
// comparisons: bench/results/cpu/2026-12-03-zen5-epyc/own_wgrad_f32.md and
// bench/results/cpu/2026-12-04-zen4-epyc/own_wgrad_zen4.md). Its 6 x 64 tile alone runs near
// the core's peak from L1; at 56x56 the packing of operands streamed from memory holds it
// well below that.
// Both are one driver (run_share) over an element-type policy (Bf16Gemm, F32Gemm): how a chunk
// is packed, the register tile, and how the sums are stored (conv_wgrad_gemm_impl.inc, compiled
// in an AVX-512 region for f32 and an AVX-512 BF16 one for bf16, core/isa_region.h; they run
// where cpu_info() has those, the *_built() functions).
#include "backend/cpu/conv_wgrad_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "core/aligned.h"
#include "core/check.h"
#include "core/cpu_info.h"
#include "core/isa_region.h"

namespace rn50::onednn {

namespace {

constexpr int64_t kPanel = 64;   ///< dW columns (input channels) of a register tile: 4 vectors
constexpr int kRows = 6;         ///< dW rows (output channels) of a register tile
/// Pixels of a bf16 chunk: 128 steps of a pixel pair, a 32 KiB column panel.
constexpr int64_t kPcBf16 = 256;
/// Pixels of an f32 chunk: 64 steps of one pixel, a 16 KiB column panel (chunks of 128 and 256
/// pixels measured slower: bench/results/cpu/2026-12-03-zen5-epyc/own_wgrad_f32.md).
constexpr int64_t kPcF32 = 64;

/// Pixel chunks of the GEMM's reduction: ceil(N OH OW / pc).
int64_t chunks_of(const WgradGeo& g, int64_t pc) {
  return (g.N * g.OH() * g.OW() + pc - 1) / pc;
}

bool splits_pixels(const WgradGeo& g, int threads, int64_t pc) {
  return threads > 1 && g.OH() * g.OW() > 49 && chunks_of(g, pc) >= 2 * int64_t{threads};
}

/// The most f32 partials of K x cols a call with up to omp_get_max_threads() threads sums into:
/// the largest team that splits the pixels, else 1.
int64_t partials(const WgradGeo& g, int64_t pc) {
  int64_t most = 1;
  for (int t = 2; t <= omp_get_max_threads(); ++t)
    if (splits_pixels(g, t, pc)) most = t;
  return most;
}

/// Whether dW's order is the GEMM's own, columns tap by tap then channel: a 1x1, or OHWI.
bool in_gemm_order(const WgradGeo& g) { return g.R * g.S == 1 || g.ohwi; }

/// The geometry both kernels take (conv_wgrad_bf16_fits without the build).
bool geometry_fits(const WgradGeo& g) {
  return g.N >= 1 && g.H >= 1 && g.W >= 1 && g.K >= 1 && g.stride >= 1 && g.R >= 1 &&
         g.S >= 1 && g.pad >= 0 && g.OH() >= 1 && g.OW() >= 1 && g.C >= kPanel &&
         g.C % kPanel == 0;
}


}  // namespace

}  // namespace rn50::onednn

// The driver and kernels: f32 on AVX-512, bf16 (and f32) on AVX-512 BF16.
RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX512)
namespace rn50::onednn::wgrad_avx512 {
#define RN50_WGRAD_BF16 0
#include "backend/cpu/conv_wgrad_gemm_impl.inc"
#undef RN50_WGRAD_BF16
/// conv_wgrad<F32Gemm> (an entry point outside the anonymous namespace of the .inc).
void conv_wgrad_f32(const WgradGeo& g, const float* x, const float* dy, float* dw, float* work) {
  conv_wgrad<F32Gemm>(g, x, dy, dw, work);
}
}  // namespace rn50::onednn::wgrad_avx512
RN50_ISA_END

RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX512_BF16)
namespace rn50::onednn::wgrad_avx512_bf16 {
#define RN50_WGRAD_BF16 1
#include "backend/cpu/conv_wgrad_gemm_impl.inc"
#undef RN50_WGRAD_BF16
/// conv_wgrad<Bf16Gemm>.
void conv_wgrad_bf16(const WgradGeo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                     float* work) {
  conv_wgrad<Bf16Gemm>(g, x, dy, dw, work);
}
}  // namespace rn50::onednn::wgrad_avx512_bf16
RN50_ISA_END

namespace rn50::onednn {

bool conv_wgrad_bf16_built() {
  const CpuInfo& c = cpu_info();
  return c.avx512_core() && c.avx512_bf16 && !c.amx();
}

bool conv_wgrad_bf16_fits(const WgradGeo& g) {
  return conv_wgrad_bf16_built() && geometry_fits(g);
}

bool conv_wgrad_bf16_splits_pixels(const WgradGeo& g, int threads) {
  return splits_pixels(g, threads, kPcBf16);
}

int64_t conv_wgrad_bf16_workspace(const WgradGeo& g) {
  return g.K * g.cols() * partials(g, kPcBf16);
}

void conv_wgrad_bf16(const WgradGeo& g, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                     float* work) {
  RN50_CHECK(conv_wgrad_bf16_fits(g),
             "conv_wgrad_bf16: no kernel for N={} H={} W={} C={} K={} {}x{} stride {} pad {} on "
             "this CPU (needs AVX-512 BF16 without AMX, and C a multiple of {})",
             g.N, g.H, g.W, g.C, g.K, g.R, g.S, g.stride, g.pad, kPanel);
  wgrad_avx512_bf16::conv_wgrad_bf16(g, x, dy, dw, work);
}

bool conv_wgrad_f32_built() { return cpu_info().avx512_core(); }

bool conv_wgrad_f32_fits(const WgradGeo& g) { return conv_wgrad_f32_built() && geometry_fits(g); }

bool conv_wgrad_f32_splits_pixels(const WgradGeo& g, int threads) {
  return splits_pixels(g, threads, kPcF32);
}

int64_t conv_wgrad_f32_workspace(const WgradGeo& g) {
  const int64_t parts = partials(g, kPcF32);
  if (parts == 1 && in_gemm_order(g)) return 0;  // summed straight into dW
  return g.K * g.cols() * parts;
}

void conv_wgrad_f32(const WgradGeo& g, const float* x, const float* dy, float* dw, float* work) {
  RN50_CHECK(conv_wgrad_f32_fits(g),
             "conv_wgrad_f32: no kernel for N={} H={} W={} C={} K={} {}x{} stride {} pad {} on "
             "this CPU (needs AVX-512 and C a multiple of {})",
             g.N, g.H, g.W, g.C, g.K, g.R, g.S, g.stride, g.pad, kPanel);
  wgrad_avx512::conv_wgrad_f32(g, x, dy, dw, work);
}

}  // namespace rn50::onednn
