// rn50 inference: what a CPU engine conv does after its multiply-adds (the epilogue), as oneDNN
// attributes: output scales (INT8), the residual shortcut's add, then a ReLU or QAT's clip. One
// place decides how the shortcut is added:
//   sum post-op     dst = tail(oscale * (acc + bias) + r * dst_old): oneDNN's in-place way, the
//                   destination being the shortcut's own buffer (the engine's liveness rule);
//   binary add      dst = tail(r * (oscale / r * (acc + bias) + residual)), the residual read
//                   through a binary post-op whose source is that same buffer.
// Both are the same sum in f32 (the binary form moves r around the add: the codes can differ by
// one where a value lands on a rounding tie). Why two: on the CPU measured (AVX-512 BF16 and
// VNNI, no AMX) oneDNN 2.6 runs every residual 1x1 conv of ResNet-50 in brgconv_1x1, whose sum
// post-op costs about as much as the convolution on large tensors, while brgconv_1x1 takes no
// full-tensor binary post-op and oneDNN gives it to its older jit 1x1 kernel, whose fused add
// is cheap (bench/results/cpu/2026-12-03-zen5-epyc/infer_residual_join_binary.md).
#pragma once

#include <dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rn50::onednn {

/// How a CPU inference conv adds its residual shortcut (file comment).
///  * automatic: the binary add where the destination has 8 MiB or more (smaller ones stay in
///    the caches, where the sum is as fast or faster) and oneDNN would run the sum post-op in
///    brgconv_1x1 (not on AMX, unmeasured there) and runs the binary add in its jit 1x1 kernel
///    of the same instruction set; else the sum post-op.
///  * sum: always the sum post-op.
///  * binary: the binary add wherever oneDNN builds it (the tests: the path on any CPU),
///    except in a kernel known to compute it wrongly (binary_join_kernel_wrong).
/// Whatever the policy, a conv with an f32 destination keeps the sum post-op: an f32 jit 1x1
/// kernel may keep partial sums in the destination, which is also the shortcut here (bf16 and
/// 8-bit kernels accumulate in registers or an f32 buffer of their own).
enum class ResidualJoin { automatic, sum, binary };

/// The active policy: set_residual_join's, else automatic.
ResidualJoin residual_join();
/// Overrides the policy for the plans built after the call (tests; benchmarks of one against
/// the other); std::nullopt hands the choice back to the rule.
void set_residual_join(std::optional<ResidualJoin> j);

/// A conv's epilogue, in the order oneDNN applies it.
struct ConvEpilogue {
  /// INT8: per output channel k, dst = oscale[k] * (acc + bias[k]) (mask 1 << 1); empty for
  /// floats (no scaling).
  std::vector<float> output_scales;
  /// Whether the conv adds a shortcut stored in the destination's buffer.
  bool residual = false;
  /// The shortcut's weight in destination units (INT8: shortcut scale / destination scale;
  /// floats: 1) and its memory (the destination's dims and layout; INT8: u8 or s8, maybe not
  /// the destination's data type).
  float residual_scale = 1.f;
  dnnl::memory::desc residual_md;
  /// The last post-op: eltwise_relu, eltwise_clip [alpha, beta] (QAT's codes), or undef (none).
  dnnl::algorithm tail = dnnl::algorithm::undef;
  float tail_alpha = 0.f, tail_beta = 0.f;

  /// The attributes with the shortcut (if any) as a sum post-op.
  dnnl::primitive_attr sum_attr() const;
};

/// A conv's primitive descriptor and, when the shortcut is a binary post-op, that post-op's
/// index (execute with DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1 bound to the
/// destination's memory); -1 for the sum post-op or no shortcut.
struct EpilogueConv {
  dnnl::convolution_forward::primitive_desc pd;
  int binary_post_op = -1;
  /// The implementation oneDNN offered for the binary add and binary_join_kernel_wrong
  /// refused (whatever the policy), or empty: for logs and tests.
  std::string binary_refused;
};

/// oneDNN's version as one number, major * 10000 + minor * 100 + patch (2.6.3 -> 20603).
int onednn_version_number();

/// Whether oneDNN implementation `impl` (impl_info_str(), "kernel:isa") computes a conv whose
/// shortcut is a binary post-op wrongly in oneDNN `version` (onednn_version_number()'s form):
/// the AMX 1x1 kernel ("jit_1x1:avx512_core_amx_int8", "..._bf16"; jit_avx512_core_amx_1x1_
/// convolution) before oneDNN 3.4. Its configuration (init_conf) takes nb_os2_blocking = 2
/// whenever two tiles of output rows are blocked, so a plane of exactly three tiles (6x6 =
/// 3 x 12 rows: ResNet's last stage at 192 px, its third at 96 px) runs as four: each call writes
/// one tile of rows past its image, into the next image (whose own call then reads the
/// shortcut it overwrote: the wrong codes of issue 67) or past the tensor's end. oneDNN fixed it
/// in commit 9ba6789 ("x64: 1x1 conv: fix os_tail computation", first in v3.4). oneDNN gives
/// this kernel only the binary form here (the sum form runs in brgconv_1x1), so refusing the
/// kernel keeps every such conv on the sum post-op.
bool binary_join_kernel_wrong(const std::string& impl, int version);

/// The choice make_epilogue_conv makes between the two forms of a shortcut's add, from what
/// oneDNN offered: `sum_impl` and `bin_impl` (impl_info_str() of each form; bin_impl empty when
/// oneDNN has no binary form), the destination's bytes, oneDNN's version. True = the binary add.
///  * never where binary_join_kernel_wrong(bin_impl, version);
///  * sum: never; binary: wherever it exists;
///  * automatic: dst_bytes >= 8 MiB, sum_impl brgconv_1x1 of an ISA without AMX and bin_impl a
///    jit 1x1 kernel of the same ISA (the measured case of the file comment).
bool take_binary_join(ResidualJoin policy, const std::string& sum_impl, const std::string& bin_impl,
                      size_t dst_bytes, int version);

/// The primitive descriptor of forward-inference conv `d` (direct algorithm, fixed src/dst
/// layouts) with epilogue `e`, the shortcut joined as residual_join() decides (file comment),
/// or always by the sum post-op when `batch_invariant` (the automatic rule picks by the
/// destination's size, so batches of other sizes would run other kernels, whose sums may
/// round in another order). The binary add is never taken where take_binary_join says no
/// (oneDNN's known-wrong kernel included). Throws dnnl::error when oneDNN has no
/// implementation even with the sum post-op.
EpilogueConv make_epilogue_conv(const dnnl::convolution_forward::desc& d, const ConvEpilogue& e,
                                const dnnl::engine& eng, bool batch_invariant = false);

}  // namespace rn50::onednn
