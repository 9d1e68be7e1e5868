// rn50 reference backend: 2-D convolution (cross-correlation as torch.nn.Conv2d, no bias,
// dilation 1, groups 1) and its two gradients.
//
//   y[n,k,oh,ow]  = sum_{c,r,s} x[n,c,oh*st-pad+r, ow*st-pad+s] * w[k,c,r,s]
//   dx[n,c,ih,iw] = sum_{k,r,s: ih = oh*st-pad+r, iw = ow*st-pad+s} dy[n,k,oh,ow] * w[k,c,r,s]
//   dw[k,c,r,s]   = sum_{n,oh,ow} dy[n,k,oh,ow] * x[n,c,oh*st-pad+r, ow*st-pad+s]
// conv2d_bias_act_fwd (inference): y = act(conv + bias[k] + z), all in float64, rounded once.
// Out-of-range input positions are the zero padding. Activations are loaded as float64 in
// (N,H,W,C) order so that the innermost loops run over contiguous channels; every output
// element is accumulated by one thread in a fixed order (deterministic).
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {

struct ConvGeom {
  int64_t N, C, H, W, K, R, S, OH, OW, st, pad;
};

// Checks the operands of a convolution with input (N,C,H,W) given by `xs`, weight w and output
// (N,K,OH,OW) given by `ys`, and returns the geometry.
ConvGeom conv_geom(const char* op, const Conv2dParams& p, const Tensor& xt, const char* xname,
                   const Tensor& w, const Tensor& yt, const char* yname) {
  check_float4(op, xname, xt);
  check_float4(op, "w", w);
  check_float4(op, yname, yt);
  RN50_CHECK(p.stride >= 1 && p.pad >= 0, "ref {}: invalid stride {} / pad {}", op, p.stride,
             p.pad);
  ConvGeom g{};
  g.N = xt.n();
  g.C = xt.c();
  g.H = xt.h();
  g.W = xt.w();
  g.K = w.n();
  g.R = w.h();
  g.S = w.w();
  g.st = p.stride;
  g.pad = p.pad;
  RN50_CHECK(w.c() == g.C, "ref {}: weight {} has {} input channels but {} is {}", op, w.str(),
             w.c(), xname, xt.str());
  RN50_CHECK(g.H + 2 * g.pad >= g.R && g.W + 2 * g.pad >= g.S,
             "ref {}: kernel {}x{} larger than the padded input {} (pad {})", op, g.R, g.S,
             xt.str(), g.pad);
  g.OH = (g.H + 2 * g.pad - g.R) / g.st + 1;
  g.OW = (g.W + 2 * g.pad - g.S) / g.st + 1;
  RN50_CHECK(yt.shape() == std::vector<int64_t>({g.N, g.K, g.OH, g.OW}),
             "ref {}: {} is {} but {} {} with weight {}, stride {}, pad {} gives (N,K,OH,OW) = "
             "{}",
             op, yname, yt.str(), xname, xt.str(), w.str(), g.st, g.pad,
             shape_str({g.N, g.K, g.OH, g.OW}));
  return g;
}

/// The forward convolution in float64, (N,OH,OW,K) order.
std::vector<double> conv_fwd_f64(const ConvGeom& g, const Tensor& x, const Tensor& w) {
  const std::vector<double> X = load(x, Layout::NHWC);  // [n][h][w][c]
  const std::vector<double> w0 = load(w);               // [k][c][r][s]
  std::vector<double> Wt(w0.size());                    // [r][s][c][k]
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s)
          Wt[((r * g.S + s) * g.C + c) * g.K + k] = w0[((k * g.C + c) * g.R + r) * g.S + s];
  std::vector<double> Y(static_cast<size_t>(g.N * g.OH * g.OW * g.K), 0.0);  // [n][oh][ow][k]

#pragma omp parallel for collapse(2) \
    schedule(static) if (parallel_worth(Y.size() * g.C * g.R * g.S))
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        double* acc = &Y[((n * g.OH + oh) * g.OW + ow) * g.K];
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t ih = oh * g.st - g.pad + r;
          if (ih < 0 || ih >= g.H) continue;
          for (int64_t s = 0; s < g.S; ++s) {
            const int64_t iw = ow * g.st - g.pad + s;
            if (iw < 0 || iw >= g.W) continue;
            const double* xp = &X[((n * g.H + ih) * g.W + iw) * g.C];
            const double* wp = &Wt[(r * g.S + s) * g.C * g.K];
            for (int64_t c = 0; c < g.C; ++c) {
              const double xv = xp[c];
              const double* wr = wp + c * g.K;
              for (int64_t k = 0; k < g.K; ++k) acc[k] += xv * wr[k];
            }
          }
        }
      }
  return Y;
}

}  // namespace

void RefBackend::conv2d_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w, Tensor& y) {
  const ConvGeom g = conv_geom("conv2d_fwd", p, x, "x", w, y, "y");
  store(conv_fwd_f64(g, x, w), y, Layout::NHWC);
}

void RefBackend::conv2d_bias_act_fwd(const Conv2dParams& p, const Tensor& x, const Tensor& w,
                                     const Tensor& bias, const Tensor& z, bool relu, Tensor& y) {
  const char* op = "conv2d_bias_act_fwd";
  const ConvGeom g = conv_geom(op, p, x, "x", w, y, "y");
  check_float(op, "bias", bias);
  RN50_CHECK(bias.ndim() == 1 && bias.dim(0) == g.K && bias.dtype() == y.dtype(),
             "ref {}: bias is {}, expected ({}) in y's dtype {}", op, bias.str(), g.K,
             dtype_name(y.dtype()));
  if (z.defined())
    RN50_CHECK(z.shape() == y.shape() && z.dtype() == y.dtype(),
               "ref {}: z is {}, expected y's shape and dtype ({})", op, z.str(), y.str());
  // Everything in float64, rounded once when stored.
  std::vector<double> Y = conv_fwd_f64(g, x, w);  // [n][oh][ow][k]
  const std::vector<double> B = load(bias);
  std::vector<double> Z;
  if (z.defined()) Z = load(z, Layout::NHWC);
  for (size_t i = 0; i < Y.size(); ++i) {
    double v = Y[i] + B[i % static_cast<size_t>(g.K)];
    if (!Z.empty()) v += Z[i];
    Y[i] = relu && v < 0 ? 0.0 : v;
  }
  store(Y, y, Layout::NHWC);
}

void RefBackend::conv2d_bwd_data(const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                                 Tensor& dx) {
  const ConvGeom g = conv_geom("conv2d_bwd_data", p, dx, "dx", w, dy, "dy");
  const std::vector<double> DY = load(dy, Layout::NHWC);  // [n][oh][ow][k]
  const std::vector<double> w0 = load(w);                 // [k][c][r][s]
  std::vector<double> Wt(w0.size());                      // [r][s][k][c]
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s)
          Wt[((r * g.S + s) * g.K + k) * g.C + c] = w0[((k * g.C + c) * g.R + r) * g.S + s];
  std::vector<double> DX(static_cast<size_t>(g.N * g.H * g.W * g.C), 0.0);  // [n][h][w][c]

  // Gather form: each dx element collects the (oh, ow, r, s) with ih = oh*st - pad + r.
#pragma omp parallel for collapse(2) \
    schedule(static) if (parallel_worth(DX.size() * g.K * g.R * g.S))
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t ih = 0; ih < g.H; ++ih)
      for (int64_t iw = 0; iw < g.W; ++iw) {
        double* acc = &DX[((n * g.H + ih) * g.W + iw) * g.C];
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t th = ih + g.pad - r;
          if (th < 0 || th % g.st != 0 || th / g.st >= g.OH) continue;
          const int64_t oh = th / g.st;
          for (int64_t s = 0; s < g.S; ++s) {
            const int64_t tw = iw + g.pad - s;
            if (tw < 0 || tw % g.st != 0 || tw / g.st >= g.OW) continue;
            const int64_t ow = tw / g.st;
            const double* dyp = &DY[((n * g.OH + oh) * g.OW + ow) * g.K];
            const double* wp = &Wt[(r * g.S + s) * g.K * g.C];
            for (int64_t k = 0; k < g.K; ++k) {
              const double dv = dyp[k];
              const double* wr = wp + k * g.C;
              for (int64_t c = 0; c < g.C; ++c) acc[c] += dv * wr[c];
            }
          }
        }
      }
  store(DX, dx, Layout::NHWC);
}

void RefBackend::conv2d_bwd_weights(const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                                    Tensor& dw) {
  check_float4("conv2d_bwd_weights", "dw", dw);
  const ConvGeom g = conv_geom("conv2d_bwd_weights", p, x, "x", dw, dy, "dy");
  const std::vector<double> X = load(x, Layout::NHWC);                      // [n][h][w][c]
  const std::vector<double> dy0 = load(dy, Layout::NCHW);                   // [n][k][oh][ow]
  std::vector<double> DW(static_cast<size_t>(g.R * g.S * g.K * g.C), 0.0);  // [r][s][k][c]

#pragma omp parallel for collapse(3) \
    schedule(static) if (parallel_worth(DW.size() * g.N * g.OH * g.OW))
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s)
      for (int64_t k = 0; k < g.K; ++k) {
        double* acc = &DW[((r * g.S + s) * g.K + k) * g.C];
        for (int64_t n = 0; n < g.N; ++n) {
          const double* dyp = &dy0[(n * g.K + k) * g.OH * g.OW];
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const int64_t ih = oh * g.st - g.pad + r;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t ow = 0; ow < g.OW; ++ow) {
              const int64_t iw = ow * g.st - g.pad + s;
              if (iw < 0 || iw >= g.W) continue;
              const double dv = dyp[oh * g.OW + ow];
              const double* xp = &X[((n * g.H + ih) * g.W + iw) * g.C];
              for (int64_t c = 0; c < g.C; ++c) acc[c] += dv * xp[c];
            }
          }
        }
      }
  std::vector<double> out(DW.size());  // [k][c][r][s]
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s)
          out[((k * g.C + c) * g.R + r) * g.S + s] = DW[((r * g.S + s) * g.K + k) * g.C + c];
  store(out, dw, Layout::NCHW);
}

}  // namespace rn50::ref
