// rn50 reference backend: max pooling (torch.nn.MaxPool2d: padding is never selected, i.e. it
// acts as -inf; requires pad <= kernel / 2 as torch does) and global average pooling
// (torch.nn.AdaptiveAvgPool2d(1) followed by flatten).
//   maxpool  y[n,c,oh,ow] = max_{r,s in window, inside the input} x[n,c,oh*st-pad+r, ...]
//            backward: dy routed to the FIRST maximum of its window in row-major (r, s) order,
//            contributions of overlapping windows summed (torch max_pool2d_with_indices_backward).
//   avgpool  y[n,c] = sum_{h,w} x[n,c,h,w] / (H*W);  backward dx[n,c,h,w] = dy[n,c] / (H*W).
#include <cmath>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {

struct PoolGeom {
  int64_t N, C, H, W, OH, OW, k, st, pad;
};

PoolGeom pool_geom(const char* op, const Pool2dParams& p, const Tensor& x, const char* yname,
                   const Tensor& y) {
  check_float4(op, "x", x);
  check_float4(op, yname, y);
  RN50_CHECK(p.kernel >= 1 && p.stride >= 1 && p.pad >= 0 && p.pad <= p.kernel / 2,
             "ref {}: invalid pooling kernel {} stride {} pad {} (pad must be <= kernel / 2)", op,
             p.kernel, p.stride, p.pad);
  PoolGeom g{x.n(), x.c(), x.h(), x.w(), 0, 0, p.kernel, p.stride, p.pad};
  RN50_CHECK(g.H + 2 * g.pad >= g.k && g.W + 2 * g.pad >= g.k,
             "ref {}: window {} larger than the padded input {} (pad {})", op, g.k, x.str(), g.pad);
  g.OH = (g.H + 2 * g.pad - g.k) / g.st + 1;
  g.OW = (g.W + 2 * g.pad - g.k) / g.st + 1;
  RN50_CHECK(y.shape() == std::vector<int64_t>({g.N, g.C, g.OH, g.OW}),
             "ref {}: {} is {} but x {} with kernel {}, stride {}, pad {} gives {}", op, yname,
             y.str(), x.str(), g.k, g.st, g.pad, shape_str({g.N, g.C, g.OH, g.OW}));
  return g;
}

// Index (h * W + w) of the first maximum of window (oh, ow) in plane `xp` (H x W).
int64_t window_argmax(const PoolGeom& g, const double* xp, int64_t oh, int64_t ow) {
  int64_t best = -1;
  double bv = 0;
  for (int64_t r = 0; r < g.k; ++r) {
    const int64_t ih = oh * g.st - g.pad + r;
    if (ih < 0 || ih >= g.H) continue;
    for (int64_t s = 0; s < g.k; ++s) {
      const int64_t iw = ow * g.st - g.pad + s;
      if (iw < 0 || iw >= g.W) continue;
      const double v = xp[ih * g.W + iw];
      if (best < 0 || v > bv || std::isnan(v)) {  // torch: NaN propagates
        best = ih * g.W + iw;
        bv = v;
      }
    }
  }
  return best;  // never -1: pad <= kernel / 2 keeps every window partly inside the input
}

}  // namespace

void RefBackend::maxpool2d_fwd(const Pool2dParams& p, const Tensor& x, Tensor& y) {
  const PoolGeom g = pool_geom("maxpool2d_fwd", p, x, "y", y);
  const std::vector<double> X = load(x);
  std::vector<double> Y(static_cast<size_t>(g.N * g.C * g.OH * g.OW));
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(Y.size() * g.k * g.k))
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c) {
      const double* xp = &X[(n * g.C + c) * g.H * g.W];
      double* yp = &Y[(n * g.C + c) * g.OH * g.OW];
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) yp[oh * g.OW + ow] = xp[window_argmax(g, xp, oh, ow)];
    }
  store(Y, y);
}

void RefBackend::maxpool2d_bwd(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                               const Tensor& dy, Tensor& dx) {
  const PoolGeom g = pool_geom("maxpool2d_bwd", p, x, "dy", dy);
  // y is not needed: the first maximum is recomputed from x (identical by construction).
  if (y.defined()) {
    check_float4("maxpool2d_bwd", "y", y);
    RN50_CHECK(y.same_shape(dy), "ref maxpool2d_bwd: y {} and dy {} differ in shape", y.str(),
               dy.str());
  }
  check_float4("maxpool2d_bwd", "dx", dx);
  RN50_CHECK(dx.same_shape(x), "ref maxpool2d_bwd: dx {} and x {} differ in shape", dx.str(),
             x.str());
  const std::vector<double> X = load(x), DY = load(dy);
  std::vector<double> DX(X.size(), 0.0);
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(DY.size() * g.k * g.k))
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c) {
      const double* xp = &X[(n * g.C + c) * g.H * g.W];
      const double* dyp = &DY[(n * g.C + c) * g.OH * g.OW];
      double* dxp = &DX[(n * g.C + c) * g.H * g.W];
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow)
          dxp[window_argmax(g, xp, oh, ow)] += dyp[oh * g.OW + ow];
    }
  store(DX, dx);
}

void RefBackend::global_avgpool_fwd(const Tensor& x, Tensor& y) {
  check_float4("global_avgpool_fwd", "x", x);
  check_float("global_avgpool_fwd", "y", y);
  const int64_t N = x.n(), C = x.c(), HW = x.h() * x.w();
  RN50_CHECK(
      y.shape() == std::vector<int64_t>({N, C}) || y.shape() == std::vector<int64_t>({N, C, 1, 1}),
      "ref global_avgpool_fwd: y is {}, expected (N,C) = {} for x {}", y.str(), shape_str({N, C}),
      x.str());
  RN50_CHECK(HW > 0, "ref global_avgpool_fwd: empty spatial extent in x {}", x.str());
  const std::vector<double> X = load(x);
  std::vector<double> Y(static_cast<size_t>(N * C));
#pragma omp parallel for schedule(static) if (parallel_worth(X.size()))
  for (int64_t i = 0; i < N * C; ++i) {
    double s = 0;
    for (int64_t j = 0; j < HW; ++j) s += X[i * HW + j];
    Y[i] = s / static_cast<double>(HW);
  }
  store(Y, y);
}

void RefBackend::global_avgpool_bwd(const Tensor& dy, Tensor& dx) {
  check_float4("global_avgpool_bwd", "dx", dx);
  check_float("global_avgpool_bwd", "dy", dy);
  const int64_t N = dx.n(), C = dx.c(), HW = dx.h() * dx.w();
  RN50_CHECK(dy.shape() == std::vector<int64_t>({N, C}) ||
                 dy.shape() == std::vector<int64_t>({N, C, 1, 1}),
             "ref global_avgpool_bwd: dy is {}, expected (N,C) = {} for dx {}", dy.str(),
             shape_str({N, C}), dx.str());
  const std::vector<double> DY = load(dy);
  std::vector<double> DX(static_cast<size_t>(N * C * HW));
  for (int64_t i = 0; i < N * C; ++i)
    for (int64_t j = 0; j < HW; ++j) DX[i * HW + j] = DY[i] / static_cast<double>(HW);
  store(DX, dx);
}

}  // namespace rn50::ref
