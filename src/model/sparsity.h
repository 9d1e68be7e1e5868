// rn50: 2:4 structured sparsity masks (NVIDIA's Automatic SParsity, ASP): in every group of 4
// consecutive input channels at most 2 weights are non-zero, the pattern sparse tensor cores and
// cuSPARSELt accelerate (apex/contrib/sparsity/sparse_masklib.py; Paddle paddle.incubate.asp;
// DLE PaddlePaddle --asp --prune-model --mask-algo).
//
// A weight is viewed as a matrix whose columns are its input channels:
//   conv [K, C, R, S] -> rows (r, s, k) with k fastest, R*S*K rows x C columns (apex's view:
//                        weight.permute(2, 3, 0, 1).reshape(-1, C)), so 4 consecutive rows are
//                        4 consecutive output channels at one (r, s);
//   fc   [out, in]    -> out rows x in columns.
// Algorithms (DLE's names), ties between equal |w| resolved as numpy's argsort does in Paddle's
// masklib (the lower index counts as the smaller, so the higher index is kept):
//   mask_1d         each row's groups of 4 columns keep their 2 largest |w|;
//   mask_2d_greedy  4x4 blocks (4 rows x 4 columns): entries taken by descending |w| while their
//                   row and their column each hold fewer than 2 (so rows and columns both end up
//                   2:4 where the greedy walk allows; at most 2 per row and column always);
//   mask_2d_best    of the 90 4x4 patterns with exactly 2 per row and per column, the one keeping
//                   the largest sum of |w| (the first in lexicographic pattern order on a tie).
// 2-D masks are 2:4 along the output channels too (transposable: the backward data GEMM can use
// them), at the cost of a little more pruned magnitude than mask_1d.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rn50/graph.h"
#include "rn50/tensor.h"

namespace rn50 {

enum class MaskAlgo { mask_1d, mask_2d_greedy, mask_2d_best };

/// Parses "mask_1d" | "mask_2d_greedy" | "mask_2d_best"; throws rn50::Error naming `flag` and
/// the value otherwise.
MaskAlgo mask_algo_from_name(const std::string& name, const std::string& flag = "--mask-algo");
const char* mask_algo_name(MaskAlgo a);

/// The 2:4 mask (1 = kept) of a rows x cols matrix of magnitudes-to-be (row-major `w`, any sign),
/// cols a multiple of 4 and, for the 2-D algorithms, rows a multiple of 4. Throws rn50::Error
/// otherwise. mask_1d keeps exactly half of every group; the 2-D ones at most 2 per row and
/// column of every block (exactly 2 for mask_2d_best).
std::vector<uint8_t> mask_2to4(const float* w, int64_t rows, int64_t cols, MaskAlgo algo);

/// The mask of weight `w` (host f32, conv [K,C,R,S] in either layout or fc [out,in]) in w's
/// own shape and memory layout (u8, 1 = kept), through the matrix view above. Throws rn50::Error
/// naming `name` when the input channels are not a multiple of 4 (or, 2-D algorithms, the rows).
Tensor weight_mask(const Tensor& w, MaskAlgo algo, const std::string& name);

/// Whether ASP prunes parameter `p`: every conv weight but the stem's (conv1.weight, whatever its
/// input channels: DLE prunes 52 of ResNet-50's 53 convs); BatchNorm, the fc and biases stay
/// dense (DLE's exclusions).
bool asp_prunes(const ParamInfo& p);

}  // namespace rn50
