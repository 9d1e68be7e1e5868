// rn50: the CPU's instruction sets from CPUID (core/cpu_info.h). Bits from Intel's SDM vol. 2A
// (CPUID leaves 1 and 7, XGETBV) and AMD's APM vol. 3 (the family).
#include "core/cpu_info.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace rn50 {
namespace {

constexpr IsaLevel kLevels[] = {
    IsaLevel::sse41,       IsaLevel::avx,
    IsaLevel::avx2,        IsaLevel::avx2_vnni,
    IsaLevel::avx512_core, IsaLevel::avx512_core_vnni,
    IsaLevel::avx512_core_bf16, IsaLevel::avx512_core_amx,
};

bool bit(unsigned v, int b) { return ((v >> b) & 1u) != 0; }

/// The highest level whose features `c` has.
IsaLevel level_of(const CpuInfo& c) {
  IsaLevel l = IsaLevel::sse41;
  if (c.avx) l = IsaLevel::avx;
  if (c.avx && c.avx2 && c.fma && c.f16c) l = c.avx_vnni ? IsaLevel::avx2_vnni : IsaLevel::avx2;
  if (l >= IsaLevel::avx2 && c.avx512_core()) {
    l = IsaLevel::avx512_core;
    if (c.avx512_vnni) {
      l = IsaLevel::avx512_core_vnni;
      if (c.avx512_bf16) {
        l = IsaLevel::avx512_core_bf16;
        if (c.amx() && c.amx_int8) l = IsaLevel::avx512_core_amx;
      }
    }
  }
  return l;
}

CpuInfo detect() {
  CpuInfo c;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d) == 0) return c;
  const unsigned max_leaf = a;
  char v[13] = {0};
  for (int i = 0; i < 4; ++i) {
    v[i] = static_cast<char>(b >> (8 * i));
    v[4 + i] = static_cast<char>(d >> (8 * i));
    v[8 + i] = static_cast<char>(cx >> (8 * i));
  }
  c.vendor = v;
  __get_cpuid(1, &a, &b, &cx, &d);
  const unsigned base = (a >> 8) & 0xf, ext = (a >> 20) & 0xff;
  c.family = base == 0xf ? base + ext : base;
  c.sse42 = bit(cx, 19) && bit(cx, 20);
  const bool osxsave = bit(cx, 27);
  // The OS saves the wider registers (XCR0): YMM (bits 1, 2), ZMM (5, 6, 7), AMX tiles (17, 18).
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0,
             os_amx = (xcr0 & 0x60000) == 0x60000;
  c.avx = bit(cx, 28) && os_ymm;
  c.fma = bit(cx, 12) && os_ymm;
  c.f16c = bit(cx, 29) && os_ymm;
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &cx, &d);
    const unsigned sub = a;
    c.avx2 = bit(b, 5) && os_ymm;
    c.avx512f = bit(b, 16) && os_zmm;
    c.avx512dq = bit(b, 17) && os_zmm;
    c.avx512bw = bit(b, 30) && os_zmm;
    c.avx512vl = bit(b, 31) && os_zmm;
    c.avx512_vnni = bit(cx, 11) && os_zmm;
    c.amx_bf16 = bit(d, 22) && os_amx;
    c.amx_tile = bit(d, 24) && os_amx;
    c.amx_int8 = bit(d, 25) && os_amx;
    if (sub >= 1) {
      __get_cpuid_count(7, 1, &a, &b, &cx, &d);
      c.avx_vnni = bit(a, 4) && os_ymm;
      c.avx512_bf16 = bit(a, 5) && os_zmm;
    }
  }
#endif
  c.level = c.detected = level_of(c);
  return c;
}

}  // namespace

const char* isa_level_name(IsaLevel l) {
  switch (l) {
    case IsaLevel::sse41: return "SSE41";
    case IsaLevel::avx: return "AVX";
    case IsaLevel::avx2: return "AVX2";
    case IsaLevel::avx2_vnni: return "AVX2_VNNI";
    case IsaLevel::avx512_core: return "AVX512_CORE";
    case IsaLevel::avx512_core_vnni: return "AVX512_CORE_VNNI";
    case IsaLevel::avx512_core_bf16: return "AVX512_CORE_BF16";
    case IsaLevel::avx512_core_amx: return "AVX512_CORE_AMX";
  }
  return "?";
}

bool parse_isa_level(const std::string& name, IsaLevel* out) {
  std::string u = name;
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char ch) { return std::toupper(ch); });
  for (IsaLevel l : kLevels)
    if (u == isa_level_name(l)) {
      *out = l;
      return true;
    }
  return false;
}

CpuInfo capped(CpuInfo c, IsaLevel cap) {
  if (cap < IsaLevel::avx) c.avx = false;
  if (cap < IsaLevel::avx2) c.avx2 = c.fma = c.f16c = false;
  if (cap < IsaLevel::avx2_vnni) c.avx_vnni = false;
  if (cap < IsaLevel::avx512_core) c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = false;
  if (cap < IsaLevel::avx512_core_vnni) c.avx512_vnni = false;
  if (cap < IsaLevel::avx512_core_bf16) c.avx512_bf16 = false;
  if (cap < IsaLevel::avx512_core_amx) c.amx_tile = c.amx_bf16 = c.amx_int8 = false;
  c.level = level_of(c);
  return c;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuInfo c = detect();
    const char* env = std::getenv("RN50_MAX_CPU_ISA");
    const char* which = "RN50_MAX_CPU_ISA";
    if (env == nullptr || *env == '\0') {
      env = std::getenv("ONEDNN_MAX_CPU_ISA");
      which = "ONEDNN_MAX_CPU_ISA";
    }
    if (env == nullptr || *env == '\0' || std::string(env) == "ALL") return c;
    IsaLevel cap;
    if (!parse_isa_level(env, &cap)) {
      std::fprintf(stderr,
                   "rn50: warning: %s=%s is not a level (SSE41, AVX, AVX2, AVX2_VNNI, "
                   "AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_AMX): ignored\n",
                   which, env);
      return c;
    }
    CpuInfo capped_info = capped(c, cap);
    capped_info.cap = env;
    return capped_info;
  }();
  return info;
}

}  // namespace rn50
