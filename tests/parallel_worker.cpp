// rn50_parallel_worker: the program the multi-rank tests (tests/test_parallel_mpi.cpp) start under
// mpirun. Usage: rn50_parallel_worker <scenario> [communicator kind, default mpi] [backend, default
// ref] (tensors live on the backend's device: "nccl cuda" checks the NCCL path on a GPU)
//   collectives  random f32 allreduces (several sizes, several in flight), exact host sums,
//                broadcasts, barrier and argument errors, checked against sums that every rank
//                recomputes from the other ranks' seeds
//   bucketer     GradBucketer with several bucket sizes and ready orders == a plain allreduce
//   abort        the last rank aborts while the others block in an allreduce
//   watchdog     rank 0 (watchdog 1 s) heartbeats for a while, then blocks in an allreduce that
//                the last rank (hung, no heartbeat) never joins
// Every rank prints one "rank R/W: <scenario> OK" line on success; a failed check aborts the
// job through Communicator::abort, so the test sees a non-zero exit and the message.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "rn50/backend.h"
#include "rn50/parallel.h"

using namespace rn50;

namespace {

Communicator* g_comm = nullptr;

template <class... A>
void require(bool ok, fmt::format_string<A...> f, A&&... a) {
  if (!ok) g_comm->abort("FAIL " + fmt::format(f, std::forward<A>(a)...));
}

/// The data rank `rank` contributes to reduction `which`: n uniform values in [-1, 1].
std::vector<float> rank_data(int rank, int which, int64_t n) {
  std::mt19937 gen(static_cast<unsigned>(1000003 * which + 7919 * rank + 17));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(gen);
  return v;
}

Tensor host_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::f32);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

/// `v` in a tensor on the backend's device (host memory for CPU backends).
Tensor dev_tensor(Backend& backend, const std::vector<float>& v) {
  Tensor t = backend.alloc({static_cast<int64_t>(v.size())}, DType::f32);
  backend.copy(host_tensor(v), t);
  return t;
}

/// A host copy of a backend tensor (waits for the work queued on the backend).
std::vector<float> to_host(Backend& backend, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::f32);
  backend.copy(t, h);
  backend.synchronize();
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
}

bool throws(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

void collectives(Communicator& comm, Backend& backend) {
  const int W = comm.world_size(), R = comm.rank();
  const std::vector<int64_t> sizes = {1, 7, 1000, 100003, 0};
  std::vector<Tensor> ts;
  std::vector<std::unique_ptr<PendingReduce>> pending;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ts.push_back(dev_tensor(backend, rank_data(R, static_cast<int>(k), sizes[k])));
    pending.push_back(comm.allreduce_sum_async(ts.back()));  // all in flight together
  }
  for (auto& p : pending) p->poll();
  for (size_t k = sizes.size(); k-- > 0;) pending[k]->wait();  // completed in reverse order
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<double> exact(static_cast<size_t>(sizes[k]), 0.0), mag(exact.size(), 0.0);
    for (int r = 0; r < W; ++r) {
      std::vector<float> d = rank_data(r, static_cast<int>(k), sizes[k]);
      for (size_t i = 0; i < d.size(); ++i) exact[i] += d[i], mag[i] += std::fabs(d[i]);
    }
    const std::vector<float> got = to_host(backend, ts[k]);
    for (size_t i = 0; i < exact.size(); ++i) {
      // fp32 summation of W terms: error <= (W - 1) u sum|x_r|, u = 2^-24.
      double tol = W * 6e-8 * mag[i] + 1e-30;
      require(std::fabs(got[i] - exact[i]) <= tol,
              "allreduce size {} element {}: got {} expected {} (tolerance {})", sizes[k], i,
              got[i], exact[i], tol);
    }
  }
  // The blocking form.
  Tensor t = dev_tensor(backend, rank_data(R, 99, 513));
  comm.allreduce_sum(t);
  const std::vector<float> got = to_host(backend, t);
  std::vector<double> e(513, 0.0), m(513, 0.0);
  for (int r = 0; r < W; ++r) {
    std::vector<float> d = rank_data(r, 99, 513);
    for (size_t i = 0; i < d.size(); ++i) e[i] += d[i], m[i] += std::fabs(d[i]);
  }
  for (size_t i = 0; i < e.size(); ++i)
    require(std::fabs(got[i] - e[i]) <= W * 6e-8 * m[i] + 1e-30,
            "allreduce_sum element {}: {} != {}", i, got[i], e[i]);

  // Host doubles: exact (integers and halves far below 2^53).
  std::vector<double> h = {double(R + 1), 1e15 * (R + 1), -double(R), 0.5 * R, 3.0};
  comm.allreduce_sum_host(h);
  const double w = W;
  std::vector<double> want = {w * (w + 1) / 2, 1e15 * w * (w + 1) / 2, -w * (w - 1) / 2,
                              0.25 * w * (w - 1), 3.0 * w};
  for (size_t i = 0; i < h.size(); ++i)
    require(h[i] == want[i], "allreduce_sum_host[{}] = {:.17g}, expected {:.17g}", i, h[i],
            want[i]);
  if (W > 1) {
    std::vector<double> uneven(static_cast<size_t>(R + 1), 1.0);
    require(throws([&] { comm.allreduce_sum_host(uneven); }, "different lengths"),
            "allreduce_sum_host with uneven lengths did not throw");
  }

  // Broadcast from the last rank (receivers start with other sizes), then an empty one.
  const int root = W - 1;
  std::vector<uint8_t> bytes(static_cast<size_t>(R * 3));
  if (R == root) {
    bytes.resize(1000 + root);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  }
  comm.broadcast_host(bytes, root);
  require(bytes.size() == size_t(1000 + root), "broadcast size {}", bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i)
    require(bytes[i] == static_cast<uint8_t>(i * 31 + 7), "broadcast byte {}", i);
  std::vector<uint8_t> empty = R == 0 ? std::vector<uint8_t>{} : std::vector<uint8_t>(5, 1);
  comm.broadcast_host(empty, 0);
  require(empty.empty(), "empty broadcast left {} bytes", empty.size());
  require(throws([&] { comm.broadcast_host(bytes, W); }, "root"), "bad root did not throw");
  comm.barrier();

  // Argument errors (local, no communication).
  Tensor labels = backend.alloc({4}, DType::i32);
  require(throws([&] { comm.allreduce_sum_async(labels); }, "not F32"), "i32 allreduce");
}

/// A slab of parameters with a gap, and ranges in two ready orders; the bucketed sums must equal
/// a plain allreduce of the same slab, and the gap must stay untouched.
void bucketer(Communicator& comm, Backend& backend) {
  const int W = comm.world_size(), R = comm.rank();
  const std::vector<int64_t> counts = {1000, 30, 5000, 1, 2048, 777, 64, 3000};
  std::vector<std::pair<int64_t, int64_t>> slab_order;
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    slab_order.push_back({off, counts[i]});
    off += counts[i] + (i == 3 ? 11 : 0);  // a gap after parameter 3
  }
  const int64_t total = off;
  std::vector<std::pair<int64_t, int64_t>> backward(slab_order.rbegin(), slab_order.rend());
  std::vector<std::pair<int64_t, int64_t>> shuffled = {slab_order[2], slab_order[0],
                                                       slab_order[7], slab_order[4],
                                                       slab_order[1], slab_order[6],
                                                       slab_order[3], slab_order[5]};
  const std::vector<size_t> bucket_bytes = {400, 4 * 3000, 4 * 6000, size_t(1) << 30};
  int which = 0;
  for (const auto* order : {&backward, &shuffled}) {
    for (size_t bb : bucket_bytes) {
      Tensor grads = backend.alloc({total}, DType::f32);
      GradBucketer b(comm, backend, grads, *order, bb);
      for (int step = 0; step < 2; ++step, ++which) {
        std::vector<float> data = rank_data(R, 200 + which, total);
        backend.copy(host_tensor(data), grads);
        Tensor plain = dev_tensor(backend, data);
        comm.allreduce_sum(plain);
        for (int i = 0; i < static_cast<int>(order->size()); ++i) b.ready(i);
        b.finish();
        const std::vector<float> g = to_host(backend, grads);
        const std::vector<float> p = to_host(backend, plain);
        for (int64_t i = 0; i < total; ++i) {
          bool in_gap = i >= slab_order[3].first + 1 && i < slab_order[4].first;
          float want = in_gap ? data[i] : p[i];
          // Two ranks: fl(a + b) whatever the chunking, so equality is exact.
          double tol = W <= 2 ? 0.0 : W * 6e-8 * 2.0;
          require(std::fabs(g[i] - want) <= tol,
                  "bucketer bucket_bytes {} ({} buckets) step {} element {}: {} != {}", bb,
                  b.num_buckets(), step, i, g[i], want);
        }
      }
      // 100-float buckets: every parameter alone, except 30 + 64 + 1 in the shuffled order.
      const int small = order == &backward ? 8 : 6;
      if (bb == 400)
        require(b.num_buckets() == small, "400-byte buckets: {} (expected {})", b.num_buckets(),
                small);
      if (bb == (size_t(1) << 30)) require(b.num_buckets() == 1, "1 bucket: {}", b.num_buckets());
      require(b.last_wait_seconds() >= 0, "wait seconds");
    }
  }
  // The buckets are started by finish() when ready() was never called.
  {
    Tensor grads = dev_tensor(backend, rank_data(R, 300, total));
    Tensor plain = dev_tensor(backend, rank_data(R, 300, total));
    comm.allreduce_sum(plain);
    GradBucketer b(comm, backend, grads, backward, 4 * 3000);
    b.finish();
    const std::vector<float> g = to_host(backend, grads), p = to_host(backend, plain);
    for (int64_t i = 0; i < slab_order[3].first + 1; ++i)
      require(g[i] == p[i] || W > 2,
              "finish without ready: element {}", i);
    require(throws([&] { b.ready(1); }, "expected"), "out-of-order ready did not throw");
  }
  Tensor g = backend.alloc({100}, DType::f32);
  require(throws([&] { GradBucketer(comm, backend, g, {{0, 50}, {40, 20}}, 64); }, "overlap"),
          "overlapping ranges");
  require(throws([&] { GradBucketer(comm, backend, g, {{90, 20}}, 64); }, "outside"),
          "range outside the slab");
  require(throws([&] { GradBucketer(comm, backend, g, {{0, 10}}, 0); }, "positive"),
          "zero bucket size");
}

void abort_scenario(Communicator& comm) {
  Tensor t = host_tensor(rank_data(comm.rank(), 1, 1000));
  if (comm.rank() == comm.world_size() - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    comm.abort("deliberate failure for the test");
  }
  comm.allreduce_sum(t);  // never completes: the last rank never joins
  std::printf("rank %d: UNEXPECTED: allreduce returned\n", comm.rank());
}

void watchdog_scenario(Communicator& comm) {
  Tensor t = host_tensor(rank_data(comm.rank(), 1, 16));
  const int hung = comm.world_size() - 1;
  if (comm.rank() == 0) comm.start_watchdog(1.0);
  // 1.6 s of steady progress: heartbeats keep a 1 s watchdog quiet.
  for (int i = 0; i < 8; ++i) {
    comm.heartbeat();
    comm.allreduce_sum(t);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (comm.rank() == hung) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // hangs, no heartbeat, no watchdog
  } else {
    comm.heartbeat();
    comm.allreduce_sum(t);  // blocked until rank 0's watchdog tears the job down
  }
  std::printf("rank %d: UNEXPECTED: not stopped by the watchdog\n", comm.rank());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s collectives|bucketer|abort|watchdog [kind] [backend]\n",
                 argv[0]);
    return 2;
  }
  const std::string scenario = argv[1], kind = argc > 2 ? argv[2] : "mpi";
  const std::string backend_name = argc > 3 ? argv[3] : "ref";
  try {
    BackendOptions opt;
    opt.device_index = ProcessInfo::from_environment().local_rank;  // one GPU per local rank
    std::unique_ptr<Backend> backend = make_backend(backend_name, opt);
    std::unique_ptr<Communicator> comm = make_communicator(kind, *backend);
    g_comm = comm.get();
    const ProcessInfo& p = comm->process();
    if (scenario == "collectives") {
      collectives(*comm, *backend);
    } else if (scenario == "bucketer") {
      bucketer(*comm, *backend);
    } else if (scenario == "abort") {
      abort_scenario(*comm);
    } else if (scenario == "watchdog") {
      watchdog_scenario(*comm);
    } else {
      std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
      return 2;
    }
    comm->barrier();
    std::printf("rank %d/%d: %s OK (%s, %s launch, local %d/%d)\n", p.rank, p.world_size,
                scenario.c_str(), comm->name().c_str(), p.launcher.c_str(), p.local_rank,
                p.local_size);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker error: %s\n", e.what());
    if (g_comm != nullptr) g_comm->abort(e.what());
    return 1;
  }
  return 0;
}
