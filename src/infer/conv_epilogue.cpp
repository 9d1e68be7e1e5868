// rn50 inference: a CPU conv's epilogue and the choice of how it adds the shortcut
// (conv_epilogue.h).
#include "infer/conv_epilogue.h"

#include <atomic>
#include <cmath>
#include <string>

namespace rn50::onednn {
namespace {

using dt = dnnl::memory::data_type;

/// The smallest destination for which the automatic rule takes the binary add. brgconv_1x1's
/// sum post-op is slow only on large tensors: from about 8 MiB the binary add was measured
/// ahead, below that level or mixed
/// (bench/results/cpu/2026-12-03-zen5-epyc/infer_residual_join_binary.md).
constexpr size_t kBinaryJoinMinBytes = size_t{8} << 20;

/// set_residual_join's override: -1 none, else the ResidualJoin's value.
std::atomic<int> g_join_override{-1};

/// The tail post-op (ReLU or clip), if any.
void append_tail(const ConvEpilogue& e, dnnl::post_ops& po) {
  if (e.tail != dnnl::algorithm::undef) po.append_eltwise(1.f, e.tail, e.tail_alpha, e.tail_beta);
}

/// The attributes with the shortcut as a binary add (file comment of conv_epilogue.h): output
/// scales over r (or 1 / r for floats), the add, the scale r as eltwise_linear, the tail.
dnnl::primitive_attr binary_attr(const ConvEpilogue& e) {
  const float r = e.residual_scale;
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  if (!e.output_scales.empty()) {
    std::vector<float> os(e.output_scales);
    for (float& s : os) s /= r;
    attr.set_output_scales(1 << 1, os);
  } else if (r != 1.f) {
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f / r, 0.f);
  }
  po.append_binary(dnnl::algorithm::binary_add, e.residual_md);
  if (r != 1.f) po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, r, 0.f);
  append_tail(e, po);
  attr.set_post_ops(po);
  return attr;
}

}  // namespace

ResidualJoin residual_join() {
  const int o = g_join_override.load(std::memory_order_relaxed);
  return o < 0 ? ResidualJoin::automatic : static_cast<ResidualJoin>(o);
}

void set_residual_join(std::optional<ResidualJoin> j) {
  g_join_override.store(j ? static_cast<int>(*j) : -1, std::memory_order_relaxed);
}

dnnl::primitive_attr ConvEpilogue::sum_attr() const {
  dnnl::primitive_attr attr;
  if (!output_scales.empty()) attr.set_output_scales(1 << 1, output_scales);
  dnnl::post_ops po;
  if (residual) po.append_sum(residual_scale, residual_md.data_type());
  append_tail(*this, po);
  attr.set_post_ops(po);
  return attr;
}

int onednn_version_number() {
  const dnnl_version_t* v = dnnl_version();
  return v->major * 10000 + v->minor * 100 + v->patch;
}

bool binary_join_kernel_wrong(const std::string& impl, int version) {
  const size_t colon = impl.find(':');
  if (colon == std::string::npos) return false;
  return impl.compare(0, colon, "jit_1x1") == 0 &&
         impl.find("amx", colon) != std::string::npos && version < 30400;
}

bool take_binary_join(ResidualJoin policy, const std::string& sum_impl, const std::string& bin_impl,
                      size_t dst_bytes, int version) {
  if (bin_impl.empty() || policy == ResidualJoin::sum ||
      binary_join_kernel_wrong(bin_impl, version))
    return false;
  if (policy == ResidualJoin::binary) return true;
  // The measured case only (conv_epilogue.h): brgconv_1x1's sum against the jit 1x1 kernel's
  // binary add on the same instruction set, without AMX.
  const auto split = [](const std::string& s) {
    const size_t colon = s.find(':');
    return colon == std::string::npos
               ? std::pair<std::string, std::string>{s, ""}
               : std::pair<std::string, std::string>{s.substr(0, colon), s.substr(colon + 1)};
  };
  const auto [sum_kernel, sum_isa] = split(sum_impl);
  const auto [bin_kernel, bin_isa] = split(bin_impl);
  return dst_bytes >= kBinaryJoinMinBytes && sum_kernel == "brgconv_1x1" &&
         sum_isa.find("amx") == std::string::npos && bin_kernel.rfind("jit_", 0) == 0 &&
         bin_kernel.find("1x1") != std::string::npos && bin_isa == sum_isa;
}

EpilogueConv make_epilogue_conv(const dnnl::convolution_forward::desc& d, const ConvEpilogue& e,
                                const dnnl::engine& eng, bool batch_invariant) {
  EpilogueConv out{dnnl::convolution_forward::primitive_desc(d, e.sum_attr(), eng), -1, {}};
  const ResidualJoin policy = residual_join();
  const float r = e.residual_scale;
  // Never into f32 (an f32 jit 1x1 kernel may keep partial sums in the destination, which is
  // also the binary add's source here) nor for a batch-invariant engine (the declaration).
  if (!e.residual || batch_invariant || policy == ResidualJoin::sum || !(r > 0.f) ||
      !std::isfinite(r) || out.pd.dst_desc().data_type() == dt::f32)
    return out;
  dnnl::convolution_forward::primitive_desc bin;
  try {
    bin = dnnl::convolution_forward::primitive_desc(d, binary_attr(e), eng);
  } catch (const dnnl::error&) {
    return out;  // no implementation takes the binary add here
  }
  const std::string bin_impl = bin.impl_info_str();
  const int version = onednn_version_number();
  if (binary_join_kernel_wrong(bin_impl, version)) {
    out.binary_refused = bin_impl;
    return out;
  }
  if (!take_binary_join(policy, out.pd.impl_info_str(), bin_impl, out.pd.dst_desc().get_size(),
                        version))
    return out;
  // The binary post-op's index: after the linear scale of floats with r != 1 (binary_attr).
  out.binary_post_op = e.output_scales.empty() && r != 1.f ? 1 : 0;
  out.pd = bin;
  return out;
}

}  // namespace rn50::onednn
