// rn50: softmax cross-entropy with label smoothing (torch.nn.CrossEntropyLoss(label_smoothing=eps),
// mean reduction), as plain OpenMP loops over the rows of the (N, K) logits.
//   log p_k = z_k - max(z) - log(sum_j exp(z_j - max(z)))
//   loss_n  = -[(1 - eps) * log p_label + (eps / K) * sum_k log p_k]
//   loss    = mean_n loss_n;  dlogits = scale * (p - q) / N,  q = (1 - eps) onehot + eps / K.
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

void OnednnBackend::softmax_xent_fwd(const Tensor& logits, const Tensor& labels, float smoothing,
                                     Tensor& loss, Tensor& probs) {
  const char* op = "softmax_xent_fwd";
  check_tensor(op, "logits", logits);
  check_tensor(op, "loss", loss);
  check_tensor(op, "probs", probs);
  RN50_CHECK(logits.ndim() == 2, "onednn {}: logits must be (N, K), got {}", op, logits.str());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  check_shape(op, "probs", probs, {N, K});
  check_shape(op, "loss", loss, {1});
  check_labels(op, labels, N, K);
  const float* z = logits.data_as<const float>();
  float* pr = probs.data_as<float>();
  const int32_t* lab = labels.data_as<const int32_t>();
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
    const double logp_label = static_cast<double>(zr[lab[n]] - mx) - lse;
    const double sum_logp = sum_shift - static_cast<double>(K) * lse;
    total += -((1.0 - eps) * logp_label + eps / static_cast<double>(K) * sum_logp);
  }
  loss.data_as<float>()[0] = static_cast<float>(total / static_cast<double>(N));
}

void OnednnBackend::softmax_xent_bwd(const Tensor& probs, const Tensor& labels, float smoothing,
                                     float scale, Tensor& dlogits, const Tensor& state) {
  const char* op = "softmax_xent_bwd";
  check_tensor(op, "probs", probs);
  check_tensor(op, "dlogits", dlogits);
  RN50_CHECK(probs.ndim() == 2, "onednn {}: probs must be (N, K), got {}", op, probs.str());
  const int64_t N = probs.dim(0), K = probs.dim(1);
  check_shape(op, "dlogits", dlogits, {N, K});
  check_labels(op, labels, N, K);
  const float* pr = probs.data_as<const float>();
  float* d = dlogits.data_as<float>();
  const int32_t* lab = labels.data_as<const int32_t>();
  const float f = resolve_loss_scale("onednn softmax_xent_bwd", scale, state) /
                  static_cast<float>(N);
  const float off = smoothing / static_cast<float>(K);
  const float hit = 1.f - smoothing;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* pn = pr + n * K;
    float* dn = d + n * K;
    for (int64_t k = 0; k < K; ++k) dn[k] = f * (pn[k] - off);
    dn[lab[n]] -= f * hit;
  }
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
