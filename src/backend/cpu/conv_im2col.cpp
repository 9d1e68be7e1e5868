// rn50: the weight gradient of KxK convolutions on NHWC activations as im2col + oneDNN matmuls
// (conv_bwd_weights_im2col, conv_im2col.h).
// Why: on AMX CPUs oneDNN 2.6 computes the bf16 weight gradient of ResNet-50's 3x3 convs with
// 14x14 and 7x7 outputs through its jit:avx512_core_amx_bf16 direct kernel, slower than its
// brgemm matmul running the same sums, one product per chunk of output positions (measured in
// bench/results/cpu/2026-11-26-sapphire-rapids/im2col_wgrad_bf16.md); on CPUs without AVX-512
// oneDNN's f32 jit:avx2 kernel computes every KxK weight gradient of ResNet-50 slower than its
// f32 GEMM does the same sums (bench/results/cpu/2026-11-27-avx2-epyc/im2col_wgrad_f32.md).
// The products are the convolution's sums in another order: results differ by
// rounding only (f32 accumulation throughout).
#include "backend/cpu/conv_im2col.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "rn50/profile.h"

namespace rn50::onednn {

using dnnl::memory;
using tag = memory::format_tag;

namespace {

/// The size of one chunk of the im2col matrix: small enough to stay in the caches between its
/// writing and the matmul reading it, large enough that each matmul has hundreds of rows.
/// Chunks of 4-16 MiB were measured faster than 1 MiB at ResNet-50's layer3/4 shapes:
/// bench/results/cpu/2026-11-26-sapphire-rapids/im2col_chunk_bytes.md. The
/// 512-channel convs' whole Col (14.4 MiB) is then two chunks.
constexpr size_t kIm2colChunkBytes = size_t{8} << 20;
/// set_im2col_chunk_bytes's override (0: none).
size_t g_chunk_override = 0;
size_t chunk_bytes() { return g_chunk_override ? g_chunk_override : kIm2colChunkBytes; }

constexpr ProfileOp kIm2col{"im2col activations (conv bwd_weights)", "reorder", "bwd_weights"};

/// The geometry of one conv: x (N,H,W,C), dw (K,R,S,C) in the product, dy (N,OH,OW,K).
struct Geometry {
  int64_t N = 0, C = 0, H = 0, W = 0, K = 0, R = 0, S = 0, OH = 0, OW = 0, stride = 1, pad = 0;
  size_t es = 0;  ///< bytes per element
  int64_t P() const { return N * OH * OW; }
  int64_t cols() const { return R * S * C; }
};

/// Col rows [p0, p0 + rows) (each R*S*C values, (r,s,c) order) from x: for every (position,
/// r), the S pixels of x's row ih = oh*stride - pad + r starting at column ow*stride - pad are
/// contiguous in NHWC, so each is one memcpy of up to S*C values plus zeros outside x.
void im2col(const Geometry& g, const void* x, int64_t p0, int64_t rows, void* col) {
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(col);
  const size_t px = static_cast<size_t>(g.C) * g.es;  // one pixel's bytes
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t p = p0 + i, n = p / (g.OH * g.OW), ohw = p % (g.OH * g.OW);
    const int64_t ih0 = (ohw / g.OW) * g.stride - g.pad, iw0 = (ohw % g.OW) * g.stride - g.pad;
    // The taps s in [lo, hi) fall inside x's columns.
    const int64_t lo = std::clamp<int64_t>(-iw0, 0, g.S);
    const int64_t hi = std::clamp<int64_t>(g.W - iw0, lo, g.S);
    char* out = dst + static_cast<size_t>(i) * static_cast<size_t>(g.cols()) * g.es;
    for (int64_t r = 0; r < g.R; ++r, out += static_cast<size_t>(g.S) * px) {
      const int64_t ih = ih0 + r;
      if (ih < 0 || ih >= g.H) {
        std::memset(out, 0, static_cast<size_t>(g.S) * px);
        continue;
      }
      if (lo > 0) std::memset(out, 0, static_cast<size_t>(lo) * px);
      if (hi > lo)
        std::memcpy(out + static_cast<size_t>(lo) * px,
                    src + static_cast<size_t>((n * g.H + ih) * g.W + iw0 + lo) * px,
                    static_cast<size_t>(hi - lo) * px);
      if (hi < g.S)
        std::memset(out + static_cast<size_t>(hi) * px, 0, static_cast<size_t>(g.S - hi) * px);
    }
  }
}

/// dAcc[K, cols] += dY[rows, K]^T . Col[rows, cols] (f32 accumulator, oneDNN's sum post-op).
Exec make_accumulating_matmul(OnednnBackend& be, const Geometry& g, int64_t rows, DType dt) {
  const memory::desc a = md_of({g.K, rows}, dt, tag::ba), b = md_of({rows, g.cols()}, dt, tag::ab),
                     c = md_of({g.K, g.cols()}, DType::f32, tag::ab);
  dnnl::primitive_attr attr = OnednnBackend::attr();
  dnnl::post_ops po;
  po.append_sum(1.f);
  attr.set_post_ops(po);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, be.engine());
  return be.make_exec(pd, dnnl::matmul(pd),
                      {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
}

/// The cached products (a full chunk, the last, shorter one) and the accumulator's reorder into
/// dw's dtype and layout.
struct Im2colEntry : CacheEntry {
  Geometry g;
  int64_t chunk_rows = 0, chunks = 0, tail_rows = 0;
  Exec mm, mm_tail, out;
};

Im2colEntry& entry_for(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                       const Tensor& dy, const Tensor& dw) {
  Key k = key(Tag::conv_im2col).add(x).add(dy).add(dw).add(p.stride).add(p.pad).add(
      static_cast<int64_t>(chunk_bytes()));
  return be.cached<Im2colEntry>(k, [&] {
    auto e = std::make_unique<Im2colEntry>();
    Geometry& g = e->g;
    g = Geometry{x.n(),  x.c(),    x.h(),     x.w(),  dw.n(), dw.h(), dw.w(), dy.h(), dy.w(),
                 p.stride, p.pad, dtype_size(x.dtype())};
    const int64_t row_bytes = g.cols() * static_cast<int64_t>(g.es);
    e->chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(chunk_bytes()) / row_bytes,
                                        std::min<int64_t>(16, g.P()), g.P());
    e->chunks = (g.P() + e->chunk_rows - 1) / e->chunk_rows;
    e->tail_rows = g.P() - (e->chunks - 1) * e->chunk_rows;
    e->mm = make_accumulating_matmul(be, g, e->chunk_rows, x.dtype());
    if (e->tail_rows != e->chunk_rows)
      e->mm_tail = make_accumulating_matmul(be, g, e->tail_rows, x.dtype());
    // The accumulator is K x (R,S,C): OHWI in f32.
    const memory::desc acc = md_of({g.K, g.C, g.R, g.S}, DType::f32, tag::ohwi);
    const memory::desc user = md_of({g.K, g.C, g.R, g.S}, dw.dtype(),
                                    dw.layout() == Layout::NHWC ? tag::ohwi : tag::oihw);
    dnnl::reorder::primitive_desc rpd(be.engine(), acc, be.engine(), user, OnednnBackend::attr());
    e->out = be.make_exec(rpd, dnnl::reorder(rpd), {{DNNL_ARG_FROM, acc}, {DNNL_ARG_TO, user}});
    return e;
  });
}

}  // namespace

void set_im2col_chunk_bytes(std::optional<size_t> bytes) { g_chunk_override = bytes.value_or(0); }

bool conv_bwd_weights_as_im2col(const Conv2dParams& p, const Tensor& x, const Tensor& dw,
                                const Tensor& dy) {
  if (x.ndim() != 4 || dw.ndim() != 4 || dy.ndim() != 4) return false;
  if (dw.h() * dw.w() <= 1 || x.layout() != Layout::NHWC || dy.layout() != Layout::NHWC ||
      x.dtype() != dy.dtype() || x.dtype() != dw.dtype())
    return false;
  return conv_im2col_allowed(x.dtype(), ConvShapeInfo{x.c(), dw.n(), dw.h(), p.stride,
                                                      dy.h() * dy.w()});
}

void conv_bwd_weights_im2col(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                             const Tensor& dy, Tensor& dw) {
  Im2colEntry& e = entry_for(be, p, x, dy, dw);
  const Geometry& g = e.g;
  const size_t acc_bytes = static_cast<size_t>(g.K * g.cols()) * sizeof(float);
  void* acc = be.scratch(kScratchWeights, acc_bytes);
  std::memset(acc, 0, acc_bytes);
  void* col = be.scratch(kScratchAct0, static_cast<size_t>(e.chunk_rows * g.cols()) * g.es);
  const auto* dyp = static_cast<const char*>(dy.data());
  for (int64_t c = 0; c < e.chunks; ++c) {
    const int64_t p0 = c * e.chunk_rows;
    const int64_t rows = c + 1 == e.chunks ? e.tail_rows : e.chunk_rows;
    {
      const double bytes = static_cast<double>(rows * g.cols()) * static_cast<double>(g.es);
      OpProfiler::Scope timed(kIm2col, 0, bytes, nullptr);
      im2col(g, x.data(), p0, rows, col);
    }
    Exec& mm = rows == e.chunk_rows ? e.mm : e.mm_tail;
    mm.set(DNNL_ARG_SRC, dyp + static_cast<size_t>(p0 * g.K) * g.es);
    mm.set(DNNL_ARG_WEIGHTS, col);
    mm.set(DNNL_ARG_DST, acc);
    be.run(mm);
  }
  e.out.set(DNNL_ARG_FROM, acc);
  e.out.set(DNNL_ARG_TO, dw.data());
  be.run(e.out);
}

}  // namespace rn50::onednn
