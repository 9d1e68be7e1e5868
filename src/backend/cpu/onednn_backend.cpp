// rn50: oneDNN backend core: engine/stream, primitive cache and Exec plumbing, scratch buffers,
// alloc/copy/zero/supports, shared helpers, and make_onednn_backend().
#include "backend/cpu/onednn_backend.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/conv_wgrad_gemm.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "backend/factories.h"
#include "core/cpu_info.h"
#include "core/check.h"
#include "rn50/profile.h"

namespace rn50 {
namespace onednn {

using dnnl::memory;
using tag = memory::format_tag;

// ---------------------------------------------------------------- keys

Key& Key::add(int64_t x) {
  RN50_CHECK(n < kMax, "onednn: cache key overflow ({} entries)", kMax);
  v[n++] = x;
  return *this;
}

Key& Key::add(const Tensor& t) {
  if (!t.defined()) return add(-1);
  add(t.ndim());
  for (int64_t d : t.shape()) add(d);
  add(static_cast<int64_t>(t.dtype()));
  return add(static_cast<int64_t>(eff_layout(t)));
}

bool Key::operator==(const Key& o) const {
  if (n != o.n) return false;
  for (int i = 0; i < n; ++i)
    if (v[i] != o.v[i]) return false;
  return true;
}

size_t KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit words
  for (int i = 0; i < k.n; ++i) {
    h ^= static_cast<uint64_t>(k.v[i]);
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h ^ (h >> 29));
}

// ---------------------------------------------------------------- Exec

void Exec::set(int arg, const void* p) {
  for (auto& [a, m] : mems) {
    if (a == arg) {
      m.set_data_handle(const_cast<void*>(p));
      return;
    }
  }
  RN50_FAIL("onednn: primitive argument {} was not declared", arg);
}

// ---------------------------------------------------------------- helpers

memory::desc f32_md(const memory::dims& dims, tag t) {
  return memory::desc(dims, memory::data_type::f32, t);
}

memory::data_type dnnl_dtype(DType dt) {
  switch (dt) {
    case DType::f32: return memory::data_type::f32;
    case DType::bf16: return memory::data_type::bf16;
    default: break;
  }
  RN50_FAIL("onednn: dtype {} is not a compute dtype of this backend (f32, bf16)", dtype_name(dt));
}

memory::desc md_of(const memory::dims& dims, DType dt, tag t) {
  return memory::desc(dims, dnnl_dtype(dt), t);
}

memory::desc plain_md(const Tensor& t) {
  const DType dt = t.dtype();
  RN50_CHECK(dt == DType::f32 || dt == DType::bf16,
             "onednn: only f32 and bf16 tensors are supported, got {}", t.str());
  memory::dims dims(t.shape().begin(), t.shape().end());
  switch (t.ndim()) {
    case 1: return md_of(dims, dt, tag::a);
    case 2: return md_of(dims, dt, tag::ab);
    case 3: return md_of(dims, dt, tag::abc);
    case 4: return md_of(dims, dt, t.layout() == Layout::NHWC ? tag::nhwc : tag::nchw);
    default: break;
  }
  return md_of({t.numel()}, dt, tag::a);
}

DType compute_dtype_of(const char* op, const char* what, const Tensor& t) {
  RN50_CHECK(t.defined(), "onednn {}: {} is undefined", op, what);
  RN50_CHECK(t.is_cpu(), "onednn {}: {} must be a CPU tensor, got {}", op, what, t.str());
  RN50_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
             "onednn {}: {} must be F32 or BF16, got {}", op, what, t.str());
  return t.dtype();
}

void check_tensor(const char* op, const char* what, const Tensor& t, DType dt) {
  RN50_CHECK(t.defined(), "onednn {}: {} is undefined", op, what);
  RN50_CHECK(t.is_cpu(), "onednn {}: {} must be a CPU tensor, got {}", op, what, t.str());
  RN50_CHECK(t.dtype() == dt, "onednn {}: {} must be {}, got {}", op, what, dtype_name(dt),
             t.str());
}

void check_shape(const char* op, const char* what, const Tensor& t,
                 const std::vector<int64_t>& shape) {
  RN50_CHECK(t.shape() == shape, "onednn {}: {} has shape {}, expected [{}]", op, what, t.str(),
             fmt::join(shape, ","));
}

void check_same_shape(const char* op, const Tensor& a, const char* an, const Tensor& b,
                      const char* bn) {
  RN50_CHECK(a.same_shape(b), "onednn {}: shape mismatch: {} {} vs {} {}", op, an, a.str(), bn,
             b.str());
}

// ---------------------------------------------------------------- backend

OnednnBackend::OnednnBackend() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

OnednnBackend::~OnednnBackend() {
  cache_.clear();
  for (Buf& b : scratch_) std::free(b.p);
}

void OnednnBackend::clear_cache() {
  cache_.clear();
  conv_choices_.clear();
  stats_.entries = 0;
}

bool OnednnBackend::supports(Op op, DType dtype, Layout layout) const {
  if (layout != Layout::NCHW && layout != Layout::NHWC) return false;
  if (op == Op::conv_bias_act) return false;  // inference: the CPU engine (src/infer)
  // Our NHWC loops (batchnorm_nhwc.cpp); oneDNN 2.6's batch norm cannot add a residual.
  if (op == Op::batchnorm_add_relu)
    return layout == Layout::NHWC &&
           (dtype == DType::f32 || (dtype == DType::bf16 && bf16_available()));
  if (dtype == DType::f32) return true;
  if (dtype != DType::bf16) return false;  // fp16 compute: the CUDA backend
  switch (op) {
    case Op::softmax_xent:
    case Op::topk:
    case Op::sgd:
    case Op::amp: return false;
    default: return bf16_available();
  }
}

bool OnednnBackend::bf16_available() {
  static const bool ok = [] {
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      const memory::data_type bf = memory::data_type::bf16;
      memory::desc x({2, 16, 8, 8}, bf, tag::nhwc), w({16, 16, 3, 3}, bf, tag::any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, x, w, x, {1, 1},
                                        {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, eng);
      return true;
    } catch (const dnnl::error&) {
      return false;  // oneDNN has no bf16 kernels for this CPU's ISA
    }
  }();
  return ok;
}

dnnl::primitive_attr OnednnBackend::attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

Exec OnednnBackend::make_exec(const dnnl::primitive_desc_base& pd, dnnl::primitive prim,
                              std::initializer_list<std::pair<int, memory::desc>> args) {
  Exec e;
  e.prim = std::move(prim);
  for (const auto& [arg, md] : args)
    e.mems.emplace_back(arg, memory(md, engine_, DNNL_MEMORY_NONE));
  memory::desc sp = pd.scratchpad_desc();
  e.scratch_bytes = sp.get_size();
  if (e.scratch_bytes > 0)
    e.mems.emplace_back(DNNL_ARG_SCRATCHPAD, memory(sp, engine_, DNNL_MEMORY_NONE));
  for (auto& [arg, m] : e.mems) e.c_args.push_back(dnnl_exec_arg_t{arg, m.get()});
  return e;
}

void OnednnBackend::run(Exec& e) {
  if (e.scratch_bytes > 0) e.set(DNNL_ARG_SCRATCHPAD, scratch(kScratchPad, e.scratch_bytes));
  dnnl_status_t st = dnnl_primitive_execute(e.prim.get(), stream_.get(),
                                            static_cast<int>(e.c_args.size()), e.c_args.data());
  RN50_CHECK(st == dnnl_success, "onednn: primitive execution failed (status {})",
             static_cast<int>(st));
}

namespace {
/// -1: not set by set_conv_algo (then RN50_CONV_ALGO decides).
std::atomic<int> g_conv_algo_override{-1};
}  // namespace

namespace {
/// -1: no ScopedConvAlgo on this thread.
thread_local int t_conv_algo_scoped = -1;
}  // namespace

ScopedConvAlgo::ScopedConvAlgo(ConvAlgo a) : prev_(t_conv_algo_scoped) {
  t_conv_algo_scoped = static_cast<int>(a);
}
ScopedConvAlgo::~ScopedConvAlgo() { t_conv_algo_scoped = prev_; }

ConvAlgo conv_algo() {
  if (t_conv_algo_scoped >= 0) return static_cast<ConvAlgo>(t_conv_algo_scoped);
  const int o = g_conv_algo_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<ConvAlgo>(o);
  static const int from_env = [] {
    const char* v = std::getenv("RN50_CONV_ALGO");
    if (v == nullptr || std::strcmp(v, "auto") == 0 || std::strcmp(v, "winograd") == 0)
      return static_cast<int>(ConvAlgo::automatic);
    if (std::strcmp(v, "direct") == 0) return static_cast<int>(ConvAlgo::direct);
    if (std::strcmp(v, "matmul") == 0) return static_cast<int>(ConvAlgo::matmul);
    return -1;
  }();
  RN50_CHECK(from_env >= 0,
             "environment variable RN50_CONV_ALGO is '{}': use auto (Winograd for 3x3 stride-1 "
             "convolutions in f32, and in bf16 on CPUs with AVX-512 BF16 and no AMX, the "
             "backward of 1x1 convolutions as matmuls in bf16 on AMX CPUs, some weight "
             "gradients as our own GEMM), winograd (the same), direct (oneDNN's direct "
             "convolution only) or matmul (as auto, and 1x1 convolutions as matmuls in every "
             "direction and precision)",
             std::getenv("RN50_CONV_ALGO"));
  return static_cast<ConvAlgo>(from_env);
}

void set_conv_algo(std::optional<ConvAlgo> a) {
  g_conv_algo_override.store(a ? static_cast<int>(*a) : -1, std::memory_order_relaxed);
}

bool conv_winograd_allowed() { return conv_algo() != ConvAlgo::direct; }

namespace {
/// Whether oneDNN's effective ISA on this CPU includes `isa` (cached per ISA by the callers).
bool isa_at_least(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
}
/// Whether oneDNN dispatches to AMX kernels on this CPU.
bool cpu_has_amx() {
  static const bool amx = isa_at_least(dnnl::cpu_isa::avx512_core_amx);
  return amx;
}
/// Whether oneDNN dispatches to AVX-512 kernels (avx512_core or above) on this CPU.
bool cpu_has_avx512() {
  static const bool avx512 = isa_at_least(dnnl::cpu_isa::avx512_core);
  return avx512;
}
}  // namespace

bool conv1x1_matmul_allowed(DType dt, ConvDir dir) {
  switch (conv_algo()) {
    case ConvAlgo::direct: return false;
    case ConvAlgo::matmul: return dt == DType::f32 || dt == DType::bf16;
    case ConvAlgo::automatic: break;
  }
  if (dt != DType::bf16 || dir == ConvDir::fwd) return false;
  return cpu_has_amx();
}

WgradTuning cpu_wgrad_tuning() {
  // Zen 4 is family 19h, Zen 5 1Ah (core/cpu_info.h reads the family as AMD's APM vol. 3 says).
  const CpuInfo& c = cpu_info();
  return c.amd() && c.family >= 0x1a ? WgradTuning::zen5 : WgradTuning::zen4;
}

bool conv_own_wgrad_faster(DType dt, const ConvShapeInfo& s, WgradTuning tuning) {
  const bool zen5 = tuning == WgradTuning::zen5;
  // bf16, 1x1: bench_micro's BM_Conv1x1BwdWeightsBf16, ResNet-50's 1x1s at batch 32, 2-core
  // AMD EPYC with AVX-512 BF16 (Zen 4), medians of 5, randomly interleaved (oneDNN / own ms):
  // at 7x7 outputs 512->2048 10.5 / 8.54, 2048->512 12.8 / 9.16, 1024->2048 stride 2
  // 24.2 / 18.2; at 14x14 9.51 / 9.64 and 9.07 / 8.77; at 28x28 and 56x56 oneDNN level or ahead
  // (64->64 2.96 / 3.60, 64->256 10.6 / 14.7, 256->128 20.2 / 21.3: there the packing and the
  // streaming from memory cost more than oneDNN's kernel loses). So: outputs of 7x7 pixels or
  // fewer. Since the kernel splits larger outputs' pixels between the threads and prefetches
  // each next chunk (conv_wgrad_bf16_splits_pixels), the same benchmark, one process, medians of
  // 7 (oneDNN / own ms): the 1x1s that widen fourfold 64->256 at 56x56 10.6 / 9.99, 128->512 at
  // 28x28 9.14 / 9.05, 256->1024 at 14x14 9.34 / 8.96; the strided ones 256->512 from 56x56
  // 19.2 / 17.4, 512->1024 from 28x28 19.2 / 17.7; the others level within the noise, some
  // behind in a second run (64->64 at 56x56 3.05 / 3.14, 1024->256 at 14x14 8.77 / 8.99,
  // 512->256 at 28x28 17.5-17.8 / 17.4-19.5). So also: 1x1s strided or widening fourfold.
  // 3x3 (taps in the padding left out): BM_ConvBwdWeightsBf16/im2col:0 against
  // BM_ConvBwdWeightsBf16Own, same machine, medians of 7, randomly interleaved (oneDNN / own ms):
  // 512 stride 2 to 7x7 28.9 / 21.7, 512 at 7x7 20.7 / 19.3, 256 stride 2 to 14x14
  // 21.7 / 20.5, 256 at 14x14 16.7 / 19.1; of 5: 128 stride 2 to 28x28 22.9 / 25.1, 128 at
  // 28x28 17.3 / 22.7, 64 at 56x56 19.1 / 31.6. In the step (four profiled runs each, taking
  // turns) the weight gradients took 696-722 ms (median 708) with the two stride-1 512s against
  // 704-723 (717) without. So: outputs of 7x7 pixels or fewer, any kernel and stride.
  const bool wide_or_strided_1x1 = s.R == 1 && (s.stride > 1 || s.K >= 4 * s.C);
  // On Zen 5 (AVX-512 on 512-bit units, bf16 peak 867 GFLOP/s on 2 cores), the same
  // benchmarks, medians of 3 or 5, two to three runs (oneDNN / own ms): the 1x1s that
  // narrow 256->64 at 56x56 8.47 / 7.08, 256->128 14.3, 14.0, 11.6 / 13.5, 12.1, 11.1,
  // 512->128 at 28x28 7.26 / 5.73, 512->256 12.9, 13.3 / 10.4, 10.5, 1024->512 at 14x14 13.9,
  // 13.0 / 9.71, 9.97, 1024->256 9.36, 6.06, 7.94 / 8.28, 6.96, 5.99 (level); 64->64 at 56x56
  // 2.39, 2.44, 2.32 / 2.72, 2.63, 2.55 (oneDNN ahead); the 3x3s stride 2 256 to 14x14 15.0,
  // 15.6 / 11.0, 11.0 (ahead on Zen 4 too, above), 128 to 28x28 15.0, 14.0 / 12.4, 12.2
  // (behind on Zen 4: left to oneDNN). In the step (`rn50 train --benchmark ... --amp
  // --amp-dtype bf16 --profile`, six interleaved pairs) the weight gradients took 353-439 ms
  // (median 392) against 378-449 (408). So also: 1x1s that narrow, and strided KxKs to 14x14 or
  // fewer. The narrowing 1x1s measured on Zen 4 again (2026-12-04, medians of 5, randomly
  // interleaved): 256->64 at 56x56 12.3 / 12.3, 512->128 at 28x28 10.5 / 11.7, 1024->256 at
  // 14x14 9.78 / 11.2, 512->256 19.0 / 18.8, 1024->512 19.5 / 20.4: level or behind, so not
  // there.
  const bool narrowing_1x1 = s.R == 1 && s.K < s.C;
  const bool strided_kxk_to_14 = s.R > 1 && s.stride > 1 && s.out_pixels <= 14 * 14;
  // f32 (our own GEMM with a pixel per step, conv_wgrad_f32): bench_micro's
  // BM_Conv1x1BwdWeightsF32, ResNet-50's 1x1s at batch 32, 2-core Zen 5 EPYC (f32 peak
  // 415-449 GFLOP/s), medians of 5, randomly interleaved (oneDNN's jit:avx512_core / own ms):
  // the 1x1s that keep or widen the channels 64->64 at 56x56 5.94 / 4.32, 64->256 19.0 / 15.2,
  // 128->512 at 28x28 13.9 / 13.0, 256->1024 at 14x14 10.9 / 11.2, 512->2048 at 7x7
  // 10.8 / 10.7, strided 256->512 23.5 / 22.9, 512->1024 22.1 / 22.0, 1024->2048 23.6 / 20.1;
  // 2048->512 at 7x7 12.0 / 10.9; the other narrowing ones behind (256->64 at 56x56
  // 12.6 / 17.2, 256->128 24.3 / 28.4, 512->128 12.2 / 13.1, 512->256 22.1 / 24.7, 1024->256
  // 10.7 / 11.2, 1024->512 20.5 / 21.7: there each packed column panel of x is gathered from
  // every pixel's longer row, 256 of its 1-4 KiB, and feeds fewer row tiles). In the step
  // (`rn50 train --benchmark --batch-size 32 --profile`, five interleaved pairs) the weight
  // gradients took 754-845 ms (median 792) against 758-955 (823), 4 of 5 pairs ahead; the
  // 1x1s taken write OIHW themselves (dW reorders 6 against 13-22 ms). So on Zen 5: 1x1s that
  // keep or widen the channels, and 1x1s with outputs of 7x7 or fewer.
  // On Zen 4 (f32 peak 236 GFLOP/s; 2026-12-04, medians of 5, randomly interleaved, two runs
  // where they are given twice): 64->256 at 56x56 30.7 / 21.8 (oneDNN's kernel is slow there:
  // 4x the 64->64's 4.85 ms of FLOPs in 6x its time); the rest level or behind, with runs that
  // disagree: 64->64 5.50, 4.85 / 7.64, 7.00, 128->512 at 28x28 23.5 / 23.3, 256->1024 at 14x14
  // 18.8 / 21.1, 512->2048 at 7x7 18.0 / 19.6, 2048->512 22.1, 22.5 / 25.8, 20.9, strided
  // 256->512 37.6 / 38.8, 512->1024 39.2 / 41.7, 1024->2048 37.7 / 41.0. So there: 1x1s that
  // widen fourfold at 56x56.
  if (dt == DType::f32) {
    if (s.R != 1) return false;
    if (zen5) return s.K >= s.C || s.out_pixels <= 49;
    return s.K >= 4 * s.C && s.out_pixels >= 56 * 56;
  }
  if (dt != DType::bf16) return false;
  return s.out_pixels <= 49 || wide_or_strided_1x1 || strided_kxk_to_14 ||
         (zen5 && narrowing_1x1);
}

bool conv_own_wgrad_allowed(DType dt, const ConvShapeInfo& s) {
  // Not on AMX CPUs (their bf16 paths are oneDNN's AMX matmuls; f32 not measured there).
  if (conv_algo() != ConvAlgo::automatic || cpu_has_amx()) return false;
  const bool built = dt == DType::f32    ? conv_wgrad_f32_built()
                     : dt == DType::bf16 ? conv_wgrad_bf16_built()
                                         : false;
  return built && conv_own_wgrad_faster(dt, s, cpu_wgrad_tuning());
}

bool conv_im2col_allowed(DType dt, const ConvShapeInfo& s) {
  switch (conv_algo()) {
    case ConvAlgo::direct: return false;
    case ConvAlgo::matmul: return dt == DType::f32 || dt == DType::bf16;
    case ConvAlgo::automatic: break;
  }
  // bench_micro's BM_ConvBwdWeightsBf16, ResNet-50 at batch 32, 2-core Sapphire Rapids, three
  // interleaved runs (direct / im2col): 3x3 256->256 stride 2 to 14x14 2.4-2.6x, stride 1 at
  // 14x14 1.5-1.8x, 512->512 stride 2 to 7x7 2.8-4.2x, stride 1 at 7x7 2.4-2.9x; at 28x28 outputs
  // 0.9-1.2x, at 28x28 and 56x56 stride 1 0.4-0.6x (the direct kernel reaches 450-550 GFLOP/s
  // there), the stem 0.9-1.0x. So: outputs of 14x14 or fewer pixels.
  // f32 on CPUs without AVX-512 (oneDNN's jit:avx2 direct kernel; no Winograd there):
  // BM_ConvBwdWeightsF32, medians of 3, 2-core AVX2-only EPYC, direct / im2col ms: stem
  // 153 / 108, 64->64 at 56x56 146 / 79, 128 stride 2 148 / 69, 128 at 28x28 101 / 69, 256
  // stride 2 121 / 75, 256 at 14x14 100 / 75, 512 stride 2 156 / 74, 512 at 7x7 118 / 66: every
  // shape (1.3-2.1x). With AVX-512 the stride-1 3x3s are Winograd's and the stem stays direct
  // (2-core Zen 5 EPYC, same bench, direct / im2col ms: 28.5 / 61.0), but the stride-2 3x3s
  // leave oneDNN's jit:avx512_core kernel (its 128 / 256 / 512-channel ones 36.6 / 25.8, 31.8 /
  // 26.9, 31.2 / 24.8: 200-237 against 275-298 GFLOP/s of a 449 peak).
  if (dt == DType::f32) return !cpu_has_avx512() || (s.R == 3 && s.stride == 2);
  if (dt != DType::bf16 || !cpu_has_amx()) return false;
  return s.out_pixels <= 14 * 14;
}

bool conv_own_winograd_allowed() {
  const ConvAlgo a = conv_algo();
  return a == ConvAlgo::matmul || (a == ConvAlgo::automatic && !cpu_has_avx512());
}

// bench_micro's BM_Conv3x3TrainBf16 at batch 32 on a 2-core AVX-512 EPYC (oneDNN 2.6's
// jit_bf16 direct kernel / our F(2x2, 3x3), ms, medians of 3, one process, interleaved; chunks
// of 96 tiles): forward 64 ch at 56x56 16.3 / 14.5, 128 ch at 28x28 15.7 / 11.4, 256 ch at
// 14x14 15.9 / 10.8, 512 ch at 7x7 14.6 / 18.7; backward data 16.5 / 13.7, 15.8 / 11.2, 15.4 /
// 10.9, 17.7 / 21.3. At 7x7 the 2x2 tiles cover 8x8 (31% more work) and U (8 MiB at 512
// channels) is read by every chunk's matmul. The weight gradient (chunks of 4 MiB, medians of
// 5): 21.0 / 13.6, 17.2 / 11.4, 16.6 / 10.7, 19.9 / 17.9 (our own GEMM, which takes 7x7s: 19.4).
bool conv_own_winograd_bf16_allowed(const ConvShapeInfo& s) {
  if (!WinogradF23Bf16::built()) return false;
  const ConvAlgo a = conv_algo();
  if (a == ConvAlgo::matmul) return true;
  return a == ConvAlgo::automatic && s.out_pixels >= 14 * 14;
}

bool infer_blocked_activations_preferred() {
  // rn50 bench infer --precision fp32 --batch-sizes 1,32, ResNet-50 at 224 px, 2-core
  // AVX2-only EPYC, three interleaved pairs (NHWC / nChw8c, img/s): batch 1 10.95 / 15.69,
  // 11.44 / 16.56, 12.47 / 13.61; batch 32 12.03 / 15.52, 14.81 / 15.06, 12.97 / 14.15. oneDNN
  // runs jit:avx2 and jit_1x1:avx2 on both layouts; NHWC costs them the channel blocking.
  // With AVX-512 the block is nChw16c, the layout oneDNN's Winograd convs compute in, which
  // then read and write the engine's buffers without the two reorders each NHWC needs: same
  // command, 2-core AMD EPYC (Zen 5) with AVX-512, five interleaved runs each (NHWC / nChw16c,
  // img/s): batch 32 47.28, 44.69, 44.59, 49.70, 48.41 / 50.28, 48.28, 51.56, 47.51, 49.51
  // (medians 47.28 / 49.51, +4.7%); batch 1 48.78, 44.82, 42.08, 45.64, 50.03 / 36.51, 46.00,
  // 36.59, 46.08, 49.30 (medians 45.64 / 46.00; --profile: convs 20.83 ms either way, the 26
  // reorders' 0.46 ms gone).
  return true;
}

int infer_activation_block() { return cpu_has_avx512() ? 16 : 8; }

namespace {
std::atomic<int> g_int8_float_bf16_override{-1};  // -1: the CPU decides
}  // namespace

bool infer_int8_float_ops_bf16() {
  // rn50 bench infer --precision int8, ResNet-50 at 224 px, 2-core AMD EPYC with AVX-512 BF16,
  // three interleaved pairs (float ops f32 / bf16, img/s): batch 1 86.6, 81.2, 87.4 / 93.6,
  // 90.8, 90.9; batch 32 91.2, 92.6, 90.5 / 98.1, 97.9, 95.0. At batch 1 (--profile) the convs
  // went from 11.00 to 10.43 ms (the stem from 206 GFLOP/s in f32), the fc 0.32 -> 0.17, the
  // max pool 0.14 -> 0.04. A resnet18 trained on imagenette (4 epochs, 128 px): val top-1
  // 67.64% -> 67.62%, top-5 95.08% -> 95.13%, top-1 agreeing with fp32's on 3887 of 3925
  // images either way. Without native bf16 oneDNN emulates it, slower than f32.
  static const bool bf16 = isa_at_least(dnnl::cpu_isa::avx512_core_bf16);
  const int o = g_int8_float_bf16_override.load(std::memory_order_relaxed);
  return o < 0 ? bf16 : o == 1;
}

void set_infer_int8_float_ops_bf16(std::optional<bool> bf16) {
  g_int8_float_bf16_override.store(bf16 ? static_cast<int>(*bf16) : -1,
                                   std::memory_order_relaxed);
}

void* OnednnBackend::scratch(ScratchSlot slot, size_t bytes) {
  Buf& b = scratch_[slot];
  if (bytes > b.bytes) {
    std::free(b.p);
    b.bytes = 0;
    size_t sz = (bytes + 4095) / 4096 * 4096;
    b.p = std::aligned_alloc(64, sz);
    RN50_CHECK(b.p != nullptr, "onednn: out of host memory allocating {} scratch bytes", sz);
    b.bytes = sz;
  }
  return b.p;
}

namespace {
struct ReorderEntry : CacheEntry {
  Exec ex;
};
/// In a profile: a layout change or dtype conversion of an activation (copy() across layouts or
/// dtypes, or an op handed operands of mixed layouts), an op of its own.
constexpr ProfileOp kReorderAct{"reorder activations (layout/dtype)", "reorder", "-"};
}  // namespace

void OnednnBackend::reorder(const Tensor& src, const Tensor& dst) {
  OpProfiler::Scope timed(kReorderAct, 0, static_cast<double>(src.nbytes() + dst.nbytes()),
                          nullptr);
  Key k = key(Tag::reorder).add(src).add(dst);
  auto& e = cached<ReorderEntry>(k, [&] {
    auto r = std::make_unique<ReorderEntry>();
    memory::desc from = plain_md(src), to = plain_md(dst);
    dnnl::reorder::primitive_desc pd(engine_, from, engine_, to, attr());
    r->ex = make_exec(pd, dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return r;
  });
  e.ex.set(DNNL_ARG_FROM, src.data());
  e.ex.set(DNNL_ARG_TO, dst.data());
  run(e.ex);
}

Tensor OnednnBackend::alloc(std::vector<int64_t> shape, DType dtype, Layout layout) {
  return Tensor::empty(std::move(shape), dtype, layout);
}

void OnednnBackend::copy(const Tensor& src, Tensor& dst) {
  RN50_CHECK(src.defined() && dst.defined(), "onednn copy: undefined tensor ({} -> {})",
             src.str(), dst.str());
  RN50_CHECK(src.is_cpu() && dst.is_cpu(), "onednn copy: tensors must be on the CPU ({} -> {})",
             src.str(), dst.str());
  check_same_shape("copy", src, "src", dst, "dst");
  if (src.dtype() != dst.dtype()) {
    const bool f32_bf16 = (src.dtype() == DType::f32 && dst.dtype() == DType::bf16) ||
                          (src.dtype() == DType::bf16 && dst.dtype() == DType::f32);
    RN50_CHECK(f32_bf16,
               "onednn copy: dtype conversion {} -> {} is not supported (f32 <-> bf16 only)",
               src.str(), dst.str());
    reorder(src, dst);
    return;
  }
  if (src.data() == dst.data() && eff_layout(src) == eff_layout(dst)) return;
  if (eff_layout(src) == eff_layout(dst)) {
    constexpr size_t kChunk = size_t{1} << 20;  // parallel over 1 MiB chunks
    const size_t bytes = src.nbytes();
    const auto* s = static_cast<const char*>(src.data());
    auto* d = static_cast<char*>(dst.data());
    const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t i = 0; i < chunks; ++i) {
      const size_t off = static_cast<size_t>(i) * kChunk;
      std::memcpy(d + off, s + off, std::min(kChunk, bytes - off));
    }
    return;
  }
  if (src.dtype() == DType::f32 || src.dtype() == DType::bf16) {
    reorder(src, dst);
    return;
  }
  // Other dtypes: element-wise layout change over the logical index.
  const int64_t N = src.n(), C = src.c(), H = src.h(), W = src.w();
  const size_t es = dtype_size(src.dtype());
  const auto* s = static_cast<const char*>(src.data());
  auto* d = static_cast<char*>(dst.data());
#pragma omp parallel for collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          std::memcpy(d + dst.offset4(n, c, h, w) * es, s + src.offset4(n, c, h, w) * es, es);
}

void OnednnBackend::zero(Tensor& dst) {
  RN50_CHECK(dst.defined() && dst.is_cpu(), "onednn zero: need a defined CPU tensor, got {}",
             dst.str());
  // Parallel over 1 MiB chunks (large activation gradients are tens of MiB).
  constexpr size_t kChunk = size_t{1} << 20;
  const size_t bytes = dst.nbytes();
  auto* p = static_cast<char*>(dst.data());
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t i = 0; i < chunks; ++i) {
    const size_t off = static_cast<size_t>(i) * kChunk;
    std::memset(p + off, 0, std::min(kChunk, bytes - off));
  }
}

void OnednnBackend::synchronize() { stream_.wait(); }

std::vector<std::pair<std::string, std::string>> OnednnBackend::environment() const {
  const dnnl_version_t* v = dnnl_version();
  return {{"onednn", fmt::format("{}.{}.{}", v->major, v->minor, v->patch)}};
}

}  // namespace onednn

std::unique_ptr<Backend> make_onednn_backend() {
  return std::make_unique<onednn::OnednnBackend>();
}

}  // namespace rn50
