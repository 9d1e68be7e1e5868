// rn50: mixup of a batch with itself in reversed order (DLE --mixup; Zhang et al. 2018), in
// place on the f32 or bf16 input (either layout: a sample is one contiguous block of C*H*W values):
//   x[n] = lam * x[n] + (1 - lam) * x[N-1-n],  lam = state[StepState::mixup_lambda].
// Each pair (n, N-1-n) is read once and written once, so the update needs no copy.
#include "backend/cpu/onednn_backend.h"
#include "core/bf16.h"
#include "core/check.h"
#include "core/step_state.h"

namespace rn50::onednn {

namespace {

template <class T>
void mix_pairs(T* d, int64_t N, int64_t per, float lam) {
  const float mu = 1.f - lam;
  const int64_t pairs = N / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < pairs; ++n)
    for (int64_t i = 0; i < per; ++i) {
      T* a = d + n * per + i;
      T* b = d + (N - 1 - n) * per + i;
      const float va = widen(*a), vb = widen(*b);
      narrow(*a, lam * va + mu * vb);
      narrow(*b, lam * vb + mu * va);
    }
}

}  // namespace

void OnednnBackend::mixup_images(Tensor& x, const Tensor& state) {
  const char* op = "mixup_images";
  const DType dt = compute_dtype_of(op, "x", x);
  RN50_CHECK(x.ndim() == 4, "onednn {}: x must be (N,C,H,W), got {}", op, x.str());
  const float lam = host_mixup_lambda("onednn mixup_images", state);
  const int64_t N = x.n(), per = x.c() * x.h() * x.w();
  if (dt == DType::f32)
    mix_pairs(x.data_as<float>(), N, per, lam);
  else
    mix_pairs(x.data_as<uint16_t>(), N, per, lam);
}

}  // namespace rn50::onednn
