// rn50: the CPU convolution speed rules, one table (conv_rules.cpp): where, under the automatic
// policy, an implementation of the registry (conv_registry.h) is taken because it was measured
// faster than oneDNN's kernel there. One row per (CPU classes, implementation, directions,
// dtype, shape predicate), each with the measurement that justified it under bench/results/cpu/
// (command and output). This is the only place a CPU class is named; a new CPU generation is a
// row (or a class added to rows) plus its evidence folder. docs/perf/cpu-kernels.md explains
// each implementation and each rule.
//
// The rules say where an implementation is FASTER; whether its kernel exists on this CPU and
// takes the shape at all (the ISA, the layout, channel multiples) is the implementation's own
// check (conv_registry.cpp's fits/takes), and the policies `direct` and `matmul` of
// RN50_CONV_ALGO bypass the table (conv_algo.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "backend/cpu/conv_algo.h"
#include "rn50/tensor.h"

namespace rn50::onednn {

/// The CPU classes the rules distinguish, as bits (a row names a set of them).
enum CpuClass : uint8_t {
  /// No AVX-512 in oneDNN's effective ISA (AVX2 CPUs, and anything capped below AVX-512).
  kCpuAvx2 = 1,
  /// AVX-512 without AMX, not Zen 5: AMD Zen 4 (AVX-512 on 256-bit units) and Intel CPUs
  /// without AMX (not measured: they get Zen 4's rules).
  kCpuAvx512 = 2,
  /// AMD Zen 5 and later (family 1Ah and above: AVX-512 on 512-bit units), without AMX.
  kCpuZen5 = 4,
  /// oneDNN dispatches AMX kernels (Intel Sapphire Rapids and later).
  kCpuAmx = 8,
};

/// "avx2", "avx512", "zen5" or "amx" (one class); "?" otherwise.
const char* cpu_class_name(CpuClass c);

/// This process's class: from oneDNN's effective ISA (ONEDNN_MAX_CPU_ISA caps it: a test runs
/// the rules of a lower class) and cpu_info()'s vendor and family (AMD APM vol. 3: Zen 4 is
/// family 19h, Zen 5 1Ah). Read once per call; cheap.
CpuClass cpu_class();

/// The directions of a row, as bits.
enum ConvDirs : uint8_t {
  kDirFwd = 1,
  kDirBwdData = 2,
  kDirBwdWeights = 4,
  kDirAll = 7,
};

/// One rule: on the CPU classes `cpus`, implementation `impl` (a conv_registry.h name) is
/// taken for the directions `dirs` of convolutions in dtype `dt` whose shape satisfies `shape`.
struct ConvRule {
  uint8_t cpus;        ///< CpuClass bits
  const char* impl;    ///< conv_impl_names()'s name
  uint8_t dirs;        ///< ConvDirs bits
  DType dt;
  bool (*shape)(const ConvShapeInfo& s);
  const char* shape_text;  ///< `shape` in words, as docs/perf/cpu-kernels.md's table shows it
  /// The measurement, a path under the repository root: bench/results/cpu/<date>-<cpu>/<file>.
  const char* evidence;
};

/// Every rule, in table order (the order does not matter: the registry's list order decides
/// between implementations that several rules take).
std::span<const ConvRule> conv_rules();

/// Whether a rule takes direction `dir` of a convolution in `dt` of shape `s` for
/// implementation `impl` on CPU class `cpu`. No kernel runs: tests ask it for every class.
bool conv_rule_takes(CpuClass cpu, std::string_view impl, ConvDir dir, DType dt,
                     const ConvShapeInfo& s);

}  // namespace rn50::onednn
