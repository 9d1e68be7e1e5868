// The machine's measured peak (rn50/roofline.h): oneDNN's matmul and 3x3 convolution timed in
// each precision (or skipped saying why), the peak records read back, and which peak a
// benchmark's precision is set against. Figures here are smoke values, never asserted beyond
// being positive: throughput is measured by `rn50 bench peak`, not by tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "rn50/error.h"
#include "rn50/roofline.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

TEST(Peak, Fp32MatmulAndConvAreMeasured) {
  for (const char* op : {"matmul", "conv3x3"}) {
    const PeakMeasurement m = measure_cpu_peak(op, "fp32", 1, 0);
    EXPECT_TRUE(m.skipped.empty()) << m.skipped;
    ASSERT_EQ(m.seconds.size(), 1u);
    EXPECT_GT(m.gflops, 0);
    EXPECT_FALSE(m.impl.empty());
    EXPECT_NE(m.impl.rfind("ref", 0), 0u) << "an optimised implementation: " << m.impl;
  }
  EXPECT_DOUBLE_EQ(measure_cpu_peak("matmul", "fp32", 1, 0).ops_per_call, 2.0 * 2048 * 2048 * 2048);
  EXPECT_DOUBLE_EQ(measure_cpu_peak("conv3x3", "fp32", 1, 0).ops_per_call,
                   2.0 * 32 * 256 * 256 * 9 * 28 * 28);
}

// bf16 and int8 run where oneDNN has kernels for them, else they say why not.
TEST(Peak, Bf16AndInt8MeasuredOrSkippedWithAReason) {
  for (const char* p : {"bf16", "int8"}) {
    const PeakMeasurement m = measure_cpu_peak("matmul", p, 1, 0);
    if (m.skipped.empty()) {
      EXPECT_GT(m.gflops, 0) << p;
    } else {
      EXPECT_TRUE(m.seconds.empty());
      EXPECT_NE(m.skipped.find(onednn_cpu_isa()), std::string::npos) << m.skipped;
    }
  }
}

TEST(Peak, BadArgumentsAreRefused) {
  EXPECT_THROW(measure_cpu_peak("gemv", "fp32", 1, 0), Error);
  EXPECT_THROW(measure_cpu_peak("matmul", "fp16", 1, 0), Error);
  EXPECT_THROW(measure_cpu_peak("matmul", "fp32", 0, 0), Error);
}

// STREAM's copy and triad: the bytes counted as STREAM counts them (each array once per call).
TEST(Peak, MemoryBandwidthIsMeasured) {
  const int64_t n = int64_t{1} << 18;
  for (const char* k : {"copy", "triad"}) {
    const PeakMeasurement m = measure_cpu_bandwidth(k, n, 2, 1);
    EXPECT_EQ(m.op, k);
    EXPECT_EQ(m.precision, "memory");
    ASSERT_EQ(m.seconds.size(), 2u);
    EXPECT_GT(m.gbps, 0);
    EXPECT_DOUBLE_EQ(m.gflops, 0);
    EXPECT_DOUBLE_EQ(m.bytes_per_call, (std::string(k) == "copy" ? 2.0 : 3.0) * 4.0 * n);
  }
  EXPECT_THROW(measure_cpu_bandwidth("scale", n, 1, 0), Error);
  EXPECT_THROW(measure_cpu_bandwidth("copy", 0, 1, 0), Error);
  EXPECT_THROW(measure_cpu_bandwidth("copy", n, 0, 0), Error);
}

// The roofline time: the larger of the compute and the memory time, -1 without a limit.
TEST(Roof, SecondsAreTheLargerOfComputeAndMemoryTime) {
  Roof r;
  r.gflops["fp32"] = 200;
  r.gbps = 20;
  EXPECT_DOUBLE_EQ(r.seconds(2e9, 1e6, "fp32"), 0.01);   // compute-bound
  EXPECT_DOUBLE_EQ(r.seconds(2e6, 4e8, "fp32"), 0.02);   // memory-bound
  EXPECT_DOUBLE_EQ(r.seconds(0, 0, "fp32"), 0);
  EXPECT_DOUBLE_EQ(r.seconds(0, 2e8, "int8"), 0.01) << "no FLOPs: no peak needed";
  EXPECT_EQ(r.seconds(1, 0, "bf16"), -1) << "FLOPs without a peak of their precision";
  Roof no_bw;
  no_bw.gflops["fp32"] = 200;
  EXPECT_EQ(no_bw.seconds(2e9, 1, "fp32"), -1) << "bytes without a bandwidth";
  EXPECT_TRUE(Roof{}.empty());
}

TEST(PeakTable, ReadsPeakRecordsAndPicksTheBestOp) {
  const fs::path f = fs::temp_directory_path() / ("rn50_peak_" + std::to_string(::getpid()));
  {
    std::ofstream o(f);
    o << R"({"type":"config","schema_version":2})" << "\n\n"
      << R"({"type":"peak","op":"matmul","precision":"fp32","device":"cpu","hardware":"X","gflops":100})"
      << "\n"
      << R"({"type":"peak","op":"conv3x3","precision":"fp32","device":"cpu","hardware":"X","gflops":120.5})"
      << "\n"
      << R"({"type":"peak","op":"matmul","precision":"bf16","device":"cpu","hardware":"X","skipped":"no"})"
      << "\n"
      << R"({"type":"peak","op":"copy","precision":"memory","device":"cpu","hardware":"X","gbps":17.5})"
      << "\n"
      << R"({"type":"peak","op":"triad","precision":"memory","device":"cpu","hardware":"X","gbps":21.5})"
      << "\n";
  }
  const PeakTable t = PeakTable::load(f.string());
  EXPECT_EQ(t.records().size(), 4u) << "the skipped one is no peak";
  ASSERT_NE(t.best_bandwidth(), nullptr);
  EXPECT_DOUBLE_EQ(t.best_bandwidth()->gbps, 21.5);
  EXPECT_EQ(t.best_bandwidth()->op, "triad");
  EXPECT_EQ(t.best("memory"), nullptr) << "bandwidth is no compute peak";
  EXPECT_EQ(t.best_bandwidth("cuda:0"), nullptr);
  const Roof roof = Roof::from(t);
  EXPECT_DOUBLE_EQ(roof.gflops.at("fp32"), 120.5);
  EXPECT_EQ(roof.gflops.count("bf16"), 0u);
  EXPECT_DOUBLE_EQ(roof.gbps, 21.5);
  EXPECT_TRUE(Roof::from(t, "cuda:0").empty());
  ASSERT_NE(t.best("fp32"), nullptr);
  EXPECT_DOUBLE_EQ(t.best("fp32")->gflops, 120.5);
  EXPECT_EQ(t.best("fp32")->op, "conv3x3");
  EXPECT_EQ(t.best("bf16"), nullptr);
  EXPECT_EQ(t.best("fp32", "cuda:0"), nullptr) << "CPU peaks are not a GPU's";
  {
    std::ofstream o(f);
    o << R"({"type":"benchmark"})" << "\n";
  }
  try {
    PeakTable::load(f.string());
    ADD_FAILURE() << "a file without peaks must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rn50 bench peak"), std::string::npos) << e.what();
  }
  {
    std::ofstream o(f);
    o << "not json\n";
  }
  EXPECT_THROW(PeakTable::load(f.string()), Error);
  fs::remove(f);
  EXPECT_THROW(PeakTable::load(f.string()), Error) << "missing file";
}

TEST(PeakTable, PrecisionOfAResult) {
  EXPECT_EQ(peak_precision("fp32"), "fp32");
  EXPECT_EQ(peak_precision("amp_bf16"), "bf16");
  EXPECT_EQ(peak_precision("amp_fp16"), "fp16");
  EXPECT_EQ(peak_precision("pure_fp16"), "fp16");
  EXPECT_EQ(peak_precision("int8"), "int8");
  EXPECT_EQ(peak_precision("bf16"), "bf16");
}

}  // namespace
}  // namespace rn50
