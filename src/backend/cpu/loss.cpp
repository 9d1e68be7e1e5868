// rn50: softmax cross-entropy with label smoothing (torch.nn.CrossEntropyLoss(label_smoothing=eps),
// mean reduction), as plain OpenMP loops over the rows of the (N, K) logits.
//   log p_k = z_k - max(z) - log(sum_j exp(z_j - max(z)))
//   loss_n  = -[(1 - eps) * log p_label + (eps / K) * sum_k log p_k]
//   loss    = mean_n loss_n;  dlogits = scale * (p - q) / N,  q = (1 - eps) onehot + eps / K.
// Mixup (softmax_xent_mixup_*): q = (1 - eps) (lam onehot(a) + (1 - lam) onehot(b)) + eps / K.
// Row sums are accumulated in double.
#include <cmath>

#include "backend/cpu/onednn_backend.h"
#include "core/step_state.h"
#include "core/check.h"
#include "core/topk.h"

namespace rn50::onednn {

namespace {

void check_labels(const char* op, const Tensor& labels, int64_t N, int64_t K) {
  check_tensor(op, "labels", labels, DType::i32);
  check_shape(op, "labels", labels, {N});
  const int32_t* l = labels.data_as<const int32_t>();
  for (int64_t n = 0; n < N; ++n)
    RN50_CHECK(l[n] >= 0 && l[n] < K, "onednn {}: label {} of sample {} is outside [0, {})", op,
               l[n], n, K);
}

}  // namespace

namespace {

/// The loss with row n's target lam * q(a[n]) + (1 - lam) * q(b[n]) (b = a, lam = 1: plain).
void xent_fwd(const char* op, const Tensor& logits, const Tensor& labels, const Tensor* labels_b,
              double lam, float smoothing, Tensor& loss, Tensor& probs) {
  check_tensor(op, "logits", logits);
  check_tensor(op, "loss", loss);
  check_tensor(op, "probs", probs);
  RN50_CHECK(logits.ndim() == 2, "onednn {}: logits must be (N, K), got {}", op, logits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  check_shape(op, "probs", probs, {N, K});
  check_shape(op, "loss", loss, {1});
  check_labels(op, labels, N, K);
  if (labels_b) check_labels(op, *labels_b, N, K);
  const float* z = logits.data_as<const float>();
  float* pr = probs.data_as<float>();
  const int32_t* la = labels.data_as<const int32_t>();
  const int32_t* lb = labels_b ? labels_b->data_as<const int32_t>() : la;
  const double eps = smoothing;
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* zr = z + n * K;
    float* pn = pr + n * K;
    float mx = zr[0];
    for (int64_t k = 1; k < K; ++k) mx = std::max(mx, zr[k]);
    double sum = 0.0, sum_shift = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      const float s = zr[k] - mx;
      const float ex = std::exp(s);
      pn[k] = ex;
      sum += ex;
      sum_shift += s;
    }
    const double lse = std::log(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t k = 0; k < K; ++k) pn[k] *= inv;
    const double logp_a = static_cast<double>(zr[la[n]] - mx) - lse;
    const double logp_b = static_cast<double>(zr[lb[n]] - mx) - lse;
    const double logp_label = lam * logp_a + (1.0 - lam) * logp_b;
    const double sum_logp = sum_shift - static_cast<double>(K) * lse;
    total += -((1.0 - eps) * logp_label + eps / static_cast<double>(K) * sum_logp);
  }
  loss.data_as<float>()[0] = static_cast<float>(total / static_cast<double>(N));
}

/// dlogits = scale * (p - q) / N with the target of xent_fwd.
void xent_bwd(const char* op, const Tensor& probs, const Tensor& labels, const Tensor* labels_b,
              float lam, float smoothing, float scale, Tensor& dlogits) {
  check_tensor(op, "probs", probs);
  check_tensor(op, "dlogits", dlogits);
  RN50_CHECK(probs.ndim() == 2, "onednn {}: probs must be (N, K), got {}", op, probs.str());
  const int64_t N = probs.dim(0), K = probs.dim(1);
  check_shape(op, "dlogits", dlogits, {N, K});
  check_labels(op, labels, N, K);
  if (labels_b) check_labels(op, *labels_b, N, K);
  const float* pr = probs.data_as<const float>();
  float* d = dlogits.data_as<float>();
  const int32_t* la = labels.data_as<const int32_t>();
  const int32_t* lb = labels_b ? labels_b->data_as<const int32_t>() : la;
  const float f = scale / static_cast<float>(N);
  const float off = smoothing / static_cast<float>(K);
  const float hit = 1.f - smoothing;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* pn = pr + n * K;
    float* dn = d + n * K;
    for (int64_t k = 0; k < K; ++k) dn[k] = f * (pn[k] - off);
    if (labels_b) {
      dn[la[n]] -= f * hit * lam;
      dn[lb[n]] -= f * hit * (1.f - lam);
    } else {
      dn[la[n]] -= f * hit;
    }
  }
}

}  // namespace

void OnednnBackend::softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing,
                                     Tensor& loss, Tensor& probs) {
  xent_fwd("softmax_xent_fwd", logits, labels, nullptr, 1.0, smoothing, loss, probs);
}

void OnednnBackend::softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing,
                                     float scale, Tensor& dlogits, const Tensor& state) {
  const float s = resolve_loss_scale("onednn softmax_xent_bwd", scale, state);
  xent_bwd("softmax_xent_bwd", probs, labels, nullptr, 1.f, smoothing, s, dlogits);
}

void OnednnBackend::softmax_xent_mixup_fwd(const Tensor& logits, const Tensor& labels,
                                           const Tensor& labels_b, float smoothing,
                                           const Tensor& state, Tensor& loss, Tensor& probs) {
  const float lam = host_mixup_lambda("onednn softmax_xent_mixup_fwd", state);
  xent_fwd("softmax_xent_mixup_fwd", logits, labels, &labels_b, lam, smoothing, loss, probs);
}

void OnednnBackend::softmax_xent_mixup_bwd(const Tensor& probs, const Tensor& labels,
                                           const Tensor& labels_b, float smoothing, float scale,
                                           Tensor& dlogits, const Tensor& state) {
  const char* op = "onednn softmax_xent_mixup_bwd";
  const float lam = host_mixup_lambda(op, state);
  const float s = resolve_loss_scale(op, scale, state);
  xent_bwd("softmax_xent_mixup_bwd", probs, labels, &labels_b, lam, smoothing, s, dlogits);
}

void OnednnBackend::topk_hits(const Tensor& logits, const Tensor& labels, Tensor& hits) {
  const char* op = "topk_hits";
  check_tensor(op, "logits", logits);
  check_tensor(op, "hits", hits);
  RN50_CHECK(logits.ndim() == 2 && logits.dim(1) > 0,
             "onednn {}: logits must be (N, K) with K > 0, got {}", op, logits.str());
  RN50_CHECK(hits.numel() == 2, "onednn {}: hits must have 2 elements, got {}", op, hits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  check_labels(op, labels, N, K);
  int64_t h[2];
  host_topk_hits(logits.data_as<const float>(), labels.data_as<const int32_t>(), N, K, h);
  hits.data_as<float>()[0] = static_cast<float>(h[0]);
  hits.data_as<float>()[1] = static_cast<float>(h[1]);
}

}  // namespace rn50::onednn
