// rn50 reference backend: batch normalisation (torch.nn.BatchNorm2d) with optional fused ReLU.
//
// Training forward, per channel c over M = N*H*W elements (torch semantics):
//   mean = sum x / M,  var = sum (x - mean)^2 / M  (biased; two-pass in float64)
//   y = gamma * (x - mean) / sqrt(var + eps) + beta   [then max(y, 0) when relu]
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// Backward (torch's batch_norm_backward, training mode), with g = dy * (y > 0) when relu:
//   xhat = (x - mean) * invstd,  dbeta = sum g,  dgamma = sum g * xhat
//   dx = gamma * invstd / M * (M * g - dbeta - xhat * dgamma)
#include <cmath>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {

// Checks a per-channel (C) parameter/statistics tensor.
void check_channel(const char* op, const char* name, const Tensor& t, int64_t C) {
  check_float(op, name, t);
  RN50_CHECK(t.ndim() == 1 && t.dim(0) == C, "ref {}: {} is {}, expected ({}) per channel", op,
             name, t.str(), C);
}

void check_same4(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b) {
  check_float4(op, bn, b);
  RN50_CHECK(a.same_shape(b), "ref {}: {} {} and {} {} differ in shape", op, an, a.str(), bn,
             b.str());
}

}  // namespace

void RefBackend::batchnorm_fwd_train(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                     const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                                     Tensor& y, Tensor& save_mean, Tensor& save_var) {
  const char* op = "batchnorm_fwd_train";
  check_float4(op, "x", x);
  check_same4(op, "x", x, "y", y);
  const int64_t N = x.n(), C = x.c(), HW = x.h() * x.w(), M = N * HW;
  check_channel(op, "gamma", gamma, C);
  check_channel(op, "beta", beta, C);
  check_channel(op, "running_mean", running_mean, C);
  check_channel(op, "running_var", running_var, C);
  check_channel(op, "save_mean", save_mean, C);
  check_channel(op, "save_var", save_var, C);
  RN50_CHECK(M > 1, "ref {}: expected more than 1 value per channel when training, got {}", op,
             x.str());
  const std::vector<double> X = load(x);  // [n][c][hw]
  const std::vector<double> G = load(gamma), B = load(beta);
  std::vector<double> RM = load(running_mean), RV = load(running_var);
  std::vector<double> Y(X.size()), MEAN(C), VAR(C);

#pragma omp parallel for schedule(static) if (parallel_worth(X.size()))
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) sum += X[(n * C + c) * HW + i];
    const double mean = sum / static_cast<double>(M);
    double sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const double d = X[(n * C + c) * HW + i] - mean;
        sq += d * d;
      }
    const double var = sq / static_cast<double>(M);
    const double invstd = 1.0 / std::sqrt(var + p.eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t j = (n * C + c) * HW + i;
        double v = G[c] * (X[j] - mean) * invstd + B[c];
        Y[j] = p.relu && v < 0 ? 0.0 : v;
      }
    MEAN[c] = mean;
    VAR[c] = var;
    RM[c] = (1.0 - p.momentum) * RM[c] + p.momentum * mean;
    RV[c] = (1.0 - p.momentum) * RV[c] +
            p.momentum * var * static_cast<double>(M) / static_cast<double>(M - 1);
  }
  store(Y, y);
  store(MEAN, save_mean);
  store(VAR, save_var);
  store(RM, running_mean);
  store(RV, running_var);
}

void RefBackend::batchnorm_fwd_infer(const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                     const Tensor& beta, const Tensor& running_mean,
                                     const Tensor& running_var, Tensor& y) {
  const char* op = "batchnorm_fwd_infer";
  check_float4(op, "x", x);
  check_same4(op, "x", x, "y", y);
  const int64_t N = x.n(), C = x.c(), HW = x.h() * x.w();
  check_channel(op, "gamma", gamma, C);
  check_channel(op, "beta", beta, C);
  check_channel(op, "running_mean", running_mean, C);
  check_channel(op, "running_var", running_var, C);
  const std::vector<double> X = load(x);
  const std::vector<double> G = load(gamma), B = load(beta);
  const std::vector<double> RM = load(running_mean), RV = load(running_var);
  std::vector<double> Y(X.size());
#pragma omp parallel for schedule(static) if (parallel_worth(X.size()))
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = 1.0 / std::sqrt(RV[c] + p.eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t j = (n * C + c) * HW + i;
        double v = G[c] * (X[j] - RM[c]) * invstd + B[c];
        Y[j] = p.relu && v < 0 ? 0.0 : v;
      }
  }
  store(Y, y);
}

void RefBackend::batchnorm_bwd(const BatchNormParams& p, const Tensor& x, const Tensor& y,
                               const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                               const Tensor& save_var, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const char* op = "batchnorm_bwd";
  check_float4(op, "x", x);
  check_same4(op, "x", x, "dy", dy);
  check_same4(op, "x", x, "dx", dx);
  if (p.relu) check_same4(op, "x", x, "y (needed for the fused ReLU mask)", y);
  const int64_t N = x.n(), C = x.c(), HW = x.h() * x.w(), M = N * HW;
  check_channel(op, "gamma", gamma, C);
  check_channel(op, "save_mean", save_mean, C);
  check_channel(op, "save_var", save_var, C);
  check_channel(op, "dgamma", dgamma, C);
  check_channel(op, "dbeta", dbeta, C);
  const std::vector<double> X = load(x);
  std::vector<double> DY = load(dy);
  if (p.relu) {
    const std::vector<double> Yv = load(y);
    for (size_t j = 0; j < DY.size(); ++j)
      if (!(Yv[j] > 0)) DY[j] = 0.0;
  }
  const std::vector<double> G = load(gamma), MEAN = load(save_mean), VAR = load(save_var);
  std::vector<double> DX(X.size()), DG(C), DB(C);
#pragma omp parallel for schedule(static) if (parallel_worth(X.size()))
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = 1.0 / std::sqrt(VAR[c] + p.eps);
    double db = 0, dg = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t j = (n * C + c) * HW + i;
        db += DY[j];
        dg += DY[j] * (X[j] - MEAN[c]) * invstd;
      }
    const double k = G[c] * invstd / static_cast<double>(M);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t j = (n * C + c) * HW + i;
        const double xhat = (X[j] - MEAN[c]) * invstd;
        DX[j] = k * (static_cast<double>(M) * DY[j] - db - xhat * dg);
      }
    DG[c] = dg;
    DB[c] = db;
  }
  store(DX, dx);
  store(DG, dgamma);
  store(DB, dbeta);
}

}  // namespace rn50::ref
