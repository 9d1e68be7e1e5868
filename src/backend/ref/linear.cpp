// rn50 reference backend: fully connected layer, torch.nn.Linear:
//   y[n,k] = sum_c x[n,c] * w[k,c] + b[k]          x (N,C), w (K,C), b (K), y (N,K)
//   dx[n,c] = sum_k dy[n,k] * w[k,c];  dw[k,c] = sum_n dy[n,k] * x[n,c];  db[k] = sum_n dy[n,k]
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {
struct LinGeom {
  int64_t N, C, K;
};

LinGeom linear_geom(const char* op, const Tensor& x, const Tensor& w, const char* yname,
                    const Tensor& y) {
  check_float(op, "x", x);
  check_float(op, "w", w);
  check_float(op, yname, y);
  RN50_CHECK(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1),
             "ref {}: x {} must be (N,C) and w {} (K,C) with the same C", op, x.str(), w.str());
  LinGeom g{x.dim(0), x.dim(1), w.dim(0)};
  check_shape(op, yname, y, {g.N, g.K});
  return g;
}
}  // namespace

void RefBackend::linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const LinGeom g = linear_geom("linear_fwd", x, w, "y", y);
  check_float("linear_fwd", "b", b);
  check_shape("linear_fwd", "b", b, {g.K});
  const std::vector<double> X = load(x), Wv = load(w), B = load(b);
  std::vector<double> Y(static_cast<size_t>(g.N * g.K));
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(g.N * g.K * g.C))
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      double s = 0;
      for (int64_t c = 0; c < g.C; ++c) s += X[n * g.C + c] * Wv[k * g.C + c];
      Y[n * g.K + k] = s + B[k];
    }
  store(Y, y);
}

void RefBackend::linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                            Tensor& dw, Tensor& db) {
  const LinGeom g = linear_geom("linear_bwd", x, w, "dy", dy);
  check_float("linear_bwd", "dw", dw);
  check_shape("linear_bwd", "dw", dw, {g.K, g.C});
  check_float("linear_bwd", "db", db);
  check_shape("linear_bwd", "db", db, {g.K});
  const std::vector<double> X = load(x), Wv = load(w), DY = load(dy);
  if (dx.defined()) {
    check_float("linear_bwd", "dx", dx);
    check_shape("linear_bwd", "dx", dx, {g.N, g.C});
    std::vector<double> DX(static_cast<size_t>(g.N * g.C), 0.0);
#pragma omp parallel for schedule(static) if (parallel_worth(g.N * g.K * g.C))
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t k = 0; k < g.K; ++k) {
        const double d = DY[n * g.K + k];
        for (int64_t c = 0; c < g.C; ++c) DX[n * g.C + c] += d * Wv[k * g.C + c];
      }
    store(DX, dx);
  }
  std::vector<double> DW(static_cast<size_t>(g.K * g.C), 0.0), DB(static_cast<size_t>(g.K), 0.0);
#pragma omp parallel for schedule(static) if (parallel_worth(g.N * g.K * g.C))
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t n = 0; n < g.N; ++n) {
      const double d = DY[n * g.K + k];
      DB[k] += d;
      for (int64_t c = 0; c < g.C; ++c) DW[k * g.C + c] += d * X[n * g.C + c];
    }
  store(DW, dw);
  store(DB, db);
}

}  // namespace rn50::ref
