// rn50 CUDA backend: mixup of a batch with itself in reversed order (DLE --mixup; Zhang et al.
// 2018), in place (see rn50/backend.h and the reference src/backend/ref/mixup.cpp):
//   x[n] = lam * x[n] + (1 - lam) * x[N-1-n],  lam = state[StepState::mixup_lambda]
// read on the device, so a recorded training step replays with each step's lam. x: (N,C,H,W)
// f32/f16/bf16 in NCHW or NHWC (either way a sample is one contiguous block of C*H*W elements).
// One thread per element of the first N/2 samples updates the pair (n, N-1-n): each element is
// read and written once, no copy. Sums in f32, rounded once.
#include "backend/cuda/kernels_common.cuh"

namespace rn50::cuda {

namespace {

using namespace kern;

template <class T>
__global__ void __launch_bounds__(kThreads)
    mixup_kernel(T* __restrict__ x, int64_t N, int64_t per, const float* __restrict__ state) {
  const float lam = state[StepState::mixup_lambda];
  const float mu = 1.f - lam;
  const int64_t total = (N / 2) * per;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t n = i / per, j = i - n * per;
    T* a = x + n * per + j;
    T* b = x + (N - 1 - n) * per + j;
    const float va = to_float(*a), vb = to_float(*b);
    *a = from_float<T>(lam * va + mu * vb);
    *b = from_float<T>(lam * vb + mu * va);
  }
}

}  // namespace

void CudaBackend::mixup_images(Tensor& x, const Tensor& state) {
  const char* op = "mixup_images";
  check_float4(*this, op, "x", x);
  check_state(*this, op, state);
  const int64_t N = x.n(), per = x.c() * x.h() * x.w();
  const int64_t total = (N / 2) * per;
  if (total == 0) return;
  dispatch_float(x.dtype(), op, x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mixup_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream()>>>(
        x.data_as<T>(), N, per, state.data_as<const float>());
    RN50_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace rn50::cuda
