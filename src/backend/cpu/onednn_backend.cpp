// rn50: oneDNN backend core: engine/stream, primitive cache and Exec plumbing, scratch buffers,
// alloc/copy/zero/supports, shared helpers, and make_onednn_backend().
#include "backend/cpu/onednn_backend.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/conv_rules.h"
#include "backend/cpu/conv_wgrad_gemm.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "backend/factories.h"
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

bool onednn_isa_at_least(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
}

namespace {
/// Whether oneDNN dispatches to AVX-512 kernels (avx512_core or above) on this CPU.
bool cpu_has_avx512() {
  static const bool avx512 = onednn_isa_at_least(dnnl::cpu_isa::avx512_core);
  return avx512;
}
}  // namespace

// Under the automatic policy each predicate below asks the rule table (conv_rules.h), whose rows
// name the CPU classes and link the measurements; `direct` and `matmul` bypass it.

bool conv1x1_matmul_allowed(DType dt, ConvDir dir) {
  switch (conv_algo()) {
    case ConvAlgo::direct: return false;
    case ConvAlgo::matmul: return dt == DType::f32 || dt == DType::bf16;
    case ConvAlgo::automatic: break;
  }
  return conv_rule_takes(cpu_class(), "onednn_matmul_1x1", dir, dt, ConvShapeInfo{});
}

bool conv_own_wgrad_allowed(DType dt, const ConvShapeInfo& s) {
  if (conv_algo() != ConvAlgo::automatic) return false;
  const bool built = dt == DType::f32    ? conv_wgrad_f32_built()
                     : dt == DType::bf16 ? conv_wgrad_bf16_built()
                                         : false;
  return built && conv_rule_takes(cpu_class(), "own_wgrad_gemm", ConvDir::bwd_weights, dt, s);
}

bool conv_im2col_allowed(DType dt, const ConvShapeInfo& s) {
  switch (conv_algo()) {
    case ConvAlgo::direct: return false;
    case ConvAlgo::matmul: return dt == DType::f32 || dt == DType::bf16;
    case ConvAlgo::automatic: break;
  }
  return conv_rule_takes(cpu_class(), "im2col_matmul", ConvDir::bwd_weights, dt, s);
}

bool conv_own_winograd_allowed() {
  switch (conv_algo()) {
    case ConvAlgo::direct: return false;
    case ConvAlgo::matmul: return true;
    case ConvAlgo::automatic: break;
  }
  // The rule covers all three directions and every shape the kernel takes.
  return conv_rule_takes(cpu_class(), "own_winograd_f43", ConvDir::fwd, DType::f32,
                         ConvShapeInfo{});
}

bool conv_own_winograd_bf16_allowed(const ConvShapeInfo& s) {
  if (!WinogradF23Bf16::built()) return false;
  switch (conv_algo()) {
    case ConvAlgo::direct: return false;
    case ConvAlgo::matmul: return true;
    case ConvAlgo::automatic: break;
  }
  return conv_rule_takes(cpu_class(), "own_winograd_f23_bf16", ConvDir::fwd, DType::bf16, s);
}

bool infer_blocked_activations_preferred() {
  // Measured on AVX2 (nChw8c; bench/results/cpu/2026-11-27-avx2-epyc/infer_blocked_layout.md)
  // and on AVX-512 (nChw16c; bench/results/cpu/2026-12-02-zen5-epyc/infer_blocked_layout.md).
  return true;
}

int infer_activation_block() { return cpu_has_avx512() ? 16 : 8; }

namespace {
std::atomic<int> g_int8_float_bf16_override{-1};  // -1: the CPU decides
}  // namespace

bool infer_int8_float_ops_bf16() {
  // Measured in bench/results/cpu/2026-11-29-zen4-epyc/infer_int8_float_ops_bf16.md. Without
  // native bf16 oneDNN emulates it, slower than f32.
  static const bool bf16 = onednn_isa_at_least(dnnl::cpu_isa::avx512_core_bf16);
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
