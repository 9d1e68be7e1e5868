// rn50: the CPU's measured peak (measure_cpu_peak, include/rn50/roofline.h): oneDNN's own large
// matmul and 3x3 convolution, timed on every core with the layouts oneDNN prefers, so that a
// benchmark's GFLOP/s can be set against what this library reaches on this machine at best;
// and the memory roof, STREAM's copy and triad on every core (measure_cpu_bandwidth).
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "core/bf16.h"
#include "core/check.h"
#include "core/stats.h"
#include "rn50/roofline.h"

namespace rn50 {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

// The shapes (roofline.h): large enough that one call is tens of milliseconds even in int8 on
// a few cores, so that the timing is of the kernels and not of the calls around them.
constexpr int64_t kMm = 2048;                                      // M = N = K
constexpr int64_t kConvN = 32, kConvC = 256, kConvHW = 28, kConvR = 3;  // ResNet stage 3

/// Fills `m` (whatever its layout) with small pseudo-random values of its data type: uniform
/// in [-1, 1) for f32 and bf16, any byte for u8 and s8, so that no denormal slows a kernel.
void fill(memory& m) {
  const memory::desc d = m.get_desc();
  const size_t bytes = d.get_size();
  auto* p = static_cast<uint8_t*>(m.get_data_handle());
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  };
  auto uniform = [&] { return static_cast<float>(next()) / 2147483648.f - 1.f; };
  switch (d.data_type()) {
    case dt::f32:
      for (size_t i = 0; i < bytes / 4; ++i) reinterpret_cast<float*>(p)[i] = uniform();
      break;
    case dt::bf16:
      for (size_t i = 0; i < bytes / 2; ++i)
        reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(uniform());
      break;
    default:
      for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(next() & 0x3f);
      break;
  }
}

/// The data types of (src, weights, dst) for a precision name.
struct Types {
  dt src, wei, dst;
};
Types types_of(const std::string& precision) {
  if (precision == "fp32") return {dt::f32, dt::f32, dt::f32};
  if (precision == "bf16") return {dt::bf16, dt::bf16, dt::f32};
  if (precision == "int8") return {dt::u8, dt::s8, dt::s32};
  RN50_FAIL("--precisions {}: bench peak measures fp32, bf16 or int8", precision);
}

}  // namespace

std::string onednn_cpu_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::all: return "all";
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
  }
  return "unknown";
}

PeakMeasurement measure_cpu_peak(const std::string& op, const std::string& precision, int calls,
                                 int warmup) {
  RN50_CHECK(op == "matmul" || op == "conv3x3", "bench peak: unknown op '{}'", op);
  RN50_CHECK(calls >= 1, "--benchmark-steps {}: must be >= 1", calls);
  RN50_CHECK(warmup >= 0, "--benchmark-warmup-steps {}: must be >= 0", warmup);
  const Types t = types_of(precision);
  PeakMeasurement m;
  m.op = op;
  m.precision = precision;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
  try {
    if (op == "matmul") {
      m.shape = fmt::format("M=N=K={}", kMm);
      m.ops_per_call = 2.0 * kMm * kMm * kMm;
      const memory::desc a({kMm, kMm}, t.src, tag::ab), b({kMm, kMm}, t.wei, tag::any),
          c({kMm, kMm}, t.dst, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
      m.impl = pd.impl_info_str();
      prim = dnnl::matmul(pd);
      args = {{DNNL_ARG_SRC, memory(pd.src_desc(), eng)},
              {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), eng)},
              {DNNL_ARG_DST, memory(pd.dst_desc(), eng)}};
    } else {
      m.shape = fmt::format("N={} C=K={} {}x{} {}x{} pad 1", kConvN, kConvC, kConvHW, kConvHW,
                            kConvR, kConvR);
      m.ops_per_call = 2.0 * kConvN * kConvC * kConvC * kConvR * kConvR * kConvHW * kConvHW;
      const memory::desc x({kConvN, kConvC, kConvHW, kConvHW}, t.src, tag::any),
          w({kConvC, kConvC, kConvR, kConvR}, t.wei, tag::any),
          y({kConvN, kConvC, kConvHW, kConvHW}, t.dst, tag::any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, x, w, y, {1, 1},
                                        {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, eng);
      m.impl = pd.impl_info_str();
      prim = dnnl::convolution_forward(pd);
      args = {{DNNL_ARG_SRC, memory(pd.src_desc(), eng)},
              {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), eng)},
              {DNNL_ARG_DST, memory(pd.dst_desc(), eng)}};
    }
  } catch (const dnnl::error& e) {
    m.skipped = fmt::format("oneDNN has no {} {} for this CPU (ISA {}): {}", precision, op,
                            onednn_cpu_isa(), e.what());
    return m;
  }
  if (m.impl.rfind("ref", 0) == 0) {
    m.skipped = fmt::format("only oneDNN's reference implementation ({}) runs {} {} on this CPU "
                            "(ISA {}): no peak to measure",
                            m.impl, precision, op, onednn_cpu_isa());
    return m;
  }
  for (auto& [arg, mem] : args) fill(mem);
  for (int i = 0; i < warmup; ++i) prim.execute(strm, args);
  strm.wait();
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    prim.execute(strm, args);
    strm.wait();
    m.seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double med = percentile(m.seconds, 50);
  m.gflops = med > 0 ? m.ops_per_call / med / 1e9 : 0.0;
  return m;
}

PeakMeasurement measure_cpu_bandwidth(const std::string& kernel, int64_t elements, int calls,
                                      int warmup) {
  RN50_CHECK(kernel == "copy" || kernel == "triad",
             "bench peak: unknown memory kernel '{}' (copy or triad)", kernel);
  RN50_CHECK(elements >= 1, "bench peak: {} elements per array: must be >= 1", elements);
  RN50_CHECK(calls >= 1, "--benchmark-steps {}: must be >= 1", calls);
  RN50_CHECK(warmup >= 0, "--benchmark-warmup-steps {}: must be >= 0", warmup);
  const bool triad = kernel == "triad";
  const int arrays = triad ? 3 : 2;
  PeakMeasurement m;
  m.op = kernel;
  m.precision = "memory";
  m.shape = fmt::format("{} x {:.0f} MiB f32", arrays, elements * 4.0 / (1 << 20));
  m.bytes_per_call = static_cast<double>(arrays) * 4.0 * static_cast<double>(elements);
  m.impl = fmt::format("STREAM {} (OpenMP, {} thread(s))", kernel, omp_get_max_threads());
  // new[] without value-initialisation: the pages are first touched below, by the thread that
  // streams them (a first-touch NUMA placement, as STREAM does).
  std::unique_ptr<float[]> a(new float[elements]), b(new float[elements]),
      c(new float[elements]);
  float* pa = a.get();
  float* pb = b.get();
  float* pc = c.get();
  const int64_t n = elements;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0f;
    pb[i] = 2.0f;
    pc[i] = 0.5f;
  }
  const float s = 3.0f;
  auto run = [&] {
    if (triad) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    } else {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) pc[i] = pa[i];
    }
  };
  for (int i = 0; i < warmup; ++i) run();
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    m.seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The result read back, so that no compiler can drop the loops: copy c = a = 1, triad
  // a = 2 + 3 x 0.5 = 3.5 everywhere.
  const float want = triad ? 3.5f : 1.0f;
  const float got = triad ? pa[n / 2] : pc[n / 2];
  RN50_CHECK(got == want, "bench peak: STREAM {} computed {} instead of {}", kernel, got, want);
  const double med = percentile(m.seconds, 50);
  m.gbps = med > 0 ? m.bytes_per_call / med / 1e9 : 0.0;
  return m;
}

}  // namespace rn50
