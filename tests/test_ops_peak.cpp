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
      << "\n";
  }
  const PeakTable t = PeakTable::load(f.string());
  EXPECT_EQ(t.records().size(), 2u) << "the skipped one is no peak";
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
