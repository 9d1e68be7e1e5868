// rn50: what this process's CPU can run, read once at run time (CPUID), so that one binary runs
// on every x86-64 CPU and picks its kernels there (never `#if __AVX512F__` on the build host's
// flags). The kernels written for an instruction set live in regions compiled for it
// (core/isa_region.h); cpu_info() decides which region runs.
// The level can be capped, so that a test, or a user chasing a difference, runs the paths of
// an older CPU: RN50_MAX_CPU_ISA, or when that is unset ONEDNN_MAX_CPU_ISA (oneDNN's variable:
// our kernels and oneDNN's then run at the same level), with oneDNN's spellings: SSE41, AVX,
// AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_AMX (oneDNN's
// dnnl_cpu_isa_t, doc "CPU Dispatcher Control").
#pragma once

#include <cstdint>
#include <string>

namespace rn50 {

/// The instruction-set levels our kernels are built for, lowest first (oneDNN's names).
enum class IsaLevel : uint8_t {
  sse41,             ///< x86-64-v2's floor (SSE4.1/4.2, POPCNT): every build runs here
  avx,
  avx2,              ///< with FMA and F16C (Haswell, Zen 1+)
  avx2_vnni,         ///< AVX-VNNI (Alder Lake)
  avx512_core,       ///< AVX-512 F, BW, VL, DQ (Skylake-SP, Zen 4+)
  avx512_core_vnni,  ///< + AVX512-VNNI (Cascade Lake)
  avx512_core_bf16,  ///< + AVX512-BF16 (Cooper Lake, Zen 4+)
  avx512_core_amx,   ///< + AMX tiles, BF16, INT8 (Sapphire Rapids)
};

/// ONEDNN_MAX_CPU_ISA's spelling of `l` ("AVX512_CORE_BF16").
const char* isa_level_name(IsaLevel l);

/// What the CPU has, after the cap. Features not implied by the level stay as detected (the
/// cap only removes).
struct CpuInfo {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx_vnni = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  std::string vendor;  ///< "AuthenticAMD", "GenuineIntel", ...
  unsigned family = 0;  ///< CPUID leaf 1 family, the extended family added for 0xF (AMD APM)
  IsaLevel level = IsaLevel::sse41;  ///< the highest level all of whose features are present
  IsaLevel detected = IsaLevel::sse41;  ///< the level before the cap
  std::string cap;  ///< the cap's environment value, or "" (none)

  /// AVX2 with FMA: the AVX2 kernels' requirement.
  bool avx2_fma() const { return avx2 && fma; }
  /// AVX-512 F + BW + VL + DQ ("avx512_core"): the AVX-512 kernels' requirement.
  bool avx512_core() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  /// AMX with BF16 tiles.
  bool amx() const { return amx_tile && amx_bf16; }
  bool amd() const { return vendor == "AuthenticAMD"; }
};

/// The process's CPU, detected on first use (thread-safe) and capped by RN50_MAX_CPU_ISA /
/// ONEDNN_MAX_CPU_ISA. An unknown cap value is ignored with one warning on stderr naming it.
const CpuInfo& cpu_info();

/// `detected` capped at level `cap` (features above it cleared): what cpu_info() does with the
/// environment's cap; for tests.
CpuInfo capped(CpuInfo detected, IsaLevel cap);

/// The level named by `name` (ONEDNN_MAX_CPU_ISA's spelling, any case); false when unknown.
bool parse_isa_level(const std::string& name, IsaLevel* out);

}  // namespace rn50
