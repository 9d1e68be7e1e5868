// Host-logic tests of the GPU training step that run without a GPU: the backend calls a
// training step makes, recorded by tests/recording_backend.h around the onednn backend, whose
// capture() emulates a CUDA graph on the CPU (calls recorded as closures over the same tensor
// handles, not run, then re-issued by each replay). What a GPU run relies on:
//  * TrainStep with graphs (fp32, the small bottleneck net): after its warmup (one eager step
//    per input slot, then one capture per slot) every step is exactly: the batch's two
//    host-to-device uploads (images and labels, upload_input), one graph replay issuing every
//    compute op of the step (none outside it), the first of them load_step_inputs (the lr from
//    the step-input ring in host memory into the device step state), and the two
//    release_input marks; no copy, no allocation, no synchronisation. The replayed calls are
//    the eager step's, and N replayed steps with a different lr each give bit for bit the
//    parameters and momentum of the same N steps run eagerly: the recorded graph reads the lr
//    of its own step from the ring.
//  * The recorder itself: a capture runs nothing; a replay reads memory at replay time; an
//    allocation, synchronisation or host copy inside a capture is a violation and throws.
//  * The train loop (train/train_loop.cpp, `rn50 train`) and the benchmark loop
//    (train/train_benchmark.cpp), through a real Session on synthetic data with the recorder
//    installed by the session's test seam (set_session_backend_wrapper): the host synchronises
//    only at --print-interval boundaries (and at the end of an epoch / of the warmup), twice
//    there (the loop's wait, then read_losses'), and the steps between are replays plus the
//    loop's own asynchronous work (top-k hits, the loss into its slot).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "model/input_stage.h"
#include "recording_backend.h"
#include "rn50/backend.h"
#include "rn50/config.h"
#include "rn50/model.h"
#include "rn50/train.h"
#include "step_test_util.h"
#include "train/optimizer.h"
#include "train/session.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

using test::Call;
using test::CallKind;
using test::CallLog;
using test::CopyDir;
using test::Phase;
using test::RecordingBackend;

constexpr int kBatch = 4, kHw = 32, kClasses = 10, kSteps = 8;

/// Each step's learning rate: different every step, so that a graph that baked in the lr of
/// the step it was recorded in would train differently.
double lr_of(int i) { return 0.05 + 0.01 * i; }

/// The bytes of a host copy of backend tensor t.
std::vector<uint8_t> host_bytes(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), t.layout());
  be.copy(t, h);
  be.synchronize();
  const auto* p = h.data_as<const uint8_t>();
  return std::vector<uint8_t>(p, p + h.nbytes());
}

struct StepsResult {
  std::vector<uint8_t> params, momentum, loss;
  std::vector<std::pair<size_t, size_t>> steps;  ///< each step's calls in the log: [begin, end)
  int64_t replayed = 0;
};

/// kSteps training steps of the small net (fp32, its default layout, two input slots as the
/// trainer uses) on `be`; `log` (when given) marks where each step's calls are.
StepsResult run_steps(Backend& be, bool graphs, CallLog* log) {
  ModelOptions mo;
  mo.num_classes = kClasses;
  ResNet m(be, kNet, mo);
  m.init(11);
  InputStage in(be, m.options().layout, DType::f32, kClasses, 2);
  StepOptions so;
  so.use_graphs = graphs;
  SgdOptimizer opt(be, m, {});
  TrainStep step(be, m, in, opt, so);
  StepsResult r;
  for (int i = 0; i < kSteps; ++i) {
    const Batch b = random_batch(kBatch, kHw, kClasses, 100 + i);
    const size_t begin = log ? log->size() : 0;
    const int s = in.upload(b);
    step.run(s, lr_of(i));
    in.release(s);
    r.steps.emplace_back(begin, log ? log->size() : 0);
  }
  r.replayed = step.replayed_steps();
  r.params = host_bytes(be, m.param_slab());
  r.momentum = host_bytes(be, opt.momentum());
  r.loss = host_bytes(be, step.loss());
  return r;
}

int count(const std::vector<Call>& cs, CallKind k, Phase ph) {
  return static_cast<int>(
      std::count_if(cs.begin(), cs.end(), [&](const Call& c) { return c.kind == k && c.phase == ph; }));
}

/// The device work of a step in issue order: ops, zeros and backend-to-backend copies.
std::vector<std::string> device_work(const std::vector<Call>& cs, Phase ph) {
  std::vector<std::string> v;
  for (const Call& c : cs)
    if (c.phase == ph && (c.kind == CallKind::op || c.kind == CallKind::zero ||
                          (c.kind == CallKind::copy && c.dir == CopyDir::d2d)))
      v.push_back(c.name);
  return v;
}

std::string dump(const std::vector<Call>& cs) {
  std::string s;
  for (const Call& c : cs)
    if (c.kind != CallKind::op || c.phase != Phase::replay) s += "\n  " + c.str();
  return s;
}

TEST(TrainStepHostCalls, SteadyStateIsUploadsAndOneReplay) {
  RecordingBackend rec(make_backend("onednn"));
  const StepsResult r = run_steps(rec, /*graphs=*/true, &rec.log());
  EXPECT_TRUE(rec.log().violations().empty()) << rec.log().violations().front();
  // Steps 0 and 1 run eagerly (one per input slot), 2 and 3 record their slot's graph and
  // replay it, the rest only replay.
  EXPECT_EQ(rec.graphs(), 2);
  EXPECT_EQ(r.replayed, kSteps - 2);

  const std::vector<Call> eager = rec.log().calls(r.steps[1].first, r.steps[1].second);
  const std::vector<std::string> eager_work = device_work(eager, Phase::eager);
  ASSERT_GT(eager_work.size(), 20u);  // the whole step: forward, loss, backward, SGD
  EXPECT_EQ(eager_work.front().rfind("load_step_inputs", 0), 0u) << eager_work.front();
  EXPECT_EQ(count(eager, CallKind::synchronize, Phase::eager), 0) << dump(eager);

  for (int i = 4; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const std::vector<Call> cs = rec.log().calls(r.steps[i].first, r.steps[i].second);
    EXPECT_EQ(count(cs, CallKind::alloc, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::alloc_host, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::synchronize, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::capture, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::forget_input, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::replay, Phase::eager), 1) << dump(cs);
    // Host-to-device traffic: the batch through upload_input (images u8, labels i32) ...
    std::multiset<size_t> uploads;
    for (const Call& c : cs)
      if (c.kind == CallKind::upload_input) uploads.insert(c.bytes);
    EXPECT_EQ(uploads, (std::multiset<size_t>{size_t{kBatch} * 3 * kHw * kHw,
                                              size_t{kBatch} * sizeof(int32_t)}))
        << dump(cs);
    // ... and no copy at all: the lr reaches the device through the ring, read in the graph.
    EXPECT_EQ(count(cs, CallKind::copy, Phase::eager), 0) << dump(cs);
    // Every compute op comes from the replay; none is issued eagerly.
    EXPECT_EQ(count(cs, CallKind::op, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::zero, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::release_input, Phase::eager), 2) << dump(cs);
    // The replay re-issues the eager step's device work, call for call.
    EXPECT_EQ(device_work(cs, Phase::replay), eager_work);
  }

  // The same steps without graphs: the same bits (the CPU backend is deterministic and the
  // replay issues the same calls, each reading the lr of its own step from the step state).
  auto plain = make_backend("onednn");
  const StepsResult e = run_steps(*plain, /*graphs=*/false, nullptr);
  EXPECT_EQ(e.replayed, 0);
  EXPECT_TRUE(r.params == e.params) << "parameters differ after replayed vs eager steps";
  EXPECT_TRUE(r.momentum == e.momentum) << "momentum differs after replayed vs eager steps";
  EXPECT_TRUE(r.loss == e.loss) << "the last loss differs";
}

// The lr is data, not a recorded constant, checked without an eager twin: with momentum and
// weight decay 0, a replay at lr 0 leaves the parameters exactly as they were (a graph that
// baked in the lr of its recording step, 1e-3, would move them), and a replay at 2e-3 moves them.
TEST(TrainStepHostCalls, ReplayReadsTheLrFromTheStepState) {
  RecordingBackend rec(make_backend("onednn"));
  ModelOptions mo;
  mo.num_classes = kClasses;
  ResNet m(rec, kNet, mo);
  m.init(5);
  InputStage in(rec, m.options().layout, DType::f32, kClasses, 1);
  SgdOptimizer::Options oo;
  oo.momentum = 0.f;
  oo.weight_decay = 0.f;
  SgdOptimizer opt(rec, m, oo);
  TrainStep step(rec, m, in, opt, StepOptions{});
  const Batch b = random_batch(kBatch, kHw, kClasses, 7);
  auto run = [&](double lr) {
    const int s = in.upload(b);
    step.run(s, lr);
    in.release(s);
    return host_bytes(rec, m.param_slab());
  };
  run(1e-3);                                   // eager
  const std::vector<uint8_t> p0 = run(1e-3);   // recorded at lr 1e-3, then replayed
  ASSERT_EQ(rec.graphs(), 1);
  const std::vector<uint8_t> p1 = run(0.0);    // replay
  EXPECT_TRUE(p0 == p1) << "a replay at lr 0 changed the parameters: the graph used another lr";
  const std::vector<uint8_t> p2 = run(2e-3);   // replay
  EXPECT_FALSE(p1 == p2) << "a replay at lr 2e-3 left the parameters unchanged";
  EXPECT_EQ(step.replayed_steps(), 3);
  EXPECT_TRUE(rec.log().violations().empty());
}

TEST(RecordingBackendHostCalls, CaptureRecordsWithoutRunningAndReplayReadsMemoryThen) {
  RecordingBackend rec(make_backend("onednn"));
  Tensor a = rec.alloc({4}, DType::f32, Layout::NCHW), b = rec.alloc({4}, DType::f32, Layout::NCHW);
  Tensor y = rec.alloc({4}, DType::f32, Layout::NCHW);
  Tensor h = Tensor::empty({4}, DType::f32);
  auto put = [&](Tensor& dst, float v) {
    h.fill(v);
    rec.copy(h, dst);
  };
  auto get = [&](const Tensor& src) {
    Tensor o = Tensor::empty({4}, DType::f32);
    rec.copy(src, o);
    return o.data_as<float>()[0];
  };
  put(a, 1.f);
  put(b, 2.f);
  put(y, -1.f);
  EXPECT_EQ(rec.log().calls().back().dir, CopyDir::h2d);
  std::unique_ptr<Graph> g = rec.capture([&] { rec.add(a, b, y); });
  ASSERT_TRUE(g);
  EXPECT_EQ(get(y), -1.f) << "the capture ran the op";
  EXPECT_EQ(rec.log().calls().back().dir, CopyDir::d2h);
  g->replay();
  EXPECT_EQ(get(y), 3.f);
  put(a, 10.f);  // a new value in device memory: the next replay reads it
  g->replay();
  EXPECT_EQ(get(y), 12.f);
  EXPECT_TRUE(rec.log().violations().empty());
  // A slice of a backend tensor is backend memory; a host tensor is not.
  EXPECT_TRUE(rec.on_backend(a.slice0(1, 3)));
  EXPECT_FALSE(rec.on_backend(h));
}

TEST(RecordingBackendHostCalls, AllocSyncAndHostCopiesInsideACaptureFail) {
  RecordingBackend rec(make_backend("onednn"));
  Tensor d = rec.alloc({4}, DType::f32, Layout::NCHW);
  Tensor h = Tensor::zeros({4}, DType::f32);
  const std::vector<std::pair<std::string, std::function<void()>>> bad = {
      {"alloc", [&] { rec.alloc({4}, DType::f32, Layout::NCHW); }},
      {"alloc_host", [&] { rec.alloc_host({4}, DType::f32, Layout::NCHW); }},
      {"synchronize", [&] { rec.synchronize(); }},
      {"copy backend->host", [&] { rec.copy(d, h); }},
      {"copy host->backend", [&] { rec.copy(h, d); }},
      {"upload_input", [&] { rec.upload_input(h, d); }},
  };
  for (const auto& [what, fn] : bad) {
    SCOPED_TRACE(what);
    const size_t before = rec.log().violations().size();
    EXPECT_THROW(rec.capture([&] {
      rec.zero(d);  // recordable
      fn();
    }),
                 Error);
    const auto v = rec.log().violations();
    ASSERT_EQ(v.size(), before + 1);
    EXPECT_NE(v.back().find(what), std::string::npos) << v.back();
    // The failed capture left recording mode: the backend works eagerly again.
    Tensor t = rec.alloc({1}, DType::f32, Layout::NCHW);
    rec.synchronize();
  }
}

// ---- the train loop and the benchmark loop, through a real Session ----

/// Installs a recorder around every Session's backend for the lifetime of the object.
struct RecordSessions {
  std::shared_ptr<CallLog> log = std::make_shared<CallLog>();
  RecordSessions() {
    std::shared_ptr<CallLog> l = log;
    set_session_backend_wrapper([l](std::unique_ptr<Backend> b) -> std::unique_ptr<Backend> {
      return std::make_unique<RecordingBackend>(std::move(b), l);
    });
  }
  ~RecordSessions() { set_session_backend_wrapper(nullptr); }
};

/// A synthetic-data run of resnet18 at 32 px, batch 2, on the CPU.
Config tiny_synthetic(int64_t samples, int print_interval) {
  Config c;
  c.data = DataKind::synthetic;
  c.device = "cpu";
  c.arch = "resnet18";
  c.crop_size = 32;
  c.batch_size = 2;
  c.num_classes = kClasses;
  c.synthetic_samples = samples;
  c.print_interval = print_interval;
  c.workers = 1;
  c.warmup_epochs = 0;
  c.save_interval = 0;
  c.run_scope = RunScope::train_only;
  c.epochs = 2;
  return c;
}

/// The main thread's calls of a run cut into steps: a step starts at its image upload (the
/// batch's u8 images, `image_bytes`); calls before the first step (setup) are dropped.
std::vector<std::vector<Call>> main_thread_steps(const CallLog& log, size_t image_bytes) {
  std::vector<std::vector<Call>> steps;
  const std::thread::id me = std::this_thread::get_id();
  for (const Call& c : log.calls()) {
    if (c.thread != me) continue;  // loader threads (alloc_host of the batch pool)
    if (c.kind == CallKind::upload_input && c.bytes == image_bytes) steps.emplace_back();
    if (!steps.empty()) steps.back().push_back(c);
  }
  return steps;
}

TEST(TrainLoopHostCalls, SynchronisesOnlyAtPrintInterval) {
  RecordSessions recording;
  // 2 epochs of 7 steps, --print-interval 3: step lines (and syncs) after steps 3, 6 and 7.
  const Config c = tiny_synthetic(14, 3);
  ASSERT_EQ(run_train(c), 0);
  EXPECT_TRUE(recording.log->violations().empty()) << recording.log->violations().front();
  const auto steps = main_thread_steps(*recording.log, 2 * 3 * 32 * 32);
  ASSERT_EQ(steps.size(), 14u);
  for (size_t k = 0; k < steps.size(); ++k) {
    const int in_epoch = static_cast<int>(k % 7) + 1;
    const bool boundary = in_epoch % 3 == 0 || in_epoch == 7;
    SCOPED_TRACE("epoch " + std::to_string(k / 7) + " step " + std::to_string(in_epoch));
    const std::vector<Call>& cs = steps[k];
    // At a boundary: the loop's wait before the step's time is taken, and read_losses' wait
    // for the interval's losses and hits (two backend-to-host copies). Nowhere else.
    EXPECT_EQ(count(cs, CallKind::synchronize, Phase::eager), boundary ? 2 : 0) << dump(cs);
    int d2h = 0;
    for (const Call& c : cs) d2h += c.kind == CallKind::copy && c.dir == CopyDir::d2h;
    EXPECT_EQ(d2h, boundary ? 2 : 0) << dump(cs);
    if (k < 4) continue;  // eager steps and the recordings of the two input slots
    EXPECT_EQ(count(cs, CallKind::alloc, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::alloc_host, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::capture, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::replay, Phase::eager), 1) << dump(cs);
    // Outside the graph, only the loop's own asynchronous work: the top-1/top-5 hits of the
    // step's logits and its loss copied into the interval's slot.
    EXPECT_EQ(device_work(cs, Phase::eager), (std::vector<std::string>{"topk_hits", "copy"}))
        << dump(cs);
  }
}

TEST(TrainBenchmarkHostCalls, SynchronisesOnlyAtPrintIntervalAndAfterWarmup) {
  RecordSessions recording;
  Config c = tiny_synthetic(0, 3);
  c.benchmark = true;
  c.benchmark_warmup_steps = 2;
  c.benchmark_steps = 6;  // boundaries after steps 2 (warmup), 3, 6 and 8 (1-based)
  const TrainBenchmarkResult r = benchmark_train(c, /*verbose=*/false);
  (void)r;
  EXPECT_TRUE(recording.log->violations().empty()) << recording.log->violations().front();
  const auto steps = main_thread_steps(*recording.log, 2 * 3 * 32 * 32);
  ASSERT_EQ(steps.size(), 8u);
  for (size_t k = 0; k < steps.size(); ++k) {
    const int i = static_cast<int>(k) + 1;
    const bool boundary = i % 3 == 0 || i == 2 || i == 8;
    SCOPED_TRACE("step " + std::to_string(i));
    const std::vector<Call>& cs = steps[k];
    // The loop's wait at the boundary and read_losses(1)'s; the rest of a boundary step (the
    // allreduce report, profiler_range) is the benchmark's own and synchronises nothing here.
    EXPECT_EQ(count(cs, CallKind::synchronize, Phase::eager), boundary ? 2 : 0) << dump(cs);
    if (k < 4) continue;
    EXPECT_EQ(count(cs, CallKind::alloc, Phase::eager), 0) << dump(cs);
    EXPECT_EQ(count(cs, CallKind::replay, Phase::eager), 1) << dump(cs);
    // No metrics in the benchmark: only the loss copy outside the graph.
    EXPECT_EQ(device_work(cs, Phase::eager), (std::vector<std::string>{"copy"})) << dump(cs);
  }
}

}  // namespace
}  // namespace rn50
