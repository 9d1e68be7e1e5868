// rn50 CUDA backend: what the two convolution paths share, whichever cuDNN API runs the
// convolution: the legacy one (conv.cpp: cudnnFind*AlgorithmEx, cudnnConvolution*) or the
// graph (backend) one (conv_graph.cpp: operation graph, engine heuristics, execution plans).
// Both validate the operands the same way, key their plans the same way and see the three
// operands in one compute layout, converting those stored in the other layout through a
// plan's scratch buffers. Definitions in conv.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"

namespace rn50::cuda::conv_detail {

/// Largest workspace a convolution algorithm / engine may use (shared by all convolutions and
/// the fc layer): 1 GiB.
constexpr size_t kWorkspaceCap = size_t{1} << 30;

enum class Dir { fwd, bwd_data, bwd_filter };

/// Names of the operands in the three roles of a direction: the x role (x or dx), the w role
/// (w or dw) and the y role (y or dy), and which role is the output.
struct Roles {
  const char* op;
  const char* x;
  const char* w;
  const char* y;
  int out;  // 0 = x role, 1 = w role, 2 = y role
};
Roles roles(Dir d);

/// Sizes of one convolution: x (N,C,H,W), w (K,C,R,S), y (N,K,OH,OW).
struct Geo {
  int64_t N, C, H, W, K, R, S, OH, OW;
};

/// Validates the three role tensors of direction `d` (device, rank, one dtype of F32 / F16 /
/// BF16, shapes, at most 2^31-1 elements each) and returns the sizes. OH = (H + 2*pad - R) /
/// stride + 1 (floor), likewise OW. Throws rn50::Error naming the op and the operands.
Geo conv_geo(const CudaBackend& be, Dir d, const Conv2dParams& p, const Tensor& x,
             const Tensor& w, const Tensor& y);

/// The plan key of one call: direction, the three tensors (dtype, logical shape, layout,
/// pointer alignment), stride and pad ("conv2d_fwd x=...@256 w=...@256 y=...@256 s1 p1").
std::string conv_key(Dir d, const Conv2dParams& p, const Tensor& x, const Tensor& w,
                     const Tensor& y);

/// The three role operands of one call in a plan's compute layout.
struct Operands {
  Tensor x, w, y;
};

/// The role operands in layout `l`: the caller's tensors where their memory order already
/// matches, else views of the scratch buffers `xt`, `wt`, `yt` (grown on the first call of a
/// plan only); the inputs (every role but `out`) stored in the other order are converted now.
Operands prepare(CudaBackend& be, Layout l, DeviceBuffer& xt, DeviceBuffer& wt, DeviceBuffer& yt,
                 int out, const Tensor& x, const Tensor& w, const Tensor& y);

/// Converts the output role back into the caller's tensor when it went through scratch.
void finish(CudaBackend& be, int out, const Operands& o, const Tensor& x, const Tensor& w,
            const Tensor& y);

}  // namespace rn50::cuda::conv_detail
