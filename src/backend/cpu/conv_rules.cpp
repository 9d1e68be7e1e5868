// rn50: the CPU convolution speed rules (conv_rules.h). Each row's evidence file holds the
// command and the figures; docs/perf/cpu-kernels.md says why each rule exists.
#include "backend/cpu/conv_rules.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/onednn_backend.h"
#include "core/cpu_info.h"

namespace rn50::onednn {

namespace {

constexpr uint8_t kAvx512Bf16NoAmx = kCpuAvx512 | kCpuZen5;  // where our bf16 kernels run
constexpr uint8_t kEveryAvx512 = kCpuAvx512 | kCpuZen5 | kCpuAmx;

bool any_shape(const ConvShapeInfo&) { return true; }
bool outputs_to_14x14(const ConvShapeInfo& s) { return s.out_pixels <= 14 * 14; }
bool outputs_from_14x14(const ConvShapeInfo& s) { return s.out_pixels >= 14 * 14; }
bool outputs_to_7x7(const ConvShapeInfo& s) { return s.out_pixels <= 7 * 7; }
bool stride2_3x3(const ConvShapeInfo& s) { return s.R == 3 && s.stride == 2; }
bool strided_or_widening4_1x1(const ConvShapeInfo& s) {
  return s.R == 1 && (s.stride > 1 || s.K >= 4 * s.C);
}
bool strided_kxk_to_14x14(const ConvShapeInfo& s) {
  return s.R > 1 && s.stride > 1 && s.out_pixels <= 14 * 14;
}
bool narrowing_1x1(const ConvShapeInfo& s) { return s.R == 1 && s.K < s.C; }
bool keeping_widening_or_7x7_1x1(const ConvShapeInfo& s) {
  return s.R == 1 && (s.K >= s.C || s.out_pixels <= 7 * 7);
}
bool widening4_1x1_from_56x56(const ConvShapeInfo& s) {
  return s.R == 1 && s.K >= 4 * s.C && s.out_pixels >= 56 * 56;
}

#define RN50_EVIDENCE(dir, file) "bench/results/cpu/" dir "/" file

// The table. Shapes are ConvShapeInfo's (C in, K out, R kernel, stride, out_pixels = OH x OW).
constexpr ConvRule kRules[] = {
    // oneDNN 2.6's AMX direct kernels are slow for the 1x1 backward; its brgemm matmul is not.
    {kCpuAmx, "onednn_matmul_1x1", kDirBwdData | kDirBwdWeights, DType::bf16, any_shape,
     "every 1x1 (pad 0, any stride)",
     RN50_EVIDENCE("2026-11-26-sapphire-rapids", "matmul_1x1_bwd_bf16.md")},
    {kCpuAmx, "im2col_matmul", kDirBwdWeights, DType::bf16, outputs_to_14x14,
     "KxK with outputs of 14x14 or fewer",
     RN50_EVIDENCE("2026-11-26-sapphire-rapids", "im2col_wgrad_bf16.md")},
    // Without AVX-512 oneDNN has no Winograd and only its jit:avx2 direct kernels.
    {kCpuAvx2, "im2col_matmul", kDirBwdWeights, DType::f32, any_shape, "every KxK",
     RN50_EVIDENCE("2026-11-27-avx2-epyc", "im2col_wgrad_f32.md")},
    {kCpuAvx2, "own_winograd_f43", kDirAll, DType::f32, any_shape,
     "every 3x3 stride 1 pad 1 the kernel takes",
     RN50_EVIDENCE("2026-11-28-avx2-epyc", "own_winograd_f43_train.md")},
    // With AVX-512 the stride-1 3x3s are oneDNN's Winograd; the stride-2 ones leave its kernel.
    {kEveryAvx512, "im2col_matmul", kDirBwdWeights, DType::f32, stride2_3x3, "3x3 stride 2",
     RN50_EVIDENCE("2026-12-03-zen5-epyc", "im2col_wgrad_f32_stride2.md")},
    // AVX-512 BF16 without AMX: oneDNN 2.6 has no bf16 Winograd, and its jit_bf16 kernels are
    // weakest at small outputs.
    {kAvx512Bf16NoAmx, "own_winograd_f23_bf16", kDirAll, DType::bf16, outputs_from_14x14,
     "3x3 stride 1 with outputs of 14x14 or more",
     RN50_EVIDENCE("2026-11-29-zen4-epyc", "own_winograd_f23_bf16.md")},
    {kAvx512Bf16NoAmx, "own_wgrad_gemm", kDirBwdWeights, DType::bf16, outputs_to_7x7,
     "outputs of 7x7 or fewer (1x1 and KxK, any stride)",
     RN50_EVIDENCE("2026-11-28-zen4-epyc", "own_wgrad_bf16_7x7.md")},
    {kAvx512Bf16NoAmx, "own_wgrad_gemm", kDirBwdWeights, DType::bf16, strided_or_widening4_1x1,
     "1x1 strided or widening at least fourfold",
     RN50_EVIDENCE("2026-11-29-zen4-epyc", "own_wgrad_bf16_pixel_split.md")},
    {kAvx512Bf16NoAmx, "own_wgrad_gemm", kDirBwdWeights, DType::bf16, strided_kxk_to_14x14,
     "KxK strided, outputs of 14x14 or fewer",
     RN50_EVIDENCE("2026-12-02-zen5-epyc", "own_wgrad_bf16.md")},
    {kCpuZen5, "own_wgrad_gemm", kDirBwdWeights, DType::bf16, narrowing_1x1,
     "1x1 narrowing the channels (K < C)",
     RN50_EVIDENCE("2026-12-02-zen5-epyc", "own_wgrad_bf16.md")},
    {kCpuZen5, "own_wgrad_gemm", kDirBwdWeights, DType::f32, keeping_widening_or_7x7_1x1,
     "1x1 keeping or widening the channels (K >= C), or outputs of 7x7 or fewer",
     RN50_EVIDENCE("2026-12-03-zen5-epyc", "own_wgrad_f32.md")},
    {kCpuAvx512, "own_wgrad_gemm", kDirBwdWeights, DType::f32, widening4_1x1_from_56x56,
     "1x1 widening at least fourfold, outputs of 56x56 or more",
     RN50_EVIDENCE("2026-12-04-zen4-epyc", "own_wgrad_zen4.md")},
};

#undef RN50_EVIDENCE

uint8_t dir_bit(ConvDir d) {
  switch (d) {
    case ConvDir::fwd: return kDirFwd;
    case ConvDir::bwd_data: return kDirBwdData;
    case ConvDir::bwd_weights: return kDirBwdWeights;
  }
  return 0;
}

}  // namespace

const char* cpu_class_name(CpuClass c) {
  switch (c) {
    case kCpuAvx2: return "avx2";
    case kCpuAvx512: return "avx512";
    case kCpuZen5: return "zen5";
    case kCpuAmx: return "amx";
  }
  return "?";
}

CpuClass cpu_class() {
  static const bool amx = onednn_isa_at_least(dnnl::cpu_isa::avx512_core_amx);
  static const bool avx512 = onednn_isa_at_least(dnnl::cpu_isa::avx512_core);
  if (amx) return kCpuAmx;
  if (!avx512) return kCpuAvx2;
  const CpuInfo& c = cpu_info();
  return c.amd() && c.family >= 0x1a ? kCpuZen5 : kCpuAvx512;
}

std::span<const ConvRule> conv_rules() { return kRules; }

bool conv_rule_takes(CpuClass cpu, std::string_view impl, ConvDir dir, DType dt,
                     const ConvShapeInfo& s) {
  for (const ConvRule& r : kRules)
    if ((r.cpus & cpu) && (r.dirs & dir_bit(dir)) && r.dt == dt && impl == r.impl && r.shape(s))
      return true;
  return false;
}

}  // namespace rn50::onednn
