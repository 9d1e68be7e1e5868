#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace rn50 {

double percentile(std::vector<double> v, double q) {
  RN50_CHECK(!v.empty(), "percentile of no samples");
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

SampleSummary summarize(const std::vector<double>& v) {
  RN50_CHECK(!v.empty(), "summary of no samples");
  SampleSummary s;
  s.median = percentile(v, 50);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

}  // namespace rn50
