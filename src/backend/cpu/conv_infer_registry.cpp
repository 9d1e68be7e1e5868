// rn50: the CPU inference engine's convolution list (conv_infer_registry.h).
#include "backend/cpu/conv_infer_registry.h"

#include <fmt/format.h>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_registry.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "backend/cpu/winograd_f43.h"

namespace rn50::onednn {

namespace {

bool is_3x3_same(const InferConvQuery& q) {
  return q.kernel == 3 && q.stride == 1 && q.pad == 1;
}

// ---- takes: what each kernel computes ----

/// oneDNN's Winograd F(4x4, 3x3) with the engine's sum post-op: f32, 3x3 stride 1 pad 1,
/// without a shortcut; in its own blocked layout (the engine reorders around it unless the
/// buffers are nChw16c), so not while calibrating, whose observer reads NHWC destinations.
bool onednn_winograd_takes(const InferConvQuery& q) {
  return !q.int8 && q.dt == DType::f32 && is_3x3_same(q) && !q.residual && !q.observed &&
         !q.batch_invariant;
}
/// Our F(4x4, 3x3) on the engine's nChw8c buffers (winograd_f43.h): f32, C and K multiples of 8,
/// bias, shortcut and ReLU fused.
bool own_winograd_f43_takes(const InferConvQuery& q) {
  return !q.int8 && q.dt == DType::f32 && q.block == 8 && is_3x3_same(q) && q.c % 8 == 0 &&
         q.k % 8 == 0 && !q.observed && !q.batch_invariant;
}
WinogradF23Bf16::Shape f23_shape(const InferConvQuery& q) { return {q.n, q.c, q.k, q.oh, q.ow}; }
/// Our bf16 F(2x2, 3x3) on the engine's NHWC buffers (winograd_f23_bf16.h): built on this CPU,
/// C and K multiples of 16, bias, shortcut and ReLU fused.
bool own_winograd_f23_bf16_takes(const InferConvQuery& q) {
  return !q.int8 && q.dt == DType::bf16 && q.block == 0 && is_3x3_same(q) && !q.observed &&
         !q.batch_invariant && WinogradF23Bf16::fits(f23_shape(q));
}
bool always(const InferConvQuery&) { return true; }

// ---- fits: the policy, the rule table and the speed rule for weights transformed once ----

bool onednn_winograd_fits(const InferConvQuery& q) {
  return onednn_winograd_takes(q) && conv_winograd_allowed();
}
bool own_winograd_f43_fits(const InferConvQuery& q) {
  return own_winograd_f43_takes(q) && conv_own_winograd_allowed() &&
         WinogradF43Conv::worthwhile_cached(WinogradF43Conv::Shape{q.n, q.c, q.k, q.oh, q.ow});
}
bool own_winograd_f23_bf16_fits(const InferConvQuery& q) {
  return own_winograd_f23_bf16_takes(q) && WinogradF23Bf16::worthwhile(f23_shape(q)) &&
         conv_own_winograd_bf16_allowed(ConvShapeInfo{q.c, q.k, 3, 1, q.oh * q.ow});
}

constexpr InferConvImpl kImpls[] = {
    {InferConvKind::onednn_winograd, "onednn_winograd", "onednn", onednn_winograd_fits,
     onednn_winograd_takes},
    {InferConvKind::own_winograd_f43, "own_winograd_f43", "own_winograd_f43",
     own_winograd_f43_fits, own_winograd_f43_takes},
    {InferConvKind::own_winograd_f23_bf16, "own_winograd_f23_bf16", "own_winograd_f23_bf16",
     own_winograd_f23_bf16_fits, own_winograd_f23_bf16_takes},
    {InferConvKind::onednn_direct, "onednn_direct", "onednn", always, always},
};

const char* layout_of(const InferConvQuery& q) {
  return q.block == 16 ? "nChw16c" : q.block == 8 ? "nChw8c" : "plain";
}

}  // namespace

std::span<const InferConvImpl> infer_conv_impls() { return kImpls; }

std::vector<const InferConvImpl*> infer_conv_candidates(const InferConvQuery& q) {
  std::vector<const InferConvImpl*> out;
  const std::string forced = conv_forced_impl();
  if (forced.empty()) {
    for (const InferConvImpl& i : kImpls)
      if (i.fits(q)) out.push_back(&i);
    return out;
  }
  for (const InferConvImpl& i : kImpls)
    if (forced == i.pinned_by && forced != "onednn" && i.takes(q)) out.push_back(&i);
  for (const InferConvImpl& i : kImpls)
    if (std::string_view(i.pinned_by) == "onednn" && i.fits(q)) out.push_back(&i);
  return out;
}

void log_infer_conv(const InferConvQuery& q, const char* impl) {
  if (!conv_log_enabled()) return;
  const std::string forced = conv_forced_impl();
  conv_log_append(fmt::format(
      "conv fwd (engine) x [{},{},-,-] w [{},{},{},{}] y [{},{},{},{}] stride {} pad {} {} {} "
      "policy {}{}{}: {}\n",
      q.n, q.c, q.k, q.c, q.kernel, q.kernel, q.n, q.k, q.oh, q.ow, q.stride, q.pad,
      q.int8 ? "int8" : q.dt == DType::bf16 ? "bf16" : "f32", layout_of(q),
      conv_policy_name(conv_algo()),
      q.residual ? " residual" : "", forced.empty() ? "" : " RN50_CONV_IMPL=" + forced, impl));
}

}  // namespace rn50::onednn
