#include "core/topk.h"

#include <cmath>

namespace rn50 {

int64_t host_label_rank(const float* logits, int64_t k, int64_t label) {
  const float v = logits[label];
  if (std::isnan(v)) return k;
  int64_t rank = 0;
  for (int64_t j = 0; j < k; ++j) {
    const float u = logits[j];
    if (u > v || (u == v && j < label)) ++rank;
  }
  return rank;
}

void host_topk_hits(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                    int64_t hits[2]) {
  int64_t h1 = 0, h5 = 0;
#pragma omp parallel for reduction(+ : h1, h5) schedule(static) if (n * k > 65536)
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i * k + labels[i]])) continue;  // never a hit, even when k < 5
    const int64_t r = host_label_rank(logits + i * k, k, labels[i]);
    h1 += r < 1;
    h5 += r < 5;
  }
  hits[0] = h1;
  hits[1] = h5;
}

}  // namespace rn50
