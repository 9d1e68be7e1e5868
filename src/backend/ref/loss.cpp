// rn50 reference backend: softmax cross-entropy with label smoothing, exactly
// torch.nn.CrossEntropyLoss(label_smoothing=eps, reduction="mean") over logits (N,K) and i32
// labels (N):
//   p = softmax(logits) (max-subtracted, float64),  q = (1 - eps) * onehot(label) + eps / K
//   loss = mean_n [ -sum_k q[n,k] * log p[n,k] ]
//        = mean_n [ (1 - eps) * (lse_n - z[n,label]) + eps / K * sum_k (lse_n - z[n,k]) ]
//   dlogits = scale * (p - q) / N
// Mixup (softmax_xent_mixup_*): q = (1 - eps) * (lam onehot(a) + (1 - lam) onehot(b)) + eps / K.
#include <cmath>
#include <vector>

#include "core/step_state.h"
#include "core/topk.h"
#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {
// Validates labels (N) i32 in [0, K) and returns them.
std::vector<int64_t> load_labels(const char* op, const Tensor& labels, int64_t N, int64_t K) {
  RN50_CHECK(labels.defined() && labels.is_cpu() && labels.dtype() == DType::i32,
             "ref {}: labels {} must be an I32 host tensor", op, labels.str());
  check_shape(op, "labels", labels, {N});
  std::vector<int64_t> L(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    L[n] = labels.data_as<const int32_t>()[n];
    RN50_CHECK(L[n] >= 0 && L[n] < K, "ref {}: label {} of sample {} is outside [0, {})", op, L[n],
               n, K);
  }
  return L;
}
}  // namespace

namespace {
/// The loss with target lam * q(La[n]) + (1 - lam) * q(Lb[n]) (lam = 1: the plain loss).
void xent_fwd(const char* op, const Tensor& logits, const Tensor& labels, const Tensor* labels_b,
              double lam, float smoothing, Tensor& loss, Tensor& probs) {
  check_float(op, "logits", logits);
  RN50_CHECK(logits.ndim() == 2 && logits.dim(0) > 0 && logits.dim(1) > 0,
             "ref {}: logits {} must be (N,K) with N, K > 0", op, logits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  check_float(op, "probs", probs);
  check_shape(op, "probs", probs, {N, K});
  check_float(op, "loss", loss);
  check_shape(op, "loss", loss, {1});
  RN50_CHECK(smoothing >= 0.f && smoothing <= 1.f, "ref {}: label smoothing {} not in [0, 1]", op,
             smoothing);
  const std::vector<int64_t> La = load_labels(op, labels, N, K);
  const std::vector<int64_t> Lb = labels_b ? load_labels(op, *labels_b, N, K) : La;
  const std::vector<double> Z = load(logits);
  std::vector<double> P(Z.size()), per(static_cast<size_t>(N));
  const double eps = smoothing;
#pragma omp parallel for schedule(static) if (parallel_worth(Z.size()))
  for (int64_t n = 0; n < N; ++n) {
    const double* z = &Z[n * K];
    double m = z[0];
    for (int64_t k = 1; k < K; ++k) m = z[k] > m ? z[k] : m;
    double se = 0, sz = 0;
    for (int64_t k = 0; k < K; ++k) {
      se += std::exp(z[k] - m);
      sz += z[k];
    }
    const double lse = m + std::log(se);
    for (int64_t k = 0; k < K; ++k) P[n * K + k] = std::exp(z[k] - lse);
    // -sum_k q_k log p_k with q = (1 - eps) (lam onehot(a) + (1 - lam) onehot(b)) + eps / K.
    const double hit = lam * (lse - z[La[n]]) + (1.0 - lam) * (lse - z[Lb[n]]);
    per[n] = (1.0 - eps) * hit + eps / static_cast<double>(K) * (static_cast<double>(K) * lse - sz);
  }
  double total = 0;
  for (int64_t n = 0; n < N; ++n) total += per[n];
  store(P, probs);
  store({total / static_cast<double>(N)}, loss);
}

/// dlogits = scale * (p - q) / N with the target of xent_fwd.
void xent_bwd(const char* op, const Tensor& probs, const Tensor& labels, const Tensor* labels_b,
              double lam, float smoothing, double scale, Tensor& dlogits) {
  check_float(op, "probs", probs);
  RN50_CHECK(probs.ndim() == 2, "ref {}: probs {} must be (N,K)", op, probs.str());
  const int64_t N = probs.dim(0), K = probs.dim(1);
  check_float(op, "dlogits", dlogits);
  check_shape(op, "dlogits", dlogits, {N, K});
  const std::vector<int64_t> La = load_labels(op, labels, N, K);
  const std::vector<int64_t> Lb = labels_b ? load_labels(op, *labels_b, N, K) : La;
  std::vector<double> D = load(probs);
  const double eps = smoothing, off = eps / static_cast<double>(K);
  const double f = scale / static_cast<double>(N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const double t = (k == La[n] ? lam : 0.0) + (k == Lb[n] ? 1.0 - lam : 0.0);
      D[n * K + k] = f * (D[n * K + k] - ((1.0 - eps) * t + off));
    }
  store(D, dlogits);
}
}  // namespace

void RefBackend::softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing,
                                  Tensor& loss, Tensor& probs) {
  xent_fwd("softmax_xent_fwd", logits, labels, nullptr, 1.0, smoothing, loss, probs);
}

void RefBackend::softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing,
                                  float scale, Tensor& dlogits, const Tensor& state) {
  const double s = resolve_loss_scale("ref softmax_xent_bwd", scale, state);
  xent_bwd("softmax_xent_bwd", probs, labels, nullptr, 1.0, smoothing, s, dlogits);
}

void RefBackend::softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels,
                                        const Tensor& labels_b, float smoothing,
                                        const Tensor& state, Tensor& loss, Tensor& probs) {
  const double lam = host_mixup_lambda("ref softmax_xent_mixup_fwd", state);
  xent_fwd("softmax_xent_mixup_fwd", logits, labels, &labels_b, lam, smoothing, loss, probs);
}

void RefBackend::softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels,
                                        const Tensor& labels_b, float smoothing, float scale,
                                        Tensor& dlogits, const Tensor& state) {
  const char* op = "ref softmax_xent_mixup_bwd";
  const double lam = host_mixup_lambda(op, state);
  const double s = resolve_loss_scale(op, scale, state);
  xent_bwd("softmax_xent_mixup_bwd", probs, labels, &labels_b, lam, smoothing, s, dlogits);
}

void RefBackend::topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) {
  const char* op = "topk_hits";
  RN50_CHECK(logits.defined() && logits.is_cpu() && logits.dtype() == DType::f32 &&
                 logits.ndim() == 2 && logits.dim(1) > 0,
             "ref {}: logits {} must be an F32 (N,K) host tensor with K > 0", op, logits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  load_labels(op, labels, N, K);  // validates
  RN50_CHECK(hits.defined() && hits.is_cpu() && hits.dtype() == DType::f32 && hits.numel() == 2,
             "ref {}: hits {} must be an F32 host tensor of 2 elements", op, hits.str());
  int64_t h[2];
  host_topk_hits(logits.data_as<const float>(), labels.data_as<const int32_t>(), N, K, h);
  hits.data_as<float>()[0] = static_cast<float>(h[0]);
  hits.data_as<float>()[1] = static_cast<float>(h[1]);
}

}  // namespace rn50::ref
