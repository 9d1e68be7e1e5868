// rn50: Winograd F(4x4, 3x3) with our own products (WinogradF43Conv, winograd_f43.h).
// Why: oneDNN 2.6 implements Winograd only with AVX-512 (jit_avx512_core_f32_wino_conv_4x3);
// on AVX2-only CPUs its direct jit:avx2 kernel runs ResNet-50's 3x3 stride-1 convs, a large
// share of a batch-32 inference's conv time (measured in
// bench/results/cpu/2026-11-27-avx2-epyc/own_winograd_f43_infer.md). The transforms are ours,
// vectorised over nChw8c's 8 channels of one block (one AVX2 register per row element); the
// products are our panel GEMM (gemm_f32_panels.h) on U packed in its panels: oneDNN's batched
// matmul, which this op first ran on, packed U anew on every call.
#include "backend/cpu/winograd_f43.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "backend/cpu/gemm_f32_panels.h"
#include "backend/cpu/winograd_products.h"
#include "core/check.h"
#include "core/cpu_info.h"
#include "core/isa_region.h"

namespace rn50::onednn {

namespace {

int64_t g_chunk_override = 0;  ///< set_winograd_chunk_tiles (0: none)

constexpr int kL = 8;  ///< channels per nChw8c block
constexpr int64_t kPositionPad = 16;  ///< floats (one cache line) added between positions

/// G (6x3), Lavin and Gray's F(4x4, 3x3): U = G g G^T, and dW = G^T M G for the gradient.
constexpr float kG[6][3] = {{1.f / 4, 0, 0},
                            {-1.f / 6, -1.f / 6, -1.f / 6},
                            {-1.f / 6, 1.f / 6, -1.f / 6},
                            {1.f / 24, 1.f / 12, 1.f / 6},
                            {1.f / 24, -1.f / 12, 1.f / 6},
                            {0, 0, 1}};

}  // namespace

/// Offset of channel block `cb` of image n (its pixel (0, 0)) in an activation of `ch`
/// channels: nChw8c or NHWC (s.nhwc).
inline int64_t block_offset(const WinogradF43Conv::Shape& s, int64_t ch, int64_t n, int64_t cb) {
  return s.nhwc ? n * s.h * s.w * ch + cb * kL : (n * (ch / kL) + cb) * s.h * s.w * kL;
}

/// What an output transform needs of a conv's plan (WinogradF43Conv::Impl).
struct F43Tiles {
  const WinogradF43Conv::Shape& s;
  int64_t th, tw, kt, mpos;
};

}  // namespace rn50::onednn

// The transforms, one per instruction set (the products are gemm_f32_panels's, which picks its
// own kernel).
namespace rn50::onednn::f43_base {
#define RN50_F43_AVX 0
#include "backend/cpu/winograd_f43_impl.inc"
#undef RN50_F43_AVX
}  // namespace rn50::onednn::f43_base

RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX2)
namespace rn50::onednn::f43_avx2 {
#define RN50_F43_AVX 1
#include "backend/cpu/winograd_f43_impl.inc"
#undef RN50_F43_AVX
}  // namespace rn50::onednn::f43_avx2
RN50_ISA_END

namespace rn50::onednn {

void set_winograd_chunk_tiles(std::optional<int64_t> tiles) {
  RN50_CHECK(!tiles || (*tiles >= 1 && *tiles <= WinogradF43Conv::kMaxChunkTiles),
             "winograd: chunk of {} tiles", tiles.value_or(0));
  g_chunk_override = tiles.value_or(0);
}

int64_t WinogradF43Conv::tiles(const Shape& s) { return s.n * ((s.h + 3) / 4) * ((s.w + 3) / 4); }

WinogradF43Conv::Split WinogradF43Conv::split(const Shape& s) {
  const int64_t nthr = std::max(1, omp_get_max_threads());
  const int64_t cap = g_chunk_override ? g_chunk_override : kMaxChunkTiles;
  const int64_t p = tiles(s), even = (p + nthr - 1) / nthr;
  if (even >= kMinChunkTiles || nthr == 1 || s.k % kL != 0) {
    if (g_chunk_override) return {std::clamp<int64_t>(even, 1, cap), 1};
    // Every thread as many equal chunks: one 64-channel 56x56 image's 196 tiles on 2 threads
    // as 4 x 49, not 64, 64, 64, 4, which left one thread 128 tiles and the other 68 (measured
    // in bench/results/cpu/2026-11-28-avx2-epyc/own_winograd_f43_chunks.md).
    const int64_t per_thread = (even + cap - 1) / cap;
    return {(even + per_thread - 1) / per_thread, 1};
  }
  // Few tiles: whole chunks, their output channels split over the threads instead.
  const int64_t chunk = std::min(cap, p), chunks = (p + chunk - 1) / chunk;
  int64_t parts = std::clamp<int64_t>(nthr / chunks, 1, std::max<int64_t>(1, s.k / kMinPartK));
  while ((s.k / kL) % parts != 0) --parts;
  return {chunk, parts};
}

// This op with U transformed once, measured against oneDNN's direct jit:avx2 kernel at batch 1, 2,
// 4 (the caches evicted but for the input, as a layer's weights are inside the network at small
// batches) and 32: bench/results/cpu/2026-12-01-avx2-epyc/own_winograd_f43_cached_rule.md. (With
// its products on oneDNN's batched matmul, which packed U anew for every call, this op lost at
// batch 1 and, at 512 channels, up to batch 4.) Every task's products read its part of U (36 C K
// floats: 9.4 MiB at 256 channels, 38 MiB at 512) from memory, 4x the direct conv's weights: only
// one image's 512-channel 7x7 conv, 4 tiles, loses. So, with U transformed once: chunks of 8 tiles
// or more, of layers at least one tile (4x4 outputs) wide and high: a 2x2 or 1x1 layer (ResNet's
// layer4 at crops of 64 px or less) would spend a tile's 36 products per channel pair on 4 or 1
// outputs, where the direct conv spends 9 per output.
bool WinogradF43Conv::worthwhile_cached(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0 || s.h < 4 || s.w < 4) return false;
  return split(s).chunk_tiles >= 8;
}

// With U transformed on every call (the backend's forward and backward data, whose weights
// change every training step), each call also reads the weights and writes all of U (4x the
// weights) before a product runs: the rule measured when this op's products were oneDNN's
// matmul, which likewise packed U anew on every call
// (bench/results/cpu/2026-11-27-avx2-epyc/own_winograd_f43_per_call_rule.md): chunks of 48
// tiles or more, and of 16 or more up to 256 x 256 channels. Taking the cached rule here
// instead (b66cd50) sent the tiny training runs' 128- to 512-channel layers of 8 tiles to this
// op, where transforming U took most of their steps.
bool WinogradF43Conv::worthwhile(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0) return false;
  const int64_t rows = split(s).chunk_tiles;
  return rows >= 48 || (s.c * s.k <= 256 * 256 && rows >= kMinChunkTiles);
}

// Against im2col + matmuls, measured in
// bench/results/cpu/2026-11-28-avx2-epyc/own_winograd_f43_wgrad.md. This one's fixed cost grows
// with C x K (M is 36 C K floats, written and transformed whatever the tile count), so the widest
// layers need more tiles before it pays.
bool WinogradF43Conv::weight_grad_worthwhile(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0) return false;
  const int64_t n = tiles(s);
  return n >= 48 && (s.c * s.k <= 256 * 256 || n >= 96);
}

void WinogradF43Conv::transform_weights_into(const float* w, int64_t c, int64_t k,
                                             WeightOrder order, float* u) {
  if (cpu_info().avx2_fma()) return f43_avx2::transform_weights_into(w, c, k, order, u);
  f43_base::transform_weights_into(w, c, k, order, u);
}

std::shared_ptr<const aligned_vector<float>> WinogradF43Conv::transform_weights(const float* w,
                                                                             int64_t c,
                                                                             int64_t k) {
  auto u = std::make_shared<aligned_vector<float>>(static_cast<size_t>(36 * c * k));
  transform_weights_into(w, c, k, WeightOrder::oihw, u->data());
  return u;
}

void WinogradF43Conv::transform_input_tiles(const Shape& s, const float* x, int64_t p0,
                                            int64_t rows, float* v, int64_t ld,
                                            bool may_stream, int64_t pos_stride) {
  if (cpu_info().avx2_fma())
    return f43_avx2::transform_input_tiles(s, x, p0, rows, v, ld, may_stream, pos_stride);
  f43_base::transform_input_tiles(s, x, p0, rows, v, ld, may_stream, pos_stride);
}

void WinogradF43Conv::transform_output_grad_tiles(const Shape& s, const float* dy, int64_t p0,
                                                  int64_t rows, float* z, int64_t ld) {
  if (cpu_info().avx2_fma())
    return f43_avx2::transform_output_grad_tiles(s, dy, p0, rows, z, ld);
  f43_base::transform_output_grad_tiles(s, dy, p0, rows, z, ld);
}

void WinogradF43Conv::weight_grad_from_products(const float* m, int64_t c, int64_t k,
                                                WeightOrder order, float* dw) {
  if (cpu_info().avx2_fma()) return f43_avx2::weight_grad_from_products(m, c, k, order, dw);
  f43_base::weight_grad_from_products(m, c, k, order, dw);
}

namespace {
/// Buffer `which` (0: V, 1: M) of the calling thread, at least `floats` long: one pair per
/// thread for every WinogradF43Conv, not per layer, so that a network's convs write and read
/// the same few hundred KiB, which stay in the caches (one pair per layer, ResNet-50's eleven
/// Winograd convs cycled ~20 MiB through them at batch 1: every store of the input
/// transform then fetched its line from memory).
float* thread_scratch(int which, size_t floats) {
  thread_local aligned_vector<float> buf[2];
  aligned_vector<float>& b = buf[which];
  if (b.size() < floats) b.resize(floats);
  return b.data();
}
}  // namespace

struct WinogradF43Conv::Impl {
  Shape s;
  std::shared_ptr<const aligned_vector<float>> u;
  const float* bias = nullptr;
  bool relu = false, accumulate = false;
  int64_t th = 0, tw = 0, p = 0, chunk = 0;
  int64_t parts = 1, kt = 0;  ///< output-channel parts and channels per part
  int nthr = 1;
  /// Floats between the positions of V and of M: a chunk's rows plus one cache line, so that
  /// a tile's 36 pieces do not all fall into one cache set (dense, they are a multiple of 4
  /// KiB apart at ResNet-50's widths: 16 KiB for one image's 256-channel 14x14 conv).
  int64_t vpos = 0, mpos = 0;
  // V (36, chunk, C) and M (36, chunk, kt), positions vpos and mpos floats apart, live in the
  // running thread's scratch (thread_scratch), shared by every Winograd conv the thread runs.

  /// M (36, rows, kt; positions mpos floats apart) of tiles [p0, p0 + rows) and output
  /// channels [k0, k0 + kt) into y: A^T m A + bias (+ y), ReLU (the ISA's output_transform).
  void output_transform(const float* mb, int64_t p0, int64_t rows, int64_t k0, float* y) const {
    const F43Tiles tl{s, th, tw, kt, mpos};
    if (cpu_info().avx2_fma())
      f43_avx2::output_transform(tl, bias, relu, accumulate, mb, p0, rows, k0, y);
    else
      f43_base::output_transform(tl, bias, relu, accumulate, mb, p0, rows, k0, y);
  }
};

WinogradF43Conv::WinogradF43Conv(const Shape& s, std::shared_ptr<const aligned_vector<float>> u,
                                 const float* bias, bool relu, bool accumulate)
    : impl_(std::make_unique<Impl>()) {
  RN50_CHECK(s.c % kL == 0 && s.k % kL == 0 && s.n > 0 && s.h > 0 && s.w > 0,
             "winograd: needs channels in multiples of 8 (C {}, K {}) and a non-empty image",
             s.c, s.k);
  RN50_CHECK(u && u->size() == 36 * static_cast<size_t>(s.c * s.k),
             "winograd: transformed weights of the wrong size");
  Impl& im = *impl_;
  im.s = s;
  im.u = std::move(u);
  im.bias = bias;
  im.relu = relu;
  im.accumulate = accumulate;
  im.th = (s.h + 3) / 4;
  im.tw = (s.w + 3) / 4;
  im.p = tiles(s);
  im.nthr = std::max(1, omp_get_max_threads());
  const Split sp = split(s);
  im.chunk = sp.chunk_tiles;
  im.parts = sp.k_parts;
  im.kt = s.k / im.parts;
  im.vpos = im.chunk * s.c + kPositionPad;
  im.mpos = im.chunk * im.kt + kPositionPad;
}

WinogradF43Conv::~WinogradF43Conv() = default;

void WinogradF43Conv::run(const float* x, float* y) {
  Impl& im = *impl_;
  const int64_t chunks = (im.p + im.chunk - 1) / im.chunk, c = im.s.c, k = im.s.k;
  // The 36 products of a chunk of `rows` tiles at vb for output-channel part q, then the
  // output transform of those channels; on the calling thread.
  auto products_and_output = [&](const float* vb, int64_t p0, int64_t rows, int64_t q) {
    float* mb = thread_scratch(1, static_cast<size_t>(36 * im.mpos));
    for (int xi = 0; xi < 36; ++xi)
      gemm_f32_panels(rows, c, vb + xi * im.vpos, c, im.u->data() + xi * c * k, k, q * im.kt,
                      im.kt, mb + xi * im.mpos, im.kt);
    im.output_transform(mb, p0, rows, q * im.kt, y);
  };
  if (im.parts == 1) {
    // Each thread whole chunks: its own V, products and output transform.
#pragma omp parallel for schedule(dynamic) num_threads(im.nthr)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t p0 = ch * im.chunk, rows = std::min(im.chunk, im.p - p0);
      float* vb = thread_scratch(0, static_cast<size_t>(36 * im.vpos));
      transform_input_tiles(im.s, x, p0, rows, vb, rows, false, im.vpos);
      products_and_output(vb, p0, rows, 0);
    }
    return;
  }
  // Few tiles, the output channels in parts: the team transforms each chunk's tiles once,
  // split between its threads, into one V (the calling thread's scratch, which is the team's
  // thread 0), then each thread its parts. Each thread transforming the whole chunk itself,
  // the input transform was a sizeable share of one image's 256-channel 14x14 conv
  // (bench/results/cpu/2026-12-01-avx2-epyc/own_winograd_f43_panel_gemm.md).
  float* shared_v = thread_scratch(0, static_cast<size_t>(36 * im.vpos));
#pragma omp parallel num_threads(im.nthr)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t p0 = ch * im.chunk, rows = std::min(im.chunk, im.p - p0);
      const int64_t a = rows * t / nt, b = rows * (t + 1) / nt;
      if (b > a) transform_input_tiles(im.s, x, p0 + a, b - a, shared_v + a * c, b - a, false,
                                       im.vpos);
#pragma omp barrier
      for (int64_t q = t; q < im.parts; q += nt) products_and_output(shared_v, p0, rows, q);
#pragma omp barrier
    }
  }
}

}  // namespace rn50::onednn
