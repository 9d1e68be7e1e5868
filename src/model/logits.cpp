#include "model/logits.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/topk.h"

namespace rn50 {

int64_t label_rank(const float* logits, int64_t k, int64_t label) {
  RN50_CHECK(label >= 0 && label < k, "label {} is out of range for {} classes", label, k);
  return host_label_rank(logits, k, label);
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

TopkCounts topk_correct(const float* logits, int64_t n, int64_t k, const int32_t* labels) {
  TopkCounts c;
  for (int64_t i = 0; i < n; ++i)
    RN50_CHECK(labels[i] >= 0 && labels[i] < k, "label {} is out of range for {} classes",
               labels[i], k);
  int64_t h[2];
  host_topk_hits(logits, labels, n, k, h);
  c.top1 = h[0];
  c.top5 = h[1];
  return c;
}

}  // namespace rn50
