// rn50: Winograd F(4x4, 3x3) with our own products (WinogradF43Conv, winograd_f43.h).
// Why: oneDNN 2.6 implements Winograd only with AVX-512 (jit_avx512_core_f32_wino_conv_4x3);
// on AVX2-only CPUs its direct jit:avx2 kernel runs ResNet-50's 3x3 stride-1 convs at 99-126
// GFLOP/s on a 2-core EPYC whose fp32 peak (rn50 bench peak) is 144, and they were half of the
// conv time of a batch-32 inference. The transforms are ours, vectorised over nChw8c's 8
// channels of one block (one AVX2 register per row element); the products are our panel GEMM
// (gemm_f32_panels.h) on U packed in its panels: oneDNN's batched matmul, which this op first
// ran on, packed U anew on every call.
#include "backend/cpu/winograd_f43.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "backend/cpu/gemm_f32_panels.h"
#include "backend/cpu/winograd_products.h"
#include "core/check.h"

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

/// One row of six 8-channel values through B^T (6x6; Lavin and Gray, F(4x4, 3x3)):
/// o = B^T d for d[0..5] with stride `ds` floats between elements, o with stride `os`.
inline void input_row(const float* d, size_t ds, float* o, size_t os) {
  for (int l = 0; l < kL; ++l) {
    const float d0 = d[0 * ds + l], d1 = d[1 * ds + l], d2 = d[2 * ds + l], d3 = d[3 * ds + l],
                d4 = d[4 * ds + l], d5 = d[5 * ds + l];
    o[0 * os + l] = 4 * d0 - 5 * d2 + d4;
    o[1 * os + l] = -4 * d1 - 4 * d2 + d3 + d4;
    o[2 * os + l] = 4 * d1 - 4 * d2 - d3 + d4;
    o[3 * os + l] = -2 * d1 - d2 + 2 * d3 + d4;
    o[4 * os + l] = 2 * d1 - d2 - 2 * d3 + d4;
    o[5 * os + l] = 4 * d1 - 5 * d3 + d5;
  }
}

/// A (6x4), the transpose of A^T below, on four 8-channel values with stride `ys`: o[0..5]
/// (stride `os`). Z = A g A^T turns a tile's 4x4 output gradient into the gradient of the 36
/// products (the weight gradient's transform).
inline void grad_row(const float* y, size_t ys, float* o, size_t os) {
  for (int l = 0; l < kL; ++l) {
    const float y0 = y[0 * ys + l], y1 = y[1 * ys + l], y2 = y[2 * ys + l], y3 = y[3 * ys + l];
    o[0 * os + l] = y0;
    o[1 * os + l] = y0 + y1 + y2 + y3;
    o[2 * os + l] = y0 - y1 + y2 - y3;
    o[3 * os + l] = y0 + 2 * y1 + 4 * y2 + 8 * y3;
    o[4 * os + l] = y0 - 2 * y1 + 4 * y2 - 8 * y3;
    o[5 * os + l] = y3;
  }
}

/// A^T (4x6) on six 8-channel values with stride `ms`: o[0..3] (stride `os`).
inline void output_row(const float* m, size_t ms, float* o, size_t os) {
  for (int l = 0; l < kL; ++l) {
    const float a0 = m[0 * ms + l], a1 = m[1 * ms + l], a2 = m[2 * ms + l], a3 = m[3 * ms + l],
                a4 = m[4 * ms + l], a5 = m[5 * ms + l];
    o[0 * os + l] = a0 + a1 + a2 + a3 + a4;
    o[1 * os + l] = a1 - a2 + 2 * a3 - 2 * a4;
    o[2 * os + l] = a1 + a2 + 4 * a3 + 4 * a4;
    o[3 * os + l] = a1 - a2 + 8 * a3 - 8 * a4 + a5;
  }
}

/// y[0..7] = ReLU?(o + b (+ y)) for one pixel's 8 channels of an output tile.
inline void store_output(const float* o, const float* b, float* y, bool accumulate, bool relu) {
#if defined(__AVX__)
  // Vectorised by hand: GCC left the branches on accumulate and relu inside a scalar loop,
  // 29% of BM_Conv3x3InferF32/wino:1/n:1/shape:1 (perf) in the output transform.
  __m256 v = _mm256_add_ps(_mm256_loadu_ps(o), _mm256_loadu_ps(b));
  if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
  if (relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
  _mm256_storeu_ps(y, v);
#else
  for (int l = 0; l < kL; ++l) {
    float val = o[l] + b[l];
    if (accumulate) val += y[l];
    y[l] = relu ? std::max(0.f, val) : val;
  }
#endif
}

}  // namespace

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
    // as 4 x 49, not 64, 64, 64, 4, which left one thread 128 tiles and the other 68
    // (BM_Conv3x3InferF32/wino:1/n:1/shape:1/cold:0, three runs each: 1.20, 1.26, 1.31 ms
    // against 1.37, 1.47, 1.44 in chunks of 64).
    const int64_t per_thread = (even + cap - 1) / cap;
    return {(even + per_thread - 1) / per_thread, 1};
  }
  // Few tiles: whole chunks, their output channels split over the threads instead.
  const int64_t chunk = std::min(cap, p), chunks = (p + chunk - 1) / chunk;
  int64_t parts = std::clamp<int64_t>(nthr / chunks, 1, std::max<int64_t>(1, s.k / kMinPartK));
  while ((s.k / kL) % parts != 0) --parts;
  return {chunk, parts};
}

// bench_micro's BM_Conv3x3InferF32 on a 2-core AVX2 EPYC (oneDNN 2.6.3), ms per call, oneDNN's
// direct jit:avx2 / this op, the caches evicted before each call but for the input (cold:1, as
// a layer's weights are inside the network at small batches), two runs of medians of 3, at
// batch 1, 2 and 4 (tiles per chunk and thread in brackets, x2: output channels in 2 parts):
//   64ch 56x56   1.67, 1.70 / 1.34, 1.32 [49];  3.46, 3.17 / 2.22, 2.12;  5.95, 5.88 / 4.09, 4.71
//   128ch 28x28  2.20, 1.73 / 1.42, 1.31 [25];  3.52, 3.14 / 2.25, 2.31;  6.72, 5.95 / 4.31, 4.27
//   256ch 14x14  1.79, 1.88 / 1.99, 1.60 [16x2]; 4.30, 4.31 / 3.02, 2.82; 6.80, 7.50 / 5.01, 4.42
//   512ch 7x7    2.54, 2.42 / 3.12, 3.29 [4x2];  5.02, 5.79 / 3.61, 4.17 [8x2]; 9.16, 8.69 /
//                5.57, 5.34 [16x2]
// and at batch 32 (warm; [64]) 29.8, 30.4 / 26.0, 22.5 / 35.7, 35.4 / 28.7, 26.5 against the
// direct kernel's 51.6, 66.4, 51.3, 54.6 (one run). With its products on oneDNN's batched
// matmul, which packed U anew for every call, this op lost at batch 1 at 64, 256 and 512
// channels (2.02, 3.05, 8.72 ms in the same runs) and at 512 up to batch 4. Every task's
// products read its part of U (36 C K floats: 9.4 MiB at 256 channels, 38 MiB at 512) from
// memory, 4x the direct conv's weights: only one image's 512-channel 7x7 conv, 4 tiles, loses.
// So, with U transformed once: chunks of 8 tiles or more, of layers at least one tile (4x4
// outputs) wide and high: a 2x2 or 1x1 layer (ResNet's layer4 at crops of 64 px or less) would
// spend a tile's 36 products per channel pair on 4 or 1 outputs, where the direct conv spends 9
// per output.
bool WinogradF43Conv::worthwhile_cached(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0 || s.h < 4 || s.w < 4) return false;
  return split(s).chunk_tiles >= 8;
}

// With U transformed on every call (the backend's forward and backward data, whose weights
// change every training step), each call also reads the weights and writes all of U (4x the
// weights) before a product runs: the rule measured when this op's products were oneDNN's
// matmul, which likewise packed U anew on every call (BM_Conv3x3InferF32, direct jit:avx2 /
// this op, ms, batch 1: 128ch 28x28 1.79 / 0.98 [25 tiles per chunk], 256ch 14x14 1.85 / 1.69
// [16x2], 512ch 7x7 2.51 / 6.85 [4x2]; batch 2, 512ch 5.20 / 9.36 [8x2]; batch 4, 512ch 8.86 /
// 14.8 [16x2]; batch 32, 512ch 93.1 / 33.7 [64]): chunks of 48 tiles or more, and of 16 or more
// up to 256 x 256 channels. Taking the cached rule here instead (b66cd50) sent the tiny
// training runs' 128- to 512-channel layers of 8 tiles to this op, where transforming U took
// three quarters of their steps.
bool WinogradF43Conv::worthwhile(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0) return false;
  const int64_t rows = split(s).chunk_tiles;
  return rows >= 48 || (s.c * s.k <= 256 * 256 && rows >= kMinChunkTiles);
}

// bench_micro's BM_Conv3x3TrainF32/<own>/pass:2/<n> on a 2-core AVX2 EPYC, ms per call,
// im2col + matmuls / this. Batch 32 (one run): 64ch 56x56 108 / 64.7, 128ch 28x28 117 / 42.8,
// 256ch 14x14 71.0 / 37.6, 512ch 7x7 97.9 / 64.3. Small batches (medians of 3): 64ch 56x56
// n 1 (196 tiles) 2.08 / 1.14; 128ch 28x28 n 1 (49 tiles) 2.63 / 1.58; 256ch 14x14 n 1 (16)
// 2.55 / 4.48, n 2 (32) 4.68 / 5.54, n 4 (64) 10.1 / 7.83; 512ch 7x7 n 8 (32) 17.8 / 24.0,
// n 16 (64) 34.5 / 32.5, n 32 (128) 70.6 / 64.0. This one's fixed cost grows with C x K (M is
// 36 C K floats, written and transformed whatever the tile count), so the widest layers need
// more tiles before it pays.
bool WinogradF43Conv::weight_grad_worthwhile(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0) return false;
  const int64_t n = tiles(s);
  return n >= 48 && (s.c * s.k <= 256 * 256 || n >= 96);
}

void WinogradF43Conv::transform_weights_into(const float* w, int64_t c, int64_t k,
                                             WeightOrder order, float* u) {
  const bool bwd = order == WeightOrder::oihw_bwd_data || order == WeightOrder::ohwi_bwd_data;
  const bool ohwi = order == WeightOrder::ohwi || order == WeightOrder::ohwi_bwd_data;
  constexpr int64_t kB = kKernelBlock;  // 16 floats: one cache line of U per (xi, ci)
  static_assert(kB == kPanelCols, "a kernel block is one panel of U");
  for_each_kernel_block(w, c, k, bwd, ohwi, [&](int64_t k0, int64_t nl, int64_t ci,
                                                const float (&g)[3][3][kB]) {
    float t[6][3][kB];  // G g
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 3; ++j)
        for (int l = 0; l < kB; ++l)
          t[i][j][l] = kG[i][0] * g[0][j][l] + kG[i][1] * g[1][j][l] + kG[i][2] * g[2][j][l];
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) {  // (G g) G^T
        float o[kB];
        for (int l = 0; l < kB; ++l)
          o[l] = t[i][0][l] * kG[j][0] + t[i][1][l] * kG[j][1] + t[i][2][l] * kG[j][2];
        // Panel-packed (gemm_f32_panels.h): this block is panel k0 / 16, nl columns wide.
        std::memcpy(u + (i * 6 + j) * c * k + k0 * c + ci * nl, o, static_cast<size_t>(nl) * 4);
      }
  });
}

std::shared_ptr<const aligned_vector<float>> WinogradF43Conv::transform_weights(const float* w,
                                                                             int64_t c,
                                                                             int64_t k) {
  auto u = std::make_shared<aligned_vector<float>>(static_cast<size_t>(36 * c * k));
  transform_weights_into(w, c, k, WeightOrder::oihw, u->data());
  return u;
}

/// Offset of channel block `cb` of image n (its pixel (0, 0)) in an activation of `ch`
/// channels: nChw8c or NHWC (s.nhwc).
inline int64_t block_offset(const WinogradF43Conv::Shape& s, int64_t ch, int64_t n, int64_t cb) {
  return s.nhwc ? n * s.h * s.w * ch + cb * kL : (n * (ch / kL) + cb) * s.h * s.w * kL;
}

namespace {

/// The weight gradient's destinations larger than this (36 positions x ld rows x channels x 4
/// bytes: its chunks of 16 MiB) are written through a staging block with non-temporal stores;
/// smaller ones, and the forward's per-thread buffers of any size, directly (the forward's
/// matmul reads its buffer from the caches next: staged, BM_Conv3x3InferF32 took 1.04-1.20x
/// the time at 64 to 256 channels, paired medians of three runs; at 512 channels in chunks of
/// 64 tiles the buffer is 4.5 MiB and must not be streamed out either).
constexpr int64_t kStreamBytes = 4 << 20;
/// Floats of the staging block (256 KiB: in L2).
constexpr int64_t kStageFloats = 64 * 1024;

/// Where a tile transform writes a block of tiles of its destination (36 rows of ld tiles x
/// ch floats): straight into it, or, for large destinations where the caller allows it
/// (may_stream), into the calling thread's staging block (36 positions x a block of tiles x
/// ch) that `flush` then streams out.
/// Written straight, a tile's 36 pieces go to 36 places at once, too many streams for the
/// prefetchers, and each store first reads its line from memory: in the 64-channel weight
/// gradient at batch 32 the two transforms took half the time (perf: 52% of the samples of
/// BM_Conv3x3TrainF32/own:1/pass:2/n:32/shape:1, their stores the hottest instructions;
/// staged and streamed, 40% with the copy-out).
class TileSink {
 public:
  /// `pos_stride`: floats between the destination's positions (at least ld x ch); a staged
  /// sink's destination is dense (ld x ch).
  TileSink(float* out, int64_t ld, int64_t ch, bool may_stream, int64_t pos_stride)
      : out_(out),
        ld_(ld),
        ch_(ch),
        staged_(may_stream && 36 * ld * ch * 4 > kStreamBytes),
        base_(out),
        pos_(pos_stride) {
    if (staged_) {
      thread_local aligned_vector<float> stage;
      stride_ = std::max<int64_t>(1, kStageFloats / (36 * ch));
      if (stage.size() < static_cast<size_t>(36 * stride_ * ch))
        stage.resize(static_cast<size_t>(36 * stride_ * ch));
      base_ = stage.data();
      pos_ = stride_ * ch;
    }
  }
  /// Tiles per block: all of them unless staged.
  int64_t block(int64_t rows) const { return staged_ ? stride_ : rows; }
  /// Position xi of tile r of the block that starts at tile r0, channel c0 (no branch: the
  /// transforms' innermost stores).
  float* at(int xi, int64_t r, int64_t r0, int64_t c0) const {
    return base_ + xi * pos_ + (r - r0) * ch_ + c0;
  }
  /// Streams a staged block out (each of its 36 rows one contiguous run, non-temporal stores,
  /// then a fence: the matmul that reads the destination runs after this thread's stores are
  /// visible); nothing unless staged.
  void flush(int64_t r0, int64_t nb) const {
    if (!staged_) return;
    const int64_t n = nb * ch_;
    for (int xi = 0; xi < 36; ++xi) {
      float* o = out_ + (xi * ld_ + r0) * ch_;
      const float* in = base_ + xi * stride_ * ch_;
#if defined(__AVX__)
      int64_t i = 0;
      for (; i < n && reinterpret_cast<uintptr_t>(o + i) % 32 != 0; ++i) o[i] = in[i];
      for (; i + 8 <= n; i += 8) _mm256_stream_ps(o + i, _mm256_loadu_ps(in + i));
      for (; i < n; ++i) o[i] = in[i];
#else
      std::memcpy(o, in, static_cast<size_t>(n) * sizeof(float));
#endif
    }
#if defined(__AVX__)
    _mm_sfence();
#endif
  }

 private:
  float* out_;
  int64_t ld_, ch_;
  bool staged_;
  float* base_;         ///< where at() writes: out_, or the staging block
  int64_t stride_ = 0;  ///< a staged block's tiles
  int64_t pos_;         ///< floats between positions where at() writes
};

}  // namespace

void WinogradF43Conv::transform_input_tiles(const Shape& s, const float* x, int64_t p0,
                                            int64_t rows, float* v, int64_t ld,
                                            bool may_stream, int64_t pos_stride) {
  const int64_t th = (s.h + 3) / 4, tw = (s.w + 3) / 4;
  const int64_t cb_n = s.c / kL, ps = s.nhwc ? s.c : kL;  // floats between pixels
  RN50_CHECK(pos_stride == 0 || (pos_stride >= ld * s.c && !may_stream),
             "winograd: positions {} floats apart in a destination of {} x {}", pos_stride, ld,
             s.c);
  const TileSink sink(v, ld, s.c, may_stream, pos_stride ? pos_stride : ld * s.c);
  for (int64_t r0 = 0; r0 < rows; r0 += sink.block(rows)) {
    const int64_t nb = std::min(sink.block(rows), rows - r0);
    for (int64_t r = r0; r < r0 + nb; ++r) {
      const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
      const int64_t h0 = ty * 4 - 1, w0 = tx * 4 - 1;
      const bool inside = h0 >= 0 && w0 >= 0 && h0 + 6 <= s.h && w0 + 6 <= s.w;
      for (int64_t cb = 0; cb < cb_n; ++cb) {
        const float* xb = x + block_offset(s, s.c, n, cb);
        float d[6][6][kL];
        if (inside && !s.nhwc) {
          for (int i = 0; i < 6; ++i)
            std::memcpy(d[i], xb + ((h0 + i) * s.w + w0) * kL, sizeof(d[i]));
        } else {
          for (int i = 0; i < 6; ++i)
            for (int j = 0; j < 6; ++j) {
              const int64_t hh = h0 + i, ww = w0 + j;
              if (hh < 0 || hh >= s.h || ww < 0 || ww >= s.w)
                std::memset(d[i][j], 0, sizeof(d[i][j]));
              else
                std::memcpy(d[i][j], xb + (hh * s.w + ww) * ps, sizeof(d[i][j]));
            }
        }
        float t1[6][6][kL];  // B^T d: down the columns
        for (int j = 0; j < 6; ++j) input_row(d[0][j], 6 * kL, t1[0][j], 6 * kL);
        for (int i = 0; i < 6; ++i) {
          float o[6][kL];  // (B^T d) B: along row i
          input_row(t1[i][0], kL, o[0], kL);
          for (int j = 0; j < 6; ++j)
            std::memcpy(sink.at(i * 6 + j, r, r0, cb * kL), o[j], sizeof(o[j]));
        }
      }
    }
    sink.flush(r0, nb);
  }
}

void WinogradF43Conv::transform_output_grad_tiles(const Shape& s, const float* dy, int64_t p0,
                                                  int64_t rows, float* z, int64_t ld) {
  const int64_t th = (s.h + 3) / 4, tw = (s.w + 3) / 4;
  const int64_t kb_n = s.k / kL, ps = s.nhwc ? s.k : kL;  // floats between pixels
  const TileSink sink(z, ld, s.k, true, ld * s.k);
  for (int64_t r0 = 0; r0 < rows; r0 += sink.block(rows)) {
    const int64_t nb = std::min(sink.block(rows), rows - r0);
    for (int64_t r = r0; r < r0 + nb; ++r) {
      const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
      const int64_t oh = std::min<int64_t>(4, s.h - ty * 4);
      const int64_t ow = std::min<int64_t>(4, s.w - tx * 4);
      for (int64_t kb = 0; kb < kb_n; ++kb) {
        const float* yb = dy + block_offset(s, s.k, n, kb);
        float g[4][4][kL] = {};  // the tile's output gradient, zero outside the image
        for (int i = 0; i < oh; ++i)
          for (int j = 0; j < ow; ++j)
            std::memcpy(g[i][j], yb + ((ty * 4 + i) * s.w + tx * 4 + j) * ps, sizeof(g[i][j]));
        float t1[6][4][kL];  // A g: down the columns
        for (int j = 0; j < 4; ++j) grad_row(g[0][j], 4 * kL, t1[0][j], 4 * kL);
        for (int i = 0; i < 6; ++i) {
          float o[6][kL];  // (A g) A^T: along row i
          grad_row(t1[i][0], kL, o[0], kL);
          for (int j = 0; j < 6; ++j)
            std::memcpy(sink.at(i * 6 + j, r, r0, kb * kL), o[j], sizeof(o[j]));
        }
      }
    }
    sink.flush(r0, nb);
  }
}

void WinogradF43Conv::weight_grad_from_products(const float* m, int64_t c, int64_t k,
                                                WeightOrder order, float* dw) {
  RN50_CHECK(order == WeightOrder::oihw || order == WeightOrder::ohwi,
             "winograd: the weight gradient is written OIHW or OHWI");
  RN50_CHECK(k % kL == 0, "winograd: the weight gradient needs a multiple of 8 output channels");
  const bool ohwi = order == WeightOrder::ohwi;
  for_each_product_block<36>(m, c, k, [&](int64_t ci, int64_t kb, int64_t nb,
                                          const float (*mt)[kProductBlock]) {
    for (int64_t k0 = 0; k0 < nb; k0 += kL) {
      float t[3][6][kL];  // G^T m
      for (int j = 0; j < 6; ++j) {
        float a[3][kL] = {};
        for (int i = 0; i < 6; ++i)
          for (int r = 0; r < 3; ++r)
            for (int l = 0; l < kL; ++l) a[r][l] += kG[i][r] * mt[i * 6 + j][k0 + l];
        for (int r = 0; r < 3; ++r)
          for (int l = 0; l < kL; ++l) t[r][j][l] = a[r][l];
      }
      for (int r = 0; r < 3; ++r)
        for (int q = 0; q < 3; ++q) {
          float a[kL] = {};  // (G^T m) G
          for (int j = 0; j < 6; ++j)
            for (int l = 0; l < kL; ++l) a[l] += t[r][j][l] * kG[j][q];
          for (int l = 0; l < kL; ++l) {
            const int64_t ko = kb + k0 + l;
            dw[ohwi ? ((ko * 3 + r) * 3 + q) * c + ci : (ko * c + ci) * 9 + r * 3 + q] = a[l];
          }
        }
    }
  });
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
  /// channels [k0, k0 + kt) into y: A^T m A + bias (+ y), ReLU.
  void output_transform(const float* mb, int64_t p0, int64_t rows, int64_t k0, float* y) const {
    const int64_t ps = s.nhwc ? s.k : kL;  // floats between pixels
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
      const int64_t oh = std::min<int64_t>(4, s.h - ty * 4);
      const int64_t ow = std::min<int64_t>(4, s.w - tx * 4);
      for (int64_t kb = k0 / kL; kb < (k0 + kt) / kL; ++kb) {
        float mt[6][6][kL];
        for (int xi = 0; xi < 36; ++xi)
          std::memcpy(mt[xi / 6][xi % 6], mb + xi * mpos + r * kt + kb * kL - k0,
                      sizeof(mt[0][0]));
        float t1[4][6][kL];  // A^T m: down the columns
        for (int j = 0; j < 6; ++j) output_row(mt[0][j], 6 * kL, t1[0][j], 6 * kL);
        float* yb = y + block_offset(s, s.k, n, kb);
        static constexpr float kZero[kL] = {};
        const float* b = bias ? bias + kb * kL : kZero;
        for (int i = 0; i < oh; ++i) {
          float o[4][kL];  // (A^T m) A: along row i
          output_row(t1[i][0], kL, o[0], kL);
          float* yr = yb + ((ty * 4 + i) * s.w + tx * 4) * ps;
          for (int j = 0; j < ow; ++j) store_output(o[j], b, yr + j * ps, accumulate, relu);
        }
      }
    }
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
  // one image's 256-channel 14x14 conv spent 0.25 ms of its 1.5 ms on the input transform.
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
