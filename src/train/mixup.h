// rn50: the host side of mixup (Zhang et al. 2018, "mixup: Beyond Empirical Risk Minimization";
// DLE PyTorch --mixup, used by its 250-epoch configuration with alpha 0.2): the per-step weight
// lam ~ Beta(alpha, alpha). The mixing itself runs on the device (Backend::mixup_images and
// softmax_xent_mixup_*, after normalisation): each sample n is mixed with sample N-1-n of the
// same per-process batch, images and (label-smoothed) targets alike.
#pragma once

#include <cstdint>

namespace rn50 {

/// A Beta(a, b) variate from uniform draws `u()` in [0, 1): X / (X + Y) with X ~ Gamma(a),
/// Y ~ Gamma(b) by Marsaglia & Tsang's method ("A Simple Method for Generating Gamma
/// Variables", ACM TOMS 2000), with the boost Gamma(a) = Gamma(a + 1) * U^(1/a) for a < 1 and
/// Box-Muller normals. a, b > 0 (throws rn50::Error otherwise). Result in [0, 1].
double sample_beta(double a, double b, uint64_t seed, uint64_t key1, uint64_t key2);

/// The mixup weight of one step: Beta(alpha, alpha) drawn from a generator keyed by (seed,
/// global step, rank), so a run, and a run resumed from a checkpoint, draws the same sequence on
/// every machine and each rank of a data-parallel run mixes its own batch with its own weight
/// (DLE seeds numpy per rank). alpha > 0.
double mixup_lambda(double alpha, uint64_t seed, int64_t global_step, int rank);

}  // namespace rn50
