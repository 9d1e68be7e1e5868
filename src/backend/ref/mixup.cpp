// rn50 reference backend: mixup of a batch with itself in reversed order (DLE --mixup; Zhang et
// al. 2018), in float64 on the logical (N,C,H,W) values:
//   x[n] = lam * x[n] + (1 - lam) * x[N-1-n],  lam = state[StepState::mixup_lambda].
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"
#include "core/step_state.h"

namespace rn50::ref {

void RefBackend::mixup_images(Tensor& x, const Tensor& state) {
  const char* op = "mixup_images";
  check_float4(op, "x", x);
  const double lam = host_mixup_lambda("ref mixup_images", state);
  const int64_t N = x.n(), per = x.c() * x.h() * x.w();
  const std::vector<double> v = load(x);
  std::vector<double> out(v.size());
  for (int64_t n = 0; n < N; ++n) {
    const double* a = &v[n * per];
    const double* b = &v[(N - 1 - n) * per];
    double* o = &out[n * per];
    for (int64_t i = 0; i < per; ++i) o[i] = lam * a[i] + (1.0 - lam) * b[i];
  }
  store(out, x);
}

}  // namespace rn50::ref
