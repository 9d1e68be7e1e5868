#include "model/sparsity.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace rn50 {

namespace {

/// Indices 0..n-1 ordered by ascending value, ties by ascending index (numpy's argsort on these
/// short rows: Paddle's masklib order).
template <size_t N>
std::array<int, N> argsort(const std::array<float, N>& v) {
  std::array<int, N> idx;
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] < v[b]; });
  return idx;
}

/// The 90 4x4 0/1 patterns with exactly two ones per row and per column, in lexicographic order
/// of their rows (each row one of the 6 two-of-four choices, in increasing bit order).
const std::vector<std::array<uint8_t, 16>>& best_patterns() {
  static const std::vector<std::array<uint8_t, 16>> all = [] {
    std::vector<std::array<uint8_t, 4>> rows;
    for (int a = 0; a < 4; ++a)
      for (int b = a + 1; b < 4; ++b) {
        std::array<uint8_t, 4> r{};
        r[a] = r[b] = 1;
        rows.push_back(r);
      }
    std::vector<std::array<uint8_t, 16>> out;
    for (const auto& r0 : rows)
      for (const auto& r1 : rows)
        for (const auto& r2 : rows)
          for (const auto& r3 : rows) {
            bool ok = true;
            for (int c = 0; c < 4; ++c) ok = ok && r0[c] + r1[c] + r2[c] + r3[c] == 2;
            if (!ok) continue;
            std::array<uint8_t, 16> p{};
            for (int c = 0; c < 4; ++c) {
              p[c] = r0[c];
              p[4 + c] = r1[c];
              p[8 + c] = r2[c];
              p[12 + c] = r3[c];
            }
            out.push_back(p);
          }
    return out;
  }();
  return all;
}

}  // namespace

MaskAlgo mask_algo_from_name(const std::string& name, const std::string& flag) {
  if (name == "mask_1d") return MaskAlgo::mask_1d;
  if (name == "mask_2d_greedy") return MaskAlgo::mask_2d_greedy;
  if (name == "mask_2d_best") return MaskAlgo::mask_2d_best;
  RN50_FAIL("{} '{}': expected mask_1d, mask_2d_greedy or mask_2d_best", flag, name);
}

const char* mask_algo_name(MaskAlgo a) {
  switch (a) {
    case MaskAlgo::mask_1d:
      return "mask_1d";
    case MaskAlgo::mask_2d_greedy:
      return "mask_2d_greedy";
    case MaskAlgo::mask_2d_best:
      return "mask_2d_best";
  }
  return "?";
}

std::vector<uint8_t> mask_2to4(const float* w, int64_t rows, int64_t cols, MaskAlgo algo) {
  RN50_CHECK(rows >= 1 && cols >= 4 && cols % 4 == 0,
             "2:4 mask: a {} x {} matrix needs a multiple of 4 columns (input channels)", rows,
             cols);
  std::vector<uint8_t> m(static_cast<size_t>(rows * cols), 0);
  if (algo == MaskAlgo::mask_1d) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < cols; g += 4) {
        std::array<float, 4> a;
        for (int j = 0; j < 4; ++j) a[j] = std::fabs(w[r * cols + g + j]);
        const std::array<int, 4> order = argsort(a);
        m[r * cols + g + order[2]] = m[r * cols + g + order[3]] = 1;  // the two largest
      }
    return m;
  }
  RN50_CHECK(rows % 4 == 0,
             "2:4 mask {}: a {} x {} matrix needs a multiple of 4 rows (output channels)",
             mask_algo_name(algo), rows, cols);
  for (int64_t r0 = 0; r0 < rows; r0 += 4)
    for (int64_t c0 = 0; c0 < cols; c0 += 4) {
      std::array<float, 16> a;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) a[4 * i + j] = std::fabs(w[(r0 + i) * cols + c0 + j]);
      std::array<uint8_t, 16> keep{};
      if (algo == MaskAlgo::mask_2d_greedy) {
        const std::array<int, 16> order = argsort(a);
        std::array<int, 4> in_row{}, in_col{};
        for (int k = 15; k >= 0; --k) {  // descending |w|
          const int i = order[k] / 4, j = order[k] % 4;
          if (in_row[i] == 2 || in_col[j] == 2) continue;
          keep[order[k]] = 1;
          ++in_row[i];
          ++in_col[j];
        }
      } else {
        double best = -1;
        for (const auto& p : best_patterns()) {
          double s = 0;
          for (int k = 0; k < 16; ++k) s += p[k] ? a[k] : 0.f;
          if (s > best) {
            best = s;
            keep = p;
          }
        }
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) m[(r0 + i) * cols + c0 + j] = keep[4 * i + j];
    }
  return m;
}

Tensor weight_mask(const Tensor& w, MaskAlgo algo, const std::string& name) {
  RN50_CHECK(w.is_cpu() && w.dtype() == DType::f32 && (w.ndim() == 4 || w.ndim() == 2),
             "2:4 mask of '{}': expected a host f32 conv [K,C,R,S] or fc [out,in] weight, got {}",
             name, w.str());
  if (w.ndim() == 2) {
    const int64_t rows = w.dim(0), cols = w.dim(1);
    RN50_CHECK(cols % 4 == 0, "2:4 mask of '{}': {} input features are not a multiple of 4", name,
               cols);
    std::vector<uint8_t> m = mask_2to4(w.data_as<const float>(), rows, cols, algo);
    Tensor out = Tensor::empty({rows, cols}, DType::u8);
    std::copy(m.begin(), m.end(), out.data_as<uint8_t>());
    return out;
  }
  const int64_t K = w.n(), C = w.c(), R = w.h(), S = w.w();
  RN50_CHECK(C % 4 == 0, "2:4 mask of '{}': {} input channels are not a multiple of 4", name, C);
  // apex's view: row (r, s, k), column c.
  std::vector<float> v(static_cast<size_t>(R * S * K * C));
  const float* src = w.data_as<const float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c)
          v[((r * S + s) * K + k) * C + c] = src[w.offset4(k, c, r, s)];
  const std::vector<uint8_t> m = mask_2to4(v.data(), R * S * K, C, algo);
  Tensor out = Tensor::empty(w.shape(), DType::u8, w.layout());
  uint8_t* dst = out.data_as<uint8_t>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c)
          dst[out.offset4(k, c, r, s)] = m[((r * S + s) * K + k) * C + c];
  return out;
}

bool asp_prunes(const ParamInfo& p) {
  return p.kind == ParamKind::conv_weight && p.name != "conv1.weight";
}

}  // namespace rn50
