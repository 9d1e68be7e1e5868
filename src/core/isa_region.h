// rn50: regions of a source file compiled for one instruction set, so that a portable build
// (x86-64-v2, core/cpu_info.h) still holds the AVX2 and AVX-512 kernels, chosen at run time.
// Every function *defined* between a BEGIN and its END (lambdas, templates and OpenMP regions
// included) is compiled for that set; functions declared elsewhere (the standard library's
// templates) keep the build's baseline, so no instruction beyond the baseline leaks into code
// that runs before the CPU was asked (unlike whole files built with -mavx512f, whose inline
// functions the linker may pick for every caller). Include the headers a region needs before
// it. GCC: `#pragma GCC target` (it also defines the set's macros, __AVX512F__ etc., inside);
// clang: `#pragma clang attribute` with the target attribute (no macros): so a region tells
// its code which set it has through its own macro, never through __AVX...__.
// The sets (GCC/clang target names):
//   AVX2     avx2, fma, f16c                          (IsaLevel::avx2: Haswell, Zen 1+)
//   AVX512   + avx512f, avx512bw, avx512vl, avx512dq   (IsaLevel::avx512_core)
//   AVX512_BF16  + avx512bf16, avx512vnni              (IsaLevel::avx512_core_bf16)
#pragma once

#define RN50_ISA_TARGET_AVX2 "avx2,fma,f16c"
#define RN50_ISA_TARGET_AVX512 "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"
#define RN50_ISA_TARGET_AVX512_BF16 \
  "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16"

#define RN50_ISA_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define RN50_ISA_BEGIN(isa) \
  RN50_ISA_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define RN50_ISA_END RN50_ISA_PRAGMA(clang attribute pop)
#else
// -Wpsabi: a region's functions pass __m256/__m512 among themselves only (GCC warns that the
// baseline's ABI would differ).
#define RN50_ISA_BEGIN(isa)                                                           \
  RN50_ISA_PRAGMA(GCC push_options) RN50_ISA_PRAGMA(GCC target(isa))                  \
  RN50_ISA_PRAGMA(GCC diagnostic push) RN50_ISA_PRAGMA(GCC diagnostic ignored "-Wpsabi")
#define RN50_ISA_END RN50_ISA_PRAGMA(GCC diagnostic pop) RN50_ISA_PRAGMA(GCC pop_options)
#endif
