// The panel-packed f32 GEMM of the Winograd products (src/backend/cpu/gemm_f32_panels.cpp)
// against a float64 naive product on random data: every row count the kernel blocks into
// (6-row blocks and remainders of 1 to 5), whole 16-column panels and an 8-column last panel,
// column ranges that start inside a panel or end before its end, a leading dimension larger
// than the row; plus the packing order that panel_offset defines.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm_f32_panels.h"

namespace rn50::onednn {
namespace {

/// B (C x K) row-major, packed into panels as panel_offset says.
std::vector<float> pack(const std::vector<float>& b, int64_t C, int64_t K) {
  std::vector<float> p(b.size(), std::nanf(""));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k)
      p[static_cast<size_t>(panel_offset(c, k, C, K))] = b[static_cast<size_t>(c * K + k)];
  return p;
}

TEST(GemmF32Panels, PanelOffsetIsADenseLayout) {
  // Every element lands once in [0, C K): panels of 16 columns, the last 8 wide.
  const int64_t C = 3, K = 40;
  std::vector<int> seen(static_cast<size_t>(C * K), 0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) ++seen[static_cast<size_t>(panel_offset(c, k, C, K))];
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_EQ(panel_offset(0, 15, C, K), 15);
  EXPECT_EQ(panel_offset(1, 0, C, K), 16);        // row 1 of panel 0
  EXPECT_EQ(panel_offset(0, 16, C, K), 16 * C);   // panel 1
  EXPECT_EQ(panel_offset(2, 33, C, K), 32 * C + 2 * 8 + 1);  // the 8-wide last panel
}

TEST(GemmF32Panels, EqualsTheNaiveProduct) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct Case {
    int64_t rows, C, K, k0, kt, lda, ldo;
  };
  const Case cases[] = {
      {1, 1, 8, 0, 8, 1, 8},        {5, 7, 16, 0, 16, 7, 16},    {6, 33, 24, 0, 24, 40, 24},
      {13, 64, 48, 16, 32, 64, 40}, {16, 256, 128, 0, 64, 256, 64}, {49, 64, 64, 0, 64, 64, 64},
      {2, 9, 40, 8, 16, 9, 16},     {11, 20, 40, 24, 16, 21, 16},  {64, 128, 32, 0, 32, 128, 32},
  };
  for (const Case& cs : cases) {
    const std::string what = "rows " + std::to_string(cs.rows) + " C " + std::to_string(cs.C) +
                             " K " + std::to_string(cs.K) + " cols [" + std::to_string(cs.k0) +
                             ", " + std::to_string(cs.k0 + cs.kt) + ")";
    std::vector<float> a(static_cast<size_t>(cs.rows * cs.lda)), b(static_cast<size_t>(cs.C * cs.K));
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    const std::vector<float> bp = pack(b, cs.C, cs.K);
    const float kSentinel = 12345.f;
    std::vector<float> out(static_cast<size_t>(cs.rows * cs.ldo), kSentinel);
    gemm_f32_panels(cs.rows, cs.C, a.data(), cs.lda, bp.data(), cs.K, cs.k0, cs.kt, out.data(),
                    cs.ldo);
    for (int64_t r = 0; r < cs.rows; ++r) {
      for (int64_t j = 0; j < cs.kt; ++j) {
        double want = 0;
        for (int64_t c = 0; c < cs.C; ++c)
          want += double(a[static_cast<size_t>(r * cs.lda + c)]) *
                  b[static_cast<size_t>(c * cs.K + cs.k0 + j)];
        // f32 sums of C products of numbers in [-1, 1): within C x 2^-23 x sqrt(C)-ish.
        ASSERT_NEAR(out[static_cast<size_t>(r * cs.ldo + j)], want, 1e-6 * cs.C + 1e-6)
            << what << ", row " << r << ", column " << j;
      }
      for (int64_t j = cs.kt; j < cs.ldo; ++j)  // past the columns: untouched
        ASSERT_EQ(out[static_cast<size_t>(r * cs.ldo + j)], kSentinel) << what;
    }
  }
}

}  // namespace
}  // namespace rn50::onednn
