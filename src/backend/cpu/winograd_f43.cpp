// rn50: Winograd F(4x4, 3x3) on oneDNN's batched matmul (WinogradF43Conv, winograd_f43.h).
// Why: oneDNN 2.6 implements Winograd only with AVX-512 (jit_avx512_core_f32_wino_conv_4x3);
// on AVX2-only CPUs its direct jit:avx2 kernel runs ResNet-50's 3x3 stride-1 convs at 99-126
// GFLOP/s on a 2-core EPYC whose fp32 peak (rn50 bench peak) is 144, and they were half of the
// conv time of a batch-32 inference. The transforms are ours, vectorised over nChw8c's 8
// channels of one block (one AVX2 register per row element); the products are oneDNN's.
#include "backend/cpu/winograd_f43.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/check.h"

namespace rn50::onednn {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

int64_t g_chunk_override = 0;  ///< set_winograd_chunk_tiles (0: none)

constexpr int kL = 8;  ///< channels per nChw8c block

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

}  // namespace

void set_winograd_chunk_tiles(std::optional<int64_t> tiles) {
  RN50_CHECK(!tiles || (*tiles >= 1 && *tiles <= WinogradF43Conv::kMaxChunkTiles),
             "winograd: chunk of {} tiles", tiles.value_or(0));
  g_chunk_override = tiles.value_or(0);
}

int64_t WinogradF43Conv::tiles(const Shape& s) { return s.n * ((s.h + 3) / 4) * ((s.w + 3) / 4); }

int64_t WinogradF43Conv::chunk_tiles(const Shape& s) {
  const int64_t nthr = std::max(1, omp_get_max_threads());
  const int64_t cap = g_chunk_override ? g_chunk_override : kMaxChunkTiles;
  return std::clamp<int64_t>((tiles(s) + nthr - 1) / nthr, 1, cap);
}

// bench_micro's BM_Conv3x3InferF32 on a 2-core AVX2 EPYC (oneDNN 2.6.3), ms per call, direct
// jit:avx2 / this op, batch 1, 2, 4, 32 (tiles per chunk in brackets):
//   64ch 56x56   1.72 / 1.21 [64], 3.99 / 2.80 [64], 8.39 / 6.00 [64], 107 / 50.3 [64]
//   128ch 28x28  2.64 / 1.14 [25], 3.22 / 2.39 [49], 7.37 / 5.42 [64], 56.7 / 34.9 [64]
//   256ch 14x14  1.89 / 3.81 [8],  3.70 / 4.60 [16], 7.74 / 7.55 [32], 60.2 / 44.5 [64]
//   512ch 7x7    2.78 / 12.5 [2],  4.73 / 13.8 [4],  8.66 / 17.0 [8],  77.0 / 32.7 [64]
// Every chunk's products read all of U (36 C K floats: 9.4 MiB at 256 channels, 38 MiB at
// 512): it wins with chunks of 48 tiles or more, and with 16 or more where U is small (up to
// 128 x 128 channels, 2.4 MiB).
bool WinogradF43Conv::worthwhile(const Shape& s) {
  if (s.c % kL != 0 || s.k % kL != 0) return false;
  const int64_t rows = chunk_tiles(s);
  return rows >= 48 || (s.c * s.k <= 128 * 128 && rows >= 16);
}

std::shared_ptr<const std::vector<float>> WinogradF43Conv::transform_weights(const float* w,
                                                                             int64_t c,
                                                                             int64_t k) {
  // G (6x3), Lavin and Gray's F(4x4, 3x3).
  static constexpr float G[6][3] = {{1.f / 4, 0, 0},
                                    {-1.f / 6, -1.f / 6, -1.f / 6},
                                    {-1.f / 6, 1.f / 6, -1.f / 6},
                                    {1.f / 24, 1.f / 12, 1.f / 6},
                                    {1.f / 24, -1.f / 12, 1.f / 6},
                                    {0, 0, 1}};
  auto u = std::make_shared<std::vector<float>>(static_cast<size_t>(36 * c * k));
  for (int64_t ko = 0; ko < k; ++ko)
    for (int64_t ci = 0; ci < c; ++ci) {
      const float* g = w + (ko * c + ci) * 9;
      float t[6][3];  // G g
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 3; ++j)
          t[i][j] = G[i][0] * g[0 * 3 + j] + G[i][1] * g[1 * 3 + j] + G[i][2] * g[2 * 3 + j];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j)  // (G g) G^T
          (*u)[static_cast<size_t>(((i * 6 + j) * c + ci) * k + ko)] =
              t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
    }
  return u;
}

struct WinogradF43Conv::Impl {
  Shape s;
  std::shared_ptr<const std::vector<float>> u;
  const float* bias = nullptr;
  bool relu = false, accumulate = false;
  int64_t th = 0, tw = 0, p = 0, chunk = 0;
  int nthr = 1;
  dnnl::engine eng;
  memory u_mem;
  /// The products of a full chunk [0] and of the shorter last one [1] (absent when none).
  dnnl::matmul mm[2];
  memory::desc mm_scratch[2];
  /// Per thread: V (36, chunk, C), M (36, chunk, K), the matmul's scratchpad, a stream.
  std::vector<std::vector<float>> v, m;
  std::vector<std::vector<char>> scratch;
  std::vector<dnnl::stream> streams;

  /// Tiles [p0, p0 + rows) of x into V (36, rows, C).
  void input_transform(const float* x, int64_t p0, int64_t rows, float* vb) const {
    const int64_t cb_n = s.c / kL, plane = s.h * s.w * kL;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
      const int64_t h0 = ty * 4 - 1, w0 = tx * 4 - 1;
      const bool inside = h0 >= 0 && w0 >= 0 && h0 + 6 <= s.h && w0 + 6 <= s.w;
      for (int64_t cb = 0; cb < cb_n; ++cb) {
        const float* xb = x + (n * cb_n + cb) * plane;
        float d[6][6][kL];
        if (inside) {
          for (int i = 0; i < 6; ++i)
            std::memcpy(d[i], xb + ((h0 + i) * s.w + w0) * kL, sizeof(d[i]));
        } else {
          for (int i = 0; i < 6; ++i)
            for (int j = 0; j < 6; ++j) {
              const int64_t hh = h0 + i, ww = w0 + j;
              if (hh < 0 || hh >= s.h || ww < 0 || ww >= s.w)
                std::memset(d[i][j], 0, sizeof(d[i][j]));
              else
                std::memcpy(d[i][j], xb + (hh * s.w + ww) * kL, sizeof(d[i][j]));
            }
        }
        float t1[6][6][kL];  // B^T d: down the columns
        for (int j = 0; j < 6; ++j) input_row(d[0][j], 6 * kL, t1[0][j], 6 * kL);
        for (int i = 0; i < 6; ++i) {
          float o[6][kL];  // (B^T d) B: along row i
          input_row(t1[i][0], kL, o[0], kL);
          for (int j = 0; j < 6; ++j)
            std::memcpy(vb + ((i * 6 + j) * rows + r) * s.c + cb * kL, o[j], sizeof(o[j]));
        }
      }
    }
  }

  /// M (36, rows, K) of tiles [p0, p0 + rows) into y: A^T m A + bias (+ y), ReLU.
  void output_transform(const float* mb, int64_t p0, int64_t rows, float* y) const {
    const int64_t kb_n = s.k / kL, plane = s.h * s.w * kL;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = p0 + r, n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
      const int64_t oh = std::min<int64_t>(4, s.h - ty * 4);
      const int64_t ow = std::min<int64_t>(4, s.w - tx * 4);
      for (int64_t kb = 0; kb < kb_n; ++kb) {
        float mt[6][6][kL];
        for (int xi = 0; xi < 36; ++xi)
          std::memcpy(mt[xi / 6][xi % 6], mb + (xi * rows + r) * s.k + kb * kL, sizeof(mt[0][0]));
        float t1[4][6][kL];  // A^T m: down the columns
        for (int j = 0; j < 6; ++j) output_row(mt[0][j], 6 * kL, t1[0][j], 6 * kL);
        float* yb = y + (n * kb_n + kb) * plane;
        const float* b = bias + kb * kL;
        for (int i = 0; i < oh; ++i) {
          float o[4][kL];  // (A^T m) A: along row i
          output_row(t1[i][0], kL, o[0], kL);
          float* yr = yb + ((ty * 4 + i) * s.w + tx * 4) * kL;
          for (int j = 0; j < ow; ++j)
            for (int l = 0; l < kL; ++l) {
              float val = o[j][l] + b[l];
              if (accumulate) val += yr[j * kL + l];
              yr[j * kL + l] = relu ? std::max(0.f, val) : val;
            }
        }
      }
    }
  }
};

WinogradF43Conv::WinogradF43Conv(const dnnl::engine& eng, const Shape& s,
                                 std::shared_ptr<const std::vector<float>> u, const float* bias,
                                 bool relu, bool accumulate)
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
  im.eng = eng;
  im.th = (s.h + 3) / 4;
  im.tw = (s.w + 3) / 4;
  im.p = tiles(s);
  im.nthr = std::max(1, omp_get_max_threads());
  im.chunk = chunk_tiles(s);
  const int64_t last = im.p - (im.p - 1) / im.chunk * im.chunk;
  im.u_mem = memory({{36, s.c, s.k}, dt::f32, tag::abc}, eng, const_cast<float*>(im.u->data()));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  size_t scratch = 0;
  for (int i = 0; i < (last == im.chunk ? 1 : 2); ++i) {
    const int64_t rows = i == 0 ? im.chunk : last;
    const memory::desc vd({36, rows, s.c}, dt::f32, tag::abc), md({36, rows, s.k}, dt::f32,
                                                                      tag::abc);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(vd, im.u_mem.get_desc(), md), attr, eng);
    im.mm[i] = dnnl::matmul(pd);
    im.mm_scratch[i] = pd.scratchpad_desc();
    scratch = std::max(scratch, pd.scratchpad_desc().get_size());
  }
  const size_t threads = static_cast<size_t>(im.nthr);
  im.v.assign(threads, std::vector<float>(static_cast<size_t>(36 * im.chunk * s.c)));
  im.m.assign(threads, std::vector<float>(static_cast<size_t>(36 * im.chunk * s.k)));
  im.scratch.assign(threads, std::vector<char>(scratch));
  for (size_t t = 0; t < threads; ++t) im.streams.emplace_back(eng);
}

WinogradF43Conv::~WinogradF43Conv() = default;

void WinogradF43Conv::run(const float* x, float* y) {
  Impl& im = *impl_;
  const int64_t chunks = (im.p + im.chunk - 1) / im.chunk;
  // Inside the parallel region oneDNN runs each matmul on the calling thread alone.
#pragma omp parallel for schedule(dynamic) num_threads(im.nthr)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const int64_t p0 = ch * im.chunk, rows = std::min(im.chunk, im.p - p0);
    const int which = rows == im.chunk ? 0 : 1;
    float* vb = im.v[t].data();
    float* mb = im.m[t].data();
    im.input_transform(x, p0, rows, vb);
    const memory vm({{36, rows, im.s.c}, dt::f32, tag::abc}, im.eng, vb);
    const memory mm({{36, rows, im.s.k}, dt::f32, tag::abc}, im.eng, mb);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, vm}, {DNNL_ARG_WEIGHTS, im.u_mem}, {DNNL_ARG_DST, mm}};
    if (!im.scratch[t].empty())
      args[DNNL_ARG_SCRATCHPAD] = memory(im.mm_scratch[which], im.eng, im.scratch[t].data());
    im.mm[which].execute(im.streams[t], args);
    im.streams[t].wait();
    im.output_transform(mb, p0, rows, y);
  }
}

}  // namespace rn50::onednn
