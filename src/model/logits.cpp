#include "model/logits.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace rn50 {

int64_t label_rank(const float* logits, int64_t k, int64_t label) {
  RN50_CHECK(label >= 0 && label < k, "label {} is out of range for {} classes", label, k);
  const float v = logits[label];
  if (std::isnan(v)) return k;
  int64_t rank = 0;
  for (int64_t j = 0; j < k; ++j) {
    const float u = logits[j];
    // NaN logits of other classes never outrank the label (comparisons with NaN are false).
    if (u > v || (u == v && j < label)) ++rank;
  }
  return rank;
}

std::vector<int64_t> topk_indices(const float* logits, int64_t k, int64_t top) {
  RN50_CHECK(top >= 0 && top <= k, "top-{} of {} classes", top, k);
  std::vector<int64_t> idx(static_cast<size_t>(k));
  std::iota(idx.begin(), idx.end(), 0);
  // NaN sorts after every number; ties by lower index.
  auto key_less = [&](int64_t a, int64_t b) {
    const float x = logits[a], y = logits[b];
    const bool xn = std::isnan(x), yn = std::isnan(y);
    if (xn != yn) return yn;
    if (!xn && x != y) return x > y;
    return a < b;
  };
  std::partial_sort(idx.begin(), idx.begin() + top, idx.end(), key_less);
  idx.resize(static_cast<size_t>(top));
  return idx;
}

void softmax_row(const float* logits, int64_t k, float* probs) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < k; ++j) m = std::max(m, logits[j]);
  float s = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    probs[j] = std::exp(logits[j] - m);
    s += probs[j];
  }
  for (int64_t j = 0; j < k; ++j) probs[j] /= s;
}

double smoothed_xent(const float* logits, int64_t k, int64_t label, double eps) {
  RN50_CHECK(label >= 0 && label < k, "label {} is out of range for {} classes", label, k);
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < k; ++j) m = std::max(m, static_cast<double>(logits[j]));
  double s = 0;
  for (int64_t j = 0; j < k; ++j) s += std::exp(static_cast<double>(logits[j]) - m);
  const double lse = m + std::log(s);
  double sum_logp = 0;
  for (int64_t j = 0; j < k; ++j) sum_logp += static_cast<double>(logits[j]) - lse;
  const double logp_label = static_cast<double>(logits[label]) - lse;
  return -(1.0 - eps) * logp_label - eps / static_cast<double>(k) * sum_logp;
}

TopkCounts topk_correct(const float* logits, int64_t n, int64_t k, const int32_t* labels) {
  TopkCounts c;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = label_rank(logits + i * k, k, labels[i]);
    if (r < 1) ++c.top1;
    if (r < 5) ++c.top5;
  }
  return c;
}

}  // namespace rn50
