// Worker for tests/test_parallel_train.cpp, run under `mpirun -np W`: checks that one
// data-parallel training step (TrainStep + GradBucketer over the MPI communicator) produces, on
// every rank, the gradient a single process computes for the global batch.
//
// Definition of "the single-process gradient on the concatenated batch": BatchNorm statistics
// stay per rank (DLE, torch DDP without SyncBatchNorm), so the single-process reference runs
// each rank's slice of the global batch through its own forward/backward (batch statistics of
// that slice) and averages the W gradients -- exactly what W ranks with per-rank BN compute.
// (Without BN the two definitions coincide.)
//
// Usage: rn50_parallel_train_worker BUCKET_MB [BACKEND]   (BACKEND: onednn (default) or ref)
// Prints "rank R: OK ..." or "rank R: FAIL ..." and exits 0 / 1 (rank 0 does the comparison).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "step_test_util.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/parallel.h"
#include "rn50/model.h"
#include "model/input_stage.h"
#include "train/train_step.h"

using namespace rn50;

namespace {

constexpr int kPerRank = 2, kHw = 32, kClasses = 7;
/// Slice `r` of the global batch: deterministic pixels and labels from (r).
Batch slice_batch(int r) { return random_batch(kPerRank, kHw, kClasses, 1000 + static_cast<uint64_t>(r)); }

std::vector<float> host_copy(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::f32);
  be.copy(t, h);
  be.synchronize();
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
}

ModelOptions options() {
  ModelOptions mo;
  mo.num_classes = kClasses;
  return mo;
}

}  // namespace

int main(int argc, char** argv) {
  const double bucket_mb = argc > 1 ? std::stod(argv[1]) : 1.0;
  const std::string backend_name = argc > 2 ? argv[2] : "onednn";
  int rank = -1;
  try {
    auto be = make_backend(backend_name);
    auto comm = make_communicator("mpi", *be);
    rank = comm->rank();
    const int world = comm->world_size();

    // The data-parallel step on this rank's slice (lr 0: the parameters stay put).
    ResNet m(*be, kNet, options());
    m.init(42);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int i : m.grad_ready_order()) ranges.emplace_back(m.params()[i].offset, m.params()[i].numel());
    GradBucketer bucketer(*comm, *be, m.grad_slab(), ranges,
                          static_cast<size_t>(bucket_mb * 1024 * 1024));
    InputStage in(*be, Layout::NHWC, DType::f32, kClasses, 1);
    StepOptions so;
    so.bucketer = &bucketer;
    so.loss_grad_scale = 1.f / static_cast<float>(world);
    SgdOptimizer opt(*be, m, {});
    TrainStep step(*be, m, in, opt, so);
    const int s = in.upload(slice_batch(rank));
    step.run(s, 0.0);
    in.release(s);
    const std::vector<float> dp = host_copy(*be, m.grad_slab());

    // Every rank must hold the same averaged gradient: compare with rank 0's.
    std::vector<double> spread(1, 0.0);
    {
      std::vector<double> sum(dp.begin(), dp.end());
      comm->allreduce_sum_host(sum);
      for (size_t i = 0; i < dp.size(); ++i)
        spread[0] = std::max(spread[0], std::fabs(sum[i] / world - dp[i]));
    }

    int fail = 0;
    if (rank == 0) {
      // Single-process reference: each slice through its own forward/backward, averaged.
      auto rbe = make_backend(backend_name);
      std::vector<double> ref(dp.size(), 0.0);
      for (int r = 0; r < world; ++r) {
        ResNet mr(*rbe, kNet, options());
        mr.init(42);
        InputStage rin(*rbe, Layout::NHWC, DType::f32, kClasses, 1);
        const Batch b = slice_batch(r);
        rin.load(b);
        const Tensor& z = mr.forward(rin.x(), true);
        Tensor loss = rbe->alloc({1}, DType::f32), probs = rbe->alloc(z.shape(), DType::f32);
        Tensor dz = rbe->alloc(z.shape(), DType::f32);
        rbe->softmax_xent_fwd(z, rin.labels(), 0.1f, loss, probs);
        rbe->softmax_xent_bwd(probs, rin.labels(), 0.1f, 1.f, dz, Tensor());
        mr.backward(dz);
        const std::vector<float> g = host_copy(*rbe, mr.grad_slab());
        for (size_t i = 0; i < g.size(); ++i) ref[i] += g[i] / world;
      }
      // Per tensor: relative L2 error <= 1e-5 (fp32; the DP path scales before summing).
      double worst = 0;
      std::string worst_name;
      for (const ParamInfo& p : m.params()) {
        double num = 0, den = 0;
        for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
          num += (dp[i] - ref[i]) * (dp[i] - ref[i]);
          den += ref[i] * ref[i];
        }
        const double rel = std::sqrt(num / std::max(den, 1e-30));
        if (rel > worst) worst = rel, worst_name = p.name;
      }
      fail = !(worst <= 1e-5) || !(spread[0] <= 1e-6);
      std::printf("rank 0: %s world %d, %d buckets, worst per-tensor rel-L2 vs the single-process "
                  "gradient %.3g (%s), max |rank - mean| %.3g\n",
                  fail ? "FAIL" : "OK", world, bucketer.num_buckets(), worst, worst_name.c_str(),
                  spread[0]);
    }
    std::vector<double> f{static_cast<double>(fail)};
    comm->allreduce_sum_host(f);
    std::fflush(stdout);
    return f[0] == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: FAIL %s\n", rank, e.what());
    return 1;
  }
}
