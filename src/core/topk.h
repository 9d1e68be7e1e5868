// rn50: ranks of labels among logits, the host implementation of Backend::topk_hits shared by
// the CPU backends and the host helpers of model/logits.h.
#pragma once

#include <cstdint>

namespace rn50 {

/// Rank of class `label` among the k logits of one row: the classes with a larger logit plus
/// those with an equal logit and a lower index (a stable descending sort); 0 = the top class. A
/// NaN logit of the label ranks last (k); NaNs of other classes never outrank it (comparisons
/// with NaN are false). label must be in [0, k).
int64_t host_label_rank(const float* logits, int64_t k, int64_t label);

/// hits[0], hits[1] = rows of logits (n, k) row-major whose label ranks < 1, < 5 (labels in
/// [0, k), checked by the caller).
void host_topk_hits(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                    int64_t hits[2]);

}  // namespace rn50
