// The CPU's instruction sets (core/cpu_info.h): the cap by name (oneDNN's spellings, any case),
// what each cap removes and the level it leaves, and this process's reading against oneDNN's.
#include <gtest/gtest.h>

#include <dnnl.hpp>

#include "core/cpu_info.h"

namespace rn50 {
namespace {

/// A Sapphire Rapids as CPUID shows it: everything up to AMX, AVX-VNNI too.
CpuInfo sapphire_rapids() {
  CpuInfo c;
  c.sse42 = c.avx = c.avx2 = c.fma = c.f16c = c.avx_vnni = true;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = c.avx512_vnni = c.avx512_bf16 = true;
  c.amx_tile = c.amx_bf16 = c.amx_int8 = true;
  c.vendor = "GenuineIntel";
  c.family = 6;
  return capped(c, IsaLevel::avx512_core_amx);
}

TEST(CpuInfo, CapsRemoveEverythingAboveTheirLevel) {
  IsaLevel l;
  ASSERT_TRUE(parse_isa_level("avx512_core_bf16", &l));
  EXPECT_EQ(l, IsaLevel::avx512_core_bf16);
  ASSERT_TRUE(parse_isa_level("SSE41", &l));
  EXPECT_EQ(l, IsaLevel::sse41);
  EXPECT_FALSE(parse_isa_level("AVX512", &l));
  EXPECT_FALSE(parse_isa_level("", &l));
  for (IsaLevel cap : {IsaLevel::sse41, IsaLevel::avx, IsaLevel::avx2, IsaLevel::avx2_vnni,
                       IsaLevel::avx512_core, IsaLevel::avx512_core_vnni,
                       IsaLevel::avx512_core_bf16, IsaLevel::avx512_core_amx}) {
    IsaLevel back;
    ASSERT_TRUE(parse_isa_level(isa_level_name(cap), &back));
    EXPECT_EQ(back, cap);
    const CpuInfo c = capped(sapphire_rapids(), cap);
    SCOPED_TRACE(isa_level_name(cap));
    EXPECT_EQ(c.level, cap);
    EXPECT_EQ(c.avx, cap >= IsaLevel::avx);
    EXPECT_EQ(c.avx2_fma(), cap >= IsaLevel::avx2);
    EXPECT_EQ(c.avx512_core(), cap >= IsaLevel::avx512_core);
    EXPECT_EQ(c.avx512_vnni, cap >= IsaLevel::avx512_core_vnni);
    EXPECT_EQ(c.avx512_bf16, cap >= IsaLevel::avx512_core_bf16);
    EXPECT_EQ(c.amx(), cap == IsaLevel::avx512_core_amx);
    EXPECT_EQ(c.vendor, "GenuineIntel");  // the cap removes features only
  }
  // A Zen 4 (AVX-512 with BF16, no AVX-VNNI, no AMX) capped at AVX2_VNNI is at AVX2.
  CpuInfo zen4 = sapphire_rapids();
  zen4.avx_vnni = zen4.amx_tile = zen4.amx_bf16 = zen4.amx_int8 = false;
  zen4 = capped(zen4, IsaLevel::avx512_core_amx);
  EXPECT_EQ(zen4.level, IsaLevel::avx512_core_bf16);
  EXPECT_EQ(capped(zen4, IsaLevel::avx2_vnni).level, IsaLevel::avx2);
}

// This process's level and oneDNN's effective one agree on the AVX-512 and AVX2 steps (both
// read CPUID; both take ONEDNN_MAX_CPU_ISA as their cap).
TEST(CpuInfo, AgreesWithOnednn) {
  const CpuInfo& c = cpu_info();
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl::cpu_isa i) {
    return (isa & static_cast<unsigned>(i)) == static_cast<unsigned>(i);
  };
  EXPECT_EQ(c.avx512_core(), has(dnnl::cpu_isa::avx512_core)) << isa_level_name(c.level);
  EXPECT_EQ(c.avx2_fma(), has(dnnl::cpu_isa::avx2)) << isa_level_name(c.level);
  EXPECT_EQ(c.avx512_bf16 && c.avx512_core(), has(dnnl::cpu_isa::avx512_core_bf16));
  EXPECT_EQ(c.amx(), has(dnnl::cpu_isa::avx512_core_amx));
  std::printf("cpu_info: %s (detected %s%s%s), %s family %xh\n", isa_level_name(c.level),
              isa_level_name(c.detected), c.cap.empty() ? "" : ", cap ", c.cap.c_str(),
              c.vendor.c_str(), c.family);
}

}  // namespace
}  // namespace rn50
