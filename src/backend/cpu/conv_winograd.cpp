// rn50: the training backend's f32 3x3 stride-1 convolutions on NHWC activations as our own
// Winograd F(4x4, 3x3) (conv_winograd.h).
// Why: oneDNN 2.6 has Winograd only with AVX-512; on AVX2-only CPUs its direct jit:avx2 kernel
// is what the training step's 3x3 stride-1 convs ran (forward and backward data, 13 of
// ResNet-50's convs each), while the inference engine's WinogradF43Conv ran the same shapes
// 1.2-2.8x faster at batch 32 (winograd_f43.cpp). The backward-data conv of a stride-1 pad-1
// 3x3 conv is itself one, with the weights transposed and rotated, so one op serves both. The
// weights change every step: U is transformed from them on every call (36 x C x K floats,
// about 1/300 of the conv's work at ResNet-50's batch 32). Results differ from the direct
// convolution by rounding only.
#include "backend/cpu/conv_winograd.h"

#include <memory>
#include <vector>

#include "backend/cpu/winograd_f43.h"
#include "rn50/profile.h"

namespace rn50::onednn {

namespace {

constexpr ProfileOp kWinoWeights{"winograd weight transform", "reorder", "-"};

/// A conv direction's op and its transformed-weights buffer (written on every call).
struct WinoEntry : CacheEntry {
  std::shared_ptr<std::vector<float>> u;
  std::unique_ptr<WinogradF43Conv> conv;
};

/// The shape direction `dir` computes: fwd x (N,C) -> y (N,K); bwd_data dy (N,K) -> dx (N,C).
WinogradF43Conv::Shape shape_of(ConvDir dir, const Tensor& act, const Tensor& out) {
  const bool fwd = dir == ConvDir::fwd;
  return {act.n(), fwd ? act.c() : out.c(), fwd ? out.c() : act.c(), act.h(), act.w(), true};
}

WinoEntry& entry_for(OnednnBackend& be, ConvDir dir, const Tensor& act, const Tensor& w,
                     const Tensor& out) {
  Key k = key(Tag::conv_winograd).add(static_cast<int64_t>(dir)).add(act).add(w).add(out);
  return be.cached<WinoEntry>(k, [&] {
    auto r = std::make_unique<WinoEntry>();
    const WinogradF43Conv::Shape s = shape_of(dir, act, out);
    r->u = std::make_shared<std::vector<float>>(WinogradF43Conv::weight_bytes(s) / sizeof(float));
    r->conv = std::make_unique<WinogradF43Conv>(be.engine(), s, r->u, nullptr, false, false);
    return r;
  });
}

void run(OnednnBackend& be, ConvDir dir, const Tensor& in, const Tensor& w, Tensor& out,
         const Tensor& act, const Tensor& o) {
  WinoEntry& e = entry_for(be, dir, act, w, o);
  const WinogradF43Conv::Shape s = shape_of(dir, act, o);
  const bool ohwi = w.layout() == Layout::NHWC;
  using Order = WinogradF43Conv::WeightOrder;
  const Order order = dir == ConvDir::fwd ? (ohwi ? Order::ohwi : Order::oihw)
                                          : (ohwi ? Order::ohwi_bwd_data : Order::oihw_bwd_data);
  {
    OpProfiler::Scope timed(kWinoWeights, 0,
                            static_cast<double>(w.nbytes() + WinogradF43Conv::weight_bytes(s)),
                            nullptr);
    WinogradF43Conv::transform_weights_into(w.data_as<const float>(), s.c, s.k, order,
                                            e.u->data());
  }
  e.conv->run(in.data_as<const float>(), out.data_as<float>());
}

}  // namespace

bool conv_as_own_winograd(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                          const Tensor& out) {
  if (dir == ConvDir::bwd_weights || w.ndim() != 4 || w.h() != 3 || w.w() != 3 ||
      p.stride != 1 || p.pad != 1 || act.ndim() != 4 || out.ndim() != 4 ||
      act.dtype() != DType::f32 || w.dtype() != DType::f32 || out.dtype() != DType::f32 ||
      act.layout() != Layout::NHWC || out.layout() != Layout::NHWC || act.c() % 8 != 0 ||
      out.c() % 8 != 0 || act.h() != out.h() || act.w() != out.w() ||
      !conv_own_winograd_allowed())
    return false;
  return WinogradF43Conv::worthwhile(shape_of(dir, act, out));
}

void conv_fwd_own_winograd(OnednnBackend& be, const Conv2dParams&, const Tensor& x,
                           const Tensor& w, Tensor& y) {
  run(be, ConvDir::fwd, x, w, y, x, y);
}

void conv_bwd_data_own_winograd(OnednnBackend& be, const Conv2dParams&, const Tensor& dy,
                                const Tensor& w, Tensor& dx) {
  run(be, ConvDir::bwd_data, dy, w, dx, dx, dy);
}

}  // namespace rn50::onednn
