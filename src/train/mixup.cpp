#include "train/mixup.h"

#include <cmath>

#include "core/check.h"
#include "data/rng.h"

namespace rn50 {

namespace {

/// Uniform in (0, 1): never 0, so logs and powers stay finite.
double open_uniform(data::SampleRng& r) {
  double u;
  do u = r.uniform();
  while (u <= 0.0);
  return u;
}

double normal(data::SampleRng& r) {  // Box-Muller, one of the pair
  const double u1 = open_uniform(r), u2 = r.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

/// log of a Gamma(a, 1) variate (log space keeps a < 1 draws, which can underflow, exact).
double log_gamma_variate(double a, data::SampleRng& r) {
  double boost = 0;  // log U^(1/a) for a < 1
  if (a < 1.0) {
    boost = std::log(open_uniform(r)) / a;
    a += 1.0;
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal(r);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = open_uniform(r);
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v)))
      return std::log(d * v) + boost;
  }
}

}  // namespace

double sample_beta(double a, double b, uint64_t seed, uint64_t key1, uint64_t key2) {
  RN50_CHECK(a > 0 && b > 0 && std::isfinite(a) && std::isfinite(b),
             "Beta({}, {}): both parameters must be positive", a, b);
  data::SampleRng r(seed, key1, key2, /*stream=*/0x6d69787570ULL);  // "mixup"
  const double lx = log_gamma_variate(a, r), ly = log_gamma_variate(b, r);
  // x / (x + y) = 1 / (1 + exp(ly - lx)), stable for tiny x and y.
  return 1.0 / (1.0 + std::exp(ly - lx));
}

double mixup_lambda(double alpha, uint64_t seed, int64_t global_step, int rank) {
  return sample_beta(alpha, alpha, seed, static_cast<uint64_t>(global_step),
                     static_cast<uint64_t>(rank));
}

}  // namespace rn50
