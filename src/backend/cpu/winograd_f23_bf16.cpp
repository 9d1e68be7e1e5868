// rn50: bf16 Winograd F(2x2, 3x3) on oneDNN's batched bf16 matmul (WinogradF23Bf16,
// winograd_f23_bf16.h).
// Why: oneDNN 2.6 has no bf16 Winograd; its direct avx512_core_bf16 kernel ran ResNet-50's 3x3
// stride-1 convs, and the three directions of these 13 convs were a large share of a bf16
// training step (bench/results/cpu/2026-11-29-zen4-epyc/own_winograd_f23_bf16.md). F(2x2, 3x3)
// is the largest tile whose error bf16 affords (F(4x4, 3x3), which the
// f32 op uses, was 5x worse). The transforms are ours, 16 channels per AVX-512 register in f32
// (vcvtneps2bf16 rounds V once); the products are oneDNN's. The transforms are compiled for
// AVX-512 BF16 in their own region (core/isa_region.h) and run where cpu_info() has it (and no
// AMX, whose oneDNN kernels are faster): built().
#include "backend/cpu/winograd_f23_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "backend/cpu/winograd_products.h"
#include "core/aligned.h"
#include "core/bf16.h"
#include "core/check.h"
#include "core/cpu_info.h"
#include "core/isa_region.h"

namespace rn50::onednn {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

int64_t g_chunk_override = 0;  ///< set_winograd_f23_chunk_tiles (0: none)

constexpr int64_t kL = 16;  ///< channels per AVX-512 register (f32)

}  // namespace

}  // namespace rn50::onednn

// The transforms, compiled for AVX-512 BF16 (run only where built()).
RN50_ISA_BEGIN(RN50_ISA_TARGET_AVX512_BF16)
namespace rn50::onednn::f23_avx512_bf16 {
namespace {

constexpr int64_t kL = 16;  ///< channels per AVX-512 register (f32)

/// 16 bf16 channels at p, widened to f32 (exact). The zero-masking forms with every lane set:
/// GCC 12's unmasked ones merge into an undefined register and warn inside the transforms.
inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, h);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
}

/// 16 f32 values rounded to nearest even into bf16 at p (vcvtneps2bf16).
inline void store16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}

}  // namespace

/// WinogradF23Bf16::transform_input_tiles.
void input_tiles(const WinogradF23Bf16::Shape& s, const uint16_t* x, int64_t p0, int64_t rows,
                 uint16_t* v, int64_t ld) {
  const int64_t th = (s.h + 1) / 2, tw = (s.w + 1) / 2, C = s.c, pos = ld * C;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
    const int64_t h0 = ty * 2 - 1, w0 = tx * 2 - 1;
    const uint16_t* src[4][4];  // each tap's pixel, nullptr in the padding
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t hh = h0 + i, ww = w0 + j;
        src[i][j] = hh < 0 || hh >= s.h || ww < 0 || ww >= s.w
                        ? nullptr
                        : x + ((n * s.h + hh) * s.w + ww) * C;
      }
    uint16_t* out = v + r * C;
    for (int64_t c0 = 0; c0 < C; c0 += kL) {
      __m512 d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          d[i][j] = src[i][j] ? load16(src[i][j] + c0) : _mm512_setzero_ps();
      __m512 t1[4][4];  // B^T d: down the columns
      for (int j = 0; j < 4; ++j) {
        t1[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        t1[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        t1[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        t1[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B: along row i
        uint16_t* o = out + (i * 4) * pos + c0;
        store16(o, _mm512_sub_ps(t1[i][0], t1[i][2]));
        store16(o + pos, _mm512_add_ps(t1[i][1], t1[i][2]));
        store16(o + 2 * pos, _mm512_sub_ps(t1[i][2], t1[i][1]));
        store16(o + 3 * pos, _mm512_sub_ps(t1[i][1], t1[i][3]));
      }
    }
  }
}

/// WinogradF23Bf16::transform_output_grad_tiles.
void output_grad_tiles(const WinogradF23Bf16::Shape& s, const uint16_t* dy, int64_t p0,
                       int64_t rows, uint16_t* z, int64_t ld) {
  const int64_t th = (s.h + 1) / 2, tw = (s.w + 1) / 2, K = s.k, pos = ld * K;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
    const bool down = ty * 2 + 1 < s.h, right = tx * 2 + 1 < s.w;  // the tile's second row, column
    const uint16_t* g0 = dy + ((n * s.h + ty * 2) * s.w + tx * 2) * K;
    const uint16_t* g1 = g0 + s.w * K;
    uint16_t* out = z + r * K;
    for (int64_t k0 = 0; k0 < K; k0 += kL) {
      const __m512 zero = _mm512_setzero_ps();
      const __m512 g[2][2] = {{load16(g0 + k0), right ? load16(g0 + K + k0) : zero},
                              {down ? load16(g1 + k0) : zero,
                               down && right ? load16(g1 + K + k0) : zero}};
      __m512 t1[4][2];  // A g: down the columns
      for (int j = 0; j < 2; ++j) {
        t1[0][j] = g[0][j];
        t1[1][j] = _mm512_add_ps(g[0][j], g[1][j]);
        t1[2][j] = _mm512_sub_ps(g[0][j], g[1][j]);
        t1[3][j] = _mm512_sub_ps(zero, g[1][j]);
      }
      for (int i = 0; i < 4; ++i) {  // (A g) A^T: along row i
        uint16_t* o = out + (i * 4) * pos + k0;
        store16(o, t1[i][0]);
        store16(o + pos, _mm512_add_ps(t1[i][0], t1[i][1]));
        store16(o + 2 * pos, _mm512_sub_ps(t1[i][0], t1[i][1]));
        store16(o + 3 * pos, _mm512_sub_ps(zero, t1[i][1]));
      }
    }
  }
}

/// M (16, rows, K) f32 of tiles [p0, p0 + rows) into y: A^T m A with ep's bias, residual
/// and ReLU, rounded once to bf16, the pixels outside the image (odd H or W) not written.
/// A^T's rows: (1 1 1 0), (0 1 -1 -1).
void output_transform(const WinogradF23Bf16::Shape& s, const WinogradF23Bf16::Epilogue& ep,
                      int64_t th, int64_t tw, const float* mb, int64_t p0, int64_t rows,
                      uint16_t* y) {
  const int64_t K = s.k, pos = rows * K;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
    const int64_t oh = std::min<int64_t>(2, s.h - ty * 2);
    const int64_t ow = std::min<int64_t>(2, s.w - tx * 2);
    uint16_t* yt = y + ((n * s.h + ty * 2) * s.w + tx * 2) * K;
    const float* in = mb + r * K;
    for (int64_t k0 = 0; k0 < K; k0 += kL) {
      __m512 t1[2][4];  // A^T m: down the columns
      for (int j = 0; j < 4; ++j) {
        const __m512 m0 = _mm512_loadu_ps(in + j * pos + k0);
        const __m512 m1 = _mm512_loadu_ps(in + (4 + j) * pos + k0);
        const __m512 m2 = _mm512_loadu_ps(in + (8 + j) * pos + k0);
        const __m512 m3 = _mm512_loadu_ps(in + (12 + j) * pos + k0);
        t1[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        t1[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 b = ep.bias ? _mm512_loadu_ps(ep.bias + k0) : _mm512_setzero_ps();
      // + bias (+ y) then ReLU, rounded once.
      auto finish = [&](uint16_t* at, __m512 v) {
        v = _mm512_add_ps(v, b);
        if (ep.accumulate) v = _mm512_add_ps(v, load16(at));
        if (ep.relu) v = _mm512_maskz_max_ps(0xffff, v, _mm512_setzero_ps());
        store16(at, v);
      };
      for (int i = 0; i < oh; ++i) {  // (A^T m) A: along row i
        uint16_t* yr = yt + i * s.w * K + k0;
        finish(yr, _mm512_add_ps(_mm512_add_ps(t1[i][0], t1[i][1]), t1[i][2]));
        if (ow == 2) finish(yr + K, _mm512_sub_ps(_mm512_sub_ps(t1[i][1], t1[i][2]), t1[i][3]));
      }
    }
  }
}

}  // namespace rn50::onednn::f23_avx512_bf16
RN50_ISA_END

namespace rn50::onednn {

void set_winograd_f23_chunk_tiles(std::optional<int64_t> tiles) {
  RN50_CHECK(!tiles || *tiles >= 1, "winograd bf16: chunk of {} tiles", tiles.value_or(0));
  g_chunk_override = tiles.value_or(0);
}

bool WinogradF23Bf16::built() {
  const CpuInfo& c = cpu_info();
  return c.avx512_core() && c.avx512_bf16 && !c.amx();
}

bool WinogradF23Bf16::fits(const Shape& s) {
  return built() && s.c > 0 && s.k > 0 && s.c % kL == 0 && s.k % kL == 0 && s.n > 0 &&
         s.h > 0 && s.w > 0;
}

// At least kMinTilesPerThread tiles per thread: with few tiles per chunk every chunk's matmul
// reads all of U for a few rows, and oneDNN's direct kernel was measured faster
// (bench/results/cpu/2026-11-29-zen4-epyc/own_winograd_f23_bf16_min_tiles.md).
bool WinogradF23Bf16::worthwhile(const Shape& s) {
  return fits(s) && tiles(s) >= kMinTilesPerThread * std::max(1, omp_get_max_threads());
}

int64_t WinogradF23Bf16::tiles(const Shape& s) { return s.n * ((s.h + 1) / 2) * ((s.w + 1) / 2); }

// About 2 MiB of V and M per chunk (kChunkBytes; the V and M of a tile: 6, 12, 24 KiB at 64,
// 128, 256 channels, so 341, 170 and 85 tiles), measured the best size in
// bench/results/cpu/2026-11-29-zen4-epyc/own_winograd_f23_bf16_chunks.md.
int64_t WinogradF23Bf16::chunk_tiles(const Shape& s) {
  const int64_t nthr = std::max(1, omp_get_max_threads());
  const int64_t p = tiles(s), even = (p + nthr - 1) / nthr;
  if (g_chunk_override) return std::clamp<int64_t>(even, 1, g_chunk_override);
  const int64_t cap = std::max<int64_t>(1, kChunkBytes / (16 * (2 * s.c + 4 * s.k)));
  const int64_t per_thread = (even + cap - 1) / cap;
  return (even + per_thread - 1) / per_thread;
}

// G (4x3) of F(2x2, 3x3): rows (1 0 0), (1/2 1/2 1/2), (1/2 -1/2 1/2), (0 0 1).
namespace {

/// transform_weights_into for weights of type T (bf16 bits or f32).
template <class T>
void transform_weights(const T* w, int64_t c, int64_t k, WinogradF23Bf16::WeightOrder order,
                       uint16_t* u) {
  using WeightOrder = WinogradF23Bf16::WeightOrder;
  const bool bwd = order == WeightOrder::oihw_bwd_data || order == WeightOrder::ohwi_bwd_data;
  const bool ohwi = order == WeightOrder::ohwi || order == WeightOrder::ohwi_bwd_data;
  // Blocks of 16 output channels (32 bytes of U per (xi, ci)). One output channel at a time
  // wrote U with a stride of K, measured slower:
  // bench/results/cpu/2026-11-29-zen4-epyc/own_winograd_f23_bf16_weight_transform.md.
  constexpr int64_t kB = kKernelBlock;
  for_each_kernel_block(w, c, k, bwd, ohwi, [&](int64_t k0, int64_t nl, int64_t ci,
                                                const float (&g)[3][3][kB]) {
    float t[4][3][kB];  // G g
    for (int j = 0; j < 3; ++j)
      for (int64_t l = 0; l < kB; ++l) {
        t[0][j][l] = g[0][j][l];
        t[1][j][l] = 0.5f * (g[0][j][l] + g[1][j][l] + g[2][j][l]);
        t[2][j][l] = 0.5f * (g[0][j][l] - g[1][j][l] + g[2][j][l]);
        t[3][j][l] = g[2][j][l];
      }
    for (int i = 0; i < 4; ++i) {  // (G g) G^T
      uint16_t o[4][kB];
      for (int64_t l = 0; l < kB; ++l) {
        o[0][l] = float_to_bf16(t[i][0][l]);
        o[1][l] = float_to_bf16(0.5f * (t[i][0][l] + t[i][1][l] + t[i][2][l]));
        o[2][l] = float_to_bf16(0.5f * (t[i][0][l] - t[i][1][l] + t[i][2][l]));
        o[3][l] = float_to_bf16(t[i][2][l]);
      }
      for (int j = 0; j < 4; ++j)
        std::memcpy(u + ((i * 4 + j) * c + ci) * k + k0, o[j],
                    static_cast<size_t>(nl) * sizeof(uint16_t));
    }
  });
}

}  // namespace

void WinogradF23Bf16::transform_weights_into(const uint16_t* w, int64_t c, int64_t k,
                                             WeightOrder order, uint16_t* u) {
  transform_weights(w, c, k, order, u);
}

void WinogradF23Bf16::transform_weights_into(const float* w, int64_t c, int64_t k,
                                             WeightOrder order, uint16_t* u) {
  transform_weights(w, c, k, order, u);
}

void WinogradF23Bf16::transform_input_tiles(const Shape& s, const uint16_t* x, int64_t p0,
                                            int64_t rows, uint16_t* v, int64_t ld) {
  RN50_CHECK(built(), "winograd bf16: this CPU has no AVX-512 BF16 (or has AMX)");
  f23_avx512_bf16::input_tiles(s, x, p0, rows, v, ld);
}

void WinogradF23Bf16::transform_output_grad_tiles(const Shape& s, const uint16_t* dy, int64_t p0,
                                                  int64_t rows, uint16_t* z, int64_t ld) {
  RN50_CHECK(built(), "winograd bf16: this CPU has no AVX-512 BF16 (or has AMX)");
  f23_avx512_bf16::output_grad_tiles(s, dy, p0, rows, z, ld);
}

void WinogradF23Bf16::weight_grad_from_products(const float* m, int64_t c, int64_t k,
                                                WeightOrder order, uint16_t* dw) {
  RN50_CHECK(order == WeightOrder::oihw || order == WeightOrder::ohwi,
             "winograd bf16: the weight gradient is written OIHW or OHWI");
  const bool ohwi = order == WeightOrder::ohwi;
  // G^T's rows: (1 1/2 1/2 0), (0 1/2 -1/2 0), (0 1/2 1/2 1).
  for_each_product_block<16>(m, c, k, [&](int64_t ci, int64_t kb, int64_t nb,
                                          const float (*mt)[kProductBlock]) {
    for (int64_t l = 0; l < nb; ++l) {
      float t[3][4];  // G^T m
      for (int j = 0; j < 4; ++j) {
        const float m0 = mt[j][l], m1 = mt[4 + j][l], m2 = mt[8 + j][l], m3 = mt[12 + j][l];
        t[0][j] = m0 + 0.5f * (m1 + m2);
        t[1][j] = 0.5f * (m1 - m2);
        t[2][j] = 0.5f * (m1 + m2) + m3;
      }
      const int64_t ko = kb + l;
      for (int r = 0; r < 3; ++r) {  // (G^T m) G
        const float o[3] = {t[r][0] + 0.5f * (t[r][1] + t[r][2]), 0.5f * (t[r][1] - t[r][2]),
                            0.5f * (t[r][1] + t[r][2]) + t[r][3]};
        for (int q = 0; q < 3; ++q)
          dw[ohwi ? ((ko * 3 + r) * 3 + q) * c + ci : (ko * c + ci) * 9 + r * 3 + q] =
              float_to_bf16(o[q]);
      }
    }
  });
}

struct WinogradF23Bf16::Impl {
  Shape s;
  Epilogue ep;
  int64_t th = 0, tw = 0, p = 0, chunk = 0;
  int nthr = 1;
  dnnl::engine eng;
  memory::desc ud;  ///< U (16, C, K) bf16
  std::unique_ptr<ChunkProducts> products;
  /// Per thread: V (16, chunk, C) bf16, M (16, chunk, K) f32.
  std::vector<aligned_vector<uint16_t>> v;
  std::vector<aligned_vector<float>> m;

};

WinogradF23Bf16::WinogradF23Bf16(const dnnl::engine& eng, const Shape& s, const Epilogue& ep)
    : impl_(std::make_unique<Impl>()) {
  RN50_CHECK(fits(s),
             "winograd bf16: needs a CPU with AVX-512 BF16 (without AMX), channels in multiples "
             "of 16 (C {}, K {}) and a non-empty image",
             s.c, s.k);
  Impl& im = *impl_;
  im.s = s;
  im.ep = ep;
  im.eng = eng;
  im.th = (s.h + 1) / 2;
  im.tw = (s.w + 1) / 2;
  im.p = tiles(s);
  im.nthr = std::max(1, omp_get_max_threads());
  im.chunk = chunk_tiles(s);
  const int64_t last = im.p - (im.p - 1) / im.chunk * im.chunk;
  im.ud = memory::desc({16, s.c, s.k}, dt::bf16, tag::abc);
  im.products = std::make_unique<ChunkProducts>(eng, im.ud, dt::bf16, im.chunk, last, im.nthr);
  const auto threads = static_cast<size_t>(im.nthr);
  im.v.assign(threads, aligned_vector<uint16_t>(static_cast<size_t>(16 * im.chunk * s.c)));
  im.m.assign(threads, aligned_vector<float>(static_cast<size_t>(16 * im.chunk * s.k)));
}

WinogradF23Bf16::WinogradF23Bf16(const dnnl::engine& eng, const Shape& s)
    : WinogradF23Bf16(eng, s, Epilogue{}) {}

WinogradF23Bf16::~WinogradF23Bf16() = default;

void WinogradF23Bf16::run(const uint16_t* u, const uint16_t* x, uint16_t* y) {
  RN50_CHECK(built(), "winograd bf16: this CPU has no AVX-512 BF16 (or has AMX)");
  Impl& im = *impl_;
  const int64_t chunks = (im.p + im.chunk - 1) / im.chunk;
  const memory um(im.ud, im.eng, const_cast<uint16_t*>(u));
  // Inside the parallel region oneDNN runs each matmul on the calling thread alone; the chunks
  // are equal per thread (chunk_tiles), so a static schedule balances them.
#pragma omp parallel for schedule(static) num_threads(im.nthr)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int t = omp_get_thread_num();
    const int64_t p0 = ch * im.chunk, rows = std::min(im.chunk, im.p - p0);
    uint16_t* vb = im.v[static_cast<size_t>(t)].data();
    float* mb = im.m[static_cast<size_t>(t)].data();
    transform_input_tiles(im.s, x, p0, rows, vb, rows);
    im.products->run(t, rows, vb, um, mb);
    f23_avx512_bf16::output_transform(im.s, im.ep, im.th, im.tw, mb, p0, rows, y);
  }
}

}  // namespace rn50::onednn
