// rn50: host math on classifier logits (f32, one row of k classes): rank of a label, top-k
// indices and hits, softmax: what `rn50 predict` ranks classes with. The loss has one
// implementation, the backends' softmax_xent (training and evaluation alike).
#pragma once

#include <cstdint>
#include <vector>

namespace rn50 {

/// Rank of class `label` among `k` logits sorted by decreasing value, ties broken by the lower
/// class index first (a stable descending sort): 0 = the top class. A NaN logit of the label
/// ranks last (k). Used for top-k: the label is in the top k iff rank < k.
int64_t label_rank(const float* logits, int64_t k, int64_t label);

/// Indices of the `top` largest logits, largest first, ties -> lower index first. top <= k.
std::vector<int64_t> topk_indices(const float* logits, int64_t k, int64_t top);

/// Softmax of one row in fp32 (max-subtracted, as torch.softmax), written to probs[0..k).
void softmax_row(const float* logits, int64_t k, float* probs);

/// Counts of correct predictions over a batch.
struct TopkCounts {
  int64_t top1 = 0;
  int64_t top5 = 0;
};
/// logits (n, k) row-major f32, labels i32 (n). Only the first n rows are used.
TopkCounts topk_correct(const float* logits, int64_t n, int64_t k, const int32_t* labels);

}  // namespace rn50
