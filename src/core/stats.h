// rn50: order statistics of benchmark samples (step times, latencies, repeated throughputs).
#pragma once

#include <vector>

namespace rn50 {

/// The q-th percentile (0-100) of `v`, linear interpolation between closest ranks
/// (numpy.percentile's default, which DLE's benchmark scripts use). Throws rn50::Error when v
/// is empty.
double percentile(std::vector<double> v, double q);

/// Median, minimum, maximum and mean of a set of samples (e.g. images/s of each repeat of a
/// benchmark point; the median is the 50th percentile as above: the mean of the two middle
/// values for an even count).
struct SampleSummary {
  double median = 0, min = 0, max = 0, mean = 0;
  /// (max - min) / median: the spread the DLPerf tables quote beside a median (0 for one sample).
  double spread() const { return median != 0 ? (max - min) / median : 0.0; }
};

/// Throws rn50::Error when v is empty.
SampleSummary summarize(const std::vector<double>& v);

}  // namespace rn50
