// rn50: 1x1 convolutions on NHWC activations as oneDNN matmuls.
// A 1x1 convolution over NHWC activations is a matrix product over the P = N*OH*OW output
// positions (x: P x C row-major, y: P x K, w: K x C in both of our weight layouts):
//   forward       Y[P,K]  = Xs[P,C] . W^T      (W^T: the K x C weights read column-major)
//   backward data dXs[P,C] = dY[P,K] . W
//   backward w.   dW[K,C] = dY^T . Xs          (dY^T: dY read column-major)
// where Xs is x itself at stride 1, or x at every stride-th row and column (the downsampling
// projections of ResNet: stride 2), gathered into a dense scratch buffer (one memcpy of C
// values per pixel; oneDNN 2.6 rejects the strided view as a memory descriptor when H is odd);
// the backward data result is scattered back into dx in one pass that also zeroes the pixels
// the conv never read.
// Why: on AMX CPUs oneDNN 2.6 runs the backward of bf16 1x1 convolutions through its jit:amx
// direct kernels, slower at ResNet-50's shapes (the 7x7 and 14x14 weight gradients and the
// stride-2 data gradients most) than its brgemm matmul on the same products; in the forward its
// brgconv_1x1 kernel is the faster one (measured in
// bench/results/cpu/2026-11-26-sapphire-rapids/matmul_1x1_bwd_bf16.md). The policy
// (conv_algo.h) decides when. FLOP counts and GFLOP/s in a profile stay those
// of the convolution; the gather and scatter are ops of their own there ("reorder activations
// (1x1 stride)"). The products are the convolution's sums in another order: results differ by
// rounding only.
#include "backend/cpu/conv_matmul.h"

#include <cstring>

#include "backend/cpu/conv_algo.h"
#include "core/check.h"
#include "rn50/profile.h"

namespace rn50::onednn {

using dnnl::memory;
using tag = memory::format_tag;

namespace {

/// The geometry of a strided 1x1 conv's activation (N,C,H,W NHWC) and its subsampled copy
/// (N,C,OH,OW): the rows and columns the conv reads are those at multiples of `s`.
struct Strided {
  int64_t N = 0, H = 0, W = 0, OH = 0, OW = 0, s = 1;
  size_t pixel_bytes = 0;  ///< C x the element size
  size_t dense_bytes() const { return static_cast<size_t>(N * OH * OW) * pixel_bytes; }
};

Strided strided_of(const Conv2dParams& p, const Tensor& a, const Tensor& o) {
  return Strided{a.n(), a.h(), a.w(), o.h(), o.w(), p.stride,
                 static_cast<size_t>(a.c()) * dtype_size(a.dtype())};
}

/// dense (N,OH,OW,C) = a at rows and columns 0, s, 2s, ... (one memcpy of C values per pixel).
void gather(const Strided& g, const void* a, void* dense) {
  const auto* src = static_cast<const char*>(a);
  auto* dst = static_cast<char*>(dense);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const char* row = src + static_cast<size_t>((n * g.H + oh * g.s) * g.W) * g.pixel_bytes;
      char* out = dst + static_cast<size_t>((n * g.OH + oh) * g.OW) * g.pixel_bytes;
      for (int64_t ow = 0; ow < g.OW; ++ow)
        std::memcpy(out + static_cast<size_t>(ow) * g.pixel_bytes,
                    row + static_cast<size_t>(ow * g.s) * g.pixel_bytes, g.pixel_bytes);
    }
}

/// a (N,H,W,C) = dense at rows and columns 0, s, 2s, ..., zero everywhere else: one pass that
/// writes every element of a once.
void scatter(const Strided& g, const void* dense, void* a) {
  const auto* src = static_cast<const char*>(dense);
  auto* dst = static_cast<char*>(a);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t h = 0; h < g.H; ++h) {
      char* row = dst + static_cast<size_t>((n * g.H + h) * g.W) * g.pixel_bytes;
      if (h % g.s != 0 || h / g.s >= g.OH) {
        std::memset(row, 0, static_cast<size_t>(g.W) * g.pixel_bytes);
        continue;
      }
      const char* in = src + static_cast<size_t>((n * g.OH + h / g.s) * g.OW) * g.pixel_bytes;
      for (int64_t w = 0; w < g.W; ++w) {
        char* px = row + static_cast<size_t>(w) * g.pixel_bytes;
        if (w % g.s == 0 && w / g.s < g.OW)
          std::memcpy(px, in + static_cast<size_t>(w / g.s) * g.pixel_bytes, g.pixel_bytes);
        else
          std::memset(px, 0, g.pixel_bytes);
      }
    }
}

/// A matmul over P = N*OH*OW rows, and for stride > 1 the gather / scatter geometry (the dense
/// subsampled activation lives in scratch slot kScratchAct0).
struct MatmulEntry : CacheEntry {
  Exec mm;
  Strided sub;  ///< sub.s > 1: gather (fwd, bwd weights) or scatter (bwd data) around the matmul
};

constexpr ProfileOp kStrideReorder{"reorder activations (1x1 stride)", "reorder", "-"};

memory::desc mat(int64_t rows, int64_t cols, DType dt, tag t) {
  return md_of({rows, cols}, dt, t);
}

Exec make_matmul(OnednnBackend& be, const memory::desc& a, const memory::desc& b,
                 const memory::desc& c) {
  dnnl::matmul::desc d(a, b, c);
  dnnl::matmul::primitive_desc pd(d, OnednnBackend::attr(), be.engine());
  return be.make_exec(pd, dnnl::matmul(pd),
                      {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
}

/// x packed for the product: x itself at stride 1, else its gather into scratch.
const void* gathered(OnednnBackend& be, const MatmulEntry& e, const Tensor& x) {
  if (e.sub.s == 1) return x.data();
  OpProfiler::Scope timed(kStrideReorder, 0, 2.0 * static_cast<double>(e.sub.dense_bytes()),
                          nullptr);
  void* buf = be.scratch(kScratchAct0, e.sub.dense_bytes());
  gather(e.sub, x.data(), buf);
  return buf;
}

/// The cached matmul (and stride geometry) of direction `dir` of the conv between activation
/// `a` (x or dx), weights `w` (or dw) and output-side activation `o` (y or dy).
MatmulEntry& entry_for(OnednnBackend& be, ConvDir dir, const Conv2dParams& p, const Tensor& a,
                       const Tensor& w, const Tensor& o) {
  Key k = key(Tag::conv_matmul).add(static_cast<int64_t>(dir)).add(a).add(w).add(o).add(p.stride);
  return be.cached<MatmulEntry>(k, [&] {
    auto r = std::make_unique<MatmulEntry>();
    r->sub = strided_of(p, a, o);
    const DType dt = a.dtype();
    const int64_t P = o.n() * o.h() * o.w(), C = a.c(), K = o.c();
    switch (dir) {
      case ConvDir::fwd:  // Y[P,K] = Xs[P,C] . W^T
        r->mm = make_matmul(be, mat(P, C, dt, tag::ab), mat(C, K, dt, tag::ba),
                            mat(P, K, dt, tag::ab));
        break;
      case ConvDir::bwd_data:  // dXs[P,C] = dY[P,K] . W[K,C]
        r->mm = make_matmul(be, mat(P, K, dt, tag::ab), mat(K, C, dt, tag::ab),
                            mat(P, C, dt, tag::ab));
        break;
      case ConvDir::bwd_weights:  // dW[K,C] = dY^T[K,P] . Xs[P,C]
        r->mm = make_matmul(be, mat(K, P, dt, tag::ba), mat(P, C, dt, tag::ab),
                            mat(K, C, dt, tag::ab));
        break;
    }
    return r;
  });
}

}  // namespace

bool conv1x1_as_matmul(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                       const Tensor& out) {
  return w.ndim() == 4 && w.h() == 1 && w.w() == 1 && p.pad == 0 && act.ndim() == 4 &&
         out.ndim() == 4 && act.layout() == Layout::NHWC && out.layout() == Layout::NHWC &&
         conv1x1_matmul_allowed(act.dtype(), dir);
}

void conv1x1_fwd_matmul(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                        const Tensor& w, Tensor& y) {
  MatmulEntry& e = entry_for(be, ConvDir::fwd, p, x, w, y);
  e.mm.set(DNNL_ARG_SRC, gathered(be, e, x));
  e.mm.set(DNNL_ARG_WEIGHTS, w.data());
  e.mm.set(DNNL_ARG_DST, y.data());
  be.run(e.mm);
}

void conv1x1_bwd_data_matmul(OnednnBackend& be, const Conv2dParams& p, const Tensor& dy,
                             const Tensor& w, Tensor& dx) {
  MatmulEntry& e = entry_for(be, ConvDir::bwd_data, p, dx, w, dy);
  const bool strided = e.sub.s > 1;
  void* dst = strided ? be.scratch(kScratchAct0, e.sub.dense_bytes()) : dx.data();
  e.mm.set(DNNL_ARG_SRC, dy.data());
  e.mm.set(DNNL_ARG_WEIGHTS, w.data());
  e.mm.set(DNNL_ARG_DST, dst);
  be.run(e.mm);
  if (strided) {
    OpProfiler::Scope timed(kStrideReorder, 0,
                            static_cast<double>(e.sub.dense_bytes() + dx.nbytes()), nullptr);
    scatter(e.sub, dst, dx.data());  // the positions the conv never read get zero gradient
  }
}

void conv1x1_bwd_weights_matmul(OnednnBackend& be, const Conv2dParams& p, const Tensor& x,
                                const Tensor& dy, Tensor& dw) {
  MatmulEntry& e = entry_for(be, ConvDir::bwd_weights, p, x, dw, dy);
  e.mm.set(DNNL_ARG_SRC, dy.data());
  e.mm.set(DNNL_ARG_WEIGHTS, gathered(be, e, x));
  e.mm.set(DNNL_ARG_DST, dw.data());
  be.run(e.mm);
}

}  // namespace rn50::onednn
