// rn50: the CPU convolution registry (conv_registry.h): each direction's implementations in
// the order they are tried, the per-shape choice and its log.
#include "backend/cpu/conv_registry.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "backend/cpu/conv_im2col.h"
#include "backend/cpu/conv_matmul.h"
#include "backend/cpu/conv_wgrad_gemm.h"
#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/winograd_f23_bf16.h"
#include "core/check.h"
#include "rn50/profile.h"

namespace rn50::onednn {

namespace {

// ---- fits: conv_algo.h's policy and each kernel's shape limits ----

bool matmul_1x1_fits(const ConvCall& c) { return conv1x1_as_matmul(c.dir, c.p, c.x, c.w, c.y); }

/// Our Winograd for x's dtype (f32: F(4x4,3x3), bf16: F(2x2,3x3)); the same predicates pick
/// the tile size from the dtype.
bool own_winograd_fits(const ConvCall& c) {
  return c.dir == ConvDir::bwd_weights ? conv_bwd_weights_as_own_winograd(c.p, c.x, c.w, c.y)
                                       : conv_as_own_winograd(c.dir, c.p, c.x, c.w, c.y);
}
bool own_winograd_f43_fits(const ConvCall& c) {
  return c.x.dtype() == DType::f32 && own_winograd_fits(c);
}
bool own_winograd_f23_bf16_fits(const ConvCall& c) {
  return c.x.dtype() == DType::bf16 && own_winograd_fits(c);
}

/// The weight gradient's geometry for our GEMM (conv_wgrad_gemm.h).
WgradGeo wgrad_geo(const ConvCall& c) {
  return WgradGeo{c.x.n(), c.x.h(), c.x.w(), c.x.c(), c.y.c(), c.p.stride,
                  c.w.h(), c.w.w(), c.p.pad, c.w.layout() == Layout::NHWC};
}
bool own_wgrad_gemm_fits(const ConvCall& c) {
  if (c.x.layout() != Layout::NHWC || c.y.layout() != Layout::NHWC) return false;
  const DType dt = c.x.dtype();
  if (!conv_own_wgrad_allowed(
          dt, ConvShapeInfo{c.x.c(), c.y.c(), c.w.h(), c.p.stride, c.y.h() * c.y.w()}))
    return false;
  const WgradGeo g = wgrad_geo(c);
  return (dt == DType::f32 && conv_wgrad_f32_fits(g)) ||
         (dt == DType::bf16 && conv_wgrad_bf16_fits(g));
}

bool im2col_fits(const ConvCall& c) { return conv_bwd_weights_as_im2col(c.p, c.x, c.w, c.y); }
bool always(const ConvCall&) { return true; }

// ---- takes: the kernel's own limits. Policy `matmul` lets every own path take every shape
// its kernel computes (conv_algo.h), so the predicates above answer that under it. ----

template <bool (*Fits)(const ConvCall&)>
bool under_matmul_policy(const ConvCall& c) {
  ScopedConvAlgo all(ConvAlgo::matmul);
  return Fits(c);
}
bool own_wgrad_gemm_takes(const ConvCall& c) {
  if (c.x.layout() != Layout::NHWC || c.y.layout() != Layout::NHWC) return false;
  const WgradGeo g = wgrad_geo(c);
  return (c.x.dtype() == DType::f32 && conv_wgrad_f32_fits(g)) ||
         (c.x.dtype() == DType::bf16 && conv_wgrad_bf16_fits(g));
}

// ---- unavailable: what a CPU lacks for a kernel ----

const char* everywhere() { return nullptr; }
const char* own_wgrad_gemm_unavailable() {
  return conv_wgrad_f32_built() || conv_wgrad_bf16_built()
             ? nullptr
             : "our weight-gradient GEMM needs AVX-512 (F, BW, VL, DQ) for f32 or AVX-512 BF16 "
               "without AMX for bf16, and this CPU (or RN50_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA) "
               "has neither";
}
const char* own_winograd_f23_bf16_unavailable() {
  return WinogradF23Bf16::built()
             ? nullptr
             : "our bf16 Winograd F(2x2, 3x3) needs AVX-512 BF16 without AMX, which this CPU "
               "(or RN50_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA) does not have";
}

// ---- run: the kernels' entry points, arguments in their own order ----

const char* matmul_1x1_fwd(OnednnBackend& be, const ConvCall& c) {
  conv1x1_fwd_matmul(be, c.p, c.x, c.w, c.out);
  return nullptr;
}
const char* matmul_1x1_bwd_data(OnednnBackend& be, const ConvCall& c) {
  conv1x1_bwd_data_matmul(be, c.p, c.y, c.w, c.out);
  return nullptr;
}
const char* matmul_1x1_bwd_weights(OnednnBackend& be, const ConvCall& c) {
  conv1x1_bwd_weights_matmul(be, c.p, c.x, c.y, c.out);
  return nullptr;
}
const char* own_winograd_fwd(OnednnBackend& be, const ConvCall& c) {
  conv_fwd_own_winograd(be, c.p, c.x, c.w, c.out);
  return nullptr;
}
const char* own_winograd_bwd_data(OnednnBackend& be, const ConvCall& c) {
  conv_bwd_data_own_winograd(be, c.p, c.y, c.w, c.out);
  return nullptr;
}
const char* own_winograd_bwd_weights(OnednnBackend& be, const ConvCall& c) {
  conv_bwd_weights_own_winograd(be, c.p, c.x, c.y, c.out);
  return nullptr;
}
const char* own_wgrad_gemm(OnednnBackend& be, const ConvCall& c) {
  const WgradGeo g = wgrad_geo(c);
  if (c.x.dtype() == DType::f32) {
    const int64_t ws = conv_wgrad_f32_workspace(g);
    auto* work = ws == 0 ? nullptr
                         : static_cast<float*>(be.scratch(kScratchWork, sizeof(float) * ws));
    conv_wgrad_f32(g, c.x.data_as<float>(), c.y.data_as<float>(), c.out.data_as<float>(), work);
  } else {
    auto* work = static_cast<float*>(
        be.scratch(kScratchWork, sizeof(float) * conv_wgrad_bf16_workspace(g)));
    conv_wgrad_bf16(g, c.x.data_as<uint16_t>(), c.y.data_as<uint16_t>(),
                    c.out.data_as<uint16_t>(), work);
  }
  return nullptr;
}
const char* im2col_bwd_weights(OnednnBackend& be, const ConvCall& c) {
  conv_bwd_weights_im2col(be, c.p, c.x, c.y, c.out);
  return nullptr;
}
const char* onednn_fwd(OnednnBackend& be, const ConvCall& c) {
  return be.conv2d_fwd_onednn(c.p, c.x, c.w, c.out);
}
const char* onednn_bwd_data(OnednnBackend& be, const ConvCall& c) {
  return be.conv2d_bwd_data_onednn(c.p, c.y, c.w, c.out);
}
const char* onednn_bwd_weights(OnednnBackend& be, const ConvCall& c) {
  return be.conv2d_bwd_weights_onednn(c.p, c.x, c.y, c.out);
}

// ---- the lists: the order is the priority ----

constexpr ConvImpl kFwd[] = {
    {"onednn_matmul_1x1", matmul_1x1_fits, under_matmul_policy<matmul_1x1_fits>, everywhere, matmul_1x1_fwd},
    {"own_winograd_f43", own_winograd_f43_fits, under_matmul_policy<own_winograd_f43_fits>, everywhere, own_winograd_fwd},
    {"own_winograd_f23_bf16", own_winograd_f23_bf16_fits,
     under_matmul_policy<own_winograd_f23_bf16_fits>, own_winograd_f23_bf16_unavailable, own_winograd_fwd},
    {"onednn", always, always, everywhere, onednn_fwd},
};
constexpr ConvImpl kBwdData[] = {
    {"onednn_matmul_1x1", matmul_1x1_fits, under_matmul_policy<matmul_1x1_fits>, everywhere, matmul_1x1_bwd_data},
    {"own_winograd_f43", own_winograd_f43_fits, under_matmul_policy<own_winograd_f43_fits>, everywhere, own_winograd_bwd_data},
    {"own_winograd_f23_bf16", own_winograd_f23_bf16_fits,
     under_matmul_policy<own_winograd_f23_bf16_fits>, own_winograd_f23_bf16_unavailable, own_winograd_bwd_data},
    {"onednn", always, always, everywhere, onednn_bwd_data},
};
constexpr ConvImpl kBwdWeights[] = {
    {"onednn_matmul_1x1", matmul_1x1_fits, under_matmul_policy<matmul_1x1_fits>, everywhere, matmul_1x1_bwd_weights},
    {"own_wgrad_gemm", own_wgrad_gemm_fits, own_wgrad_gemm_takes, own_wgrad_gemm_unavailable,
     own_wgrad_gemm},
    {"own_winograd_f43", own_winograd_f43_fits, under_matmul_policy<own_winograd_f43_fits>, everywhere, own_winograd_bwd_weights},
    {"own_winograd_f23_bf16", own_winograd_f23_bf16_fits,
     under_matmul_policy<own_winograd_f23_bf16_fits>, own_winograd_f23_bf16_unavailable, own_winograd_bwd_weights},
    {"im2col_matmul", im2col_fits, under_matmul_policy<im2col_fits>, everywhere, im2col_bwd_weights},
    {"onednn", always, always, everywhere, onednn_bwd_weights},
};

std::string dims_of(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim(); ++i) s += fmt::format("{}{}", i ? "," : "", t.shape()[i]);
  return s + "]";
}

/// RN50_CONV_LOG's stream (nullptr: unset), opened on first use; lines are appended under
/// the mutex so that backends on several threads do not interleave them.
std::mutex g_log_mutex;
std::FILE* conv_log() {
  static std::FILE* f = [] {
    const char* v = std::getenv("RN50_CONV_LOG");
    if (!v || !*v) return static_cast<std::FILE*>(nullptr);
    if (std::string(v) == "-") return stderr;
    std::FILE* o = std::fopen(v, "a");
    RN50_CHECK(o, "environment variable RN50_CONV_LOG is '{}': cannot open it for appending; "
                  "name a writable file, or '-' for stderr", v);
    return o;
  }();
  return f;
}

}  // namespace

const char* conv_policy_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::automatic: return "auto";
    case ConvAlgo::direct: return "direct";
    case ConvAlgo::matmul: return "matmul";
  }
  return "?";
}

bool conv_log_enabled() { return conv_log() != nullptr; }

void conv_log_append(const std::string& line) {
  std::FILE* log = conv_log();
  if (!log) return;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fputs(line.c_str(), log);
  std::fflush(log);
}

const char* conv_dir_name(ConvDir dir) {
  switch (dir) {
    case ConvDir::fwd: return "fwd";
    case ConvDir::bwd_data: return "bwd_data";
    case ConvDir::bwd_weights: return "bwd_weights";
  }
  return "?";
}

std::span<const ConvImpl> conv_impls(ConvDir dir) {
  switch (dir) {
    case ConvDir::fwd: return kFwd;
    case ConvDir::bwd_data: return kBwdData;
    case ConvDir::bwd_weights: return kBwdWeights;
  }
  return {};
}

std::vector<std::string> conv_impl_names() {
  std::vector<std::string> names;
  for (ConvDir d : {ConvDir::bwd_weights, ConvDir::fwd, ConvDir::bwd_data})
    for (const ConvImpl& i : conv_impls(d))
      if (std::find(names.begin(), names.end(), i.name) == names.end()) names.push_back(i.name);
  return names;
}

namespace {
std::mutex g_forced_mutex;
std::optional<std::string> g_forced_override;  // set_conv_impl's

/// The implementation named `name` in any list (nullptr when none is).
const ConvImpl* impl_named(const std::string& name) {
  for (ConvDir d : {ConvDir::fwd, ConvDir::bwd_data, ConvDir::bwd_weights})
    for (const ConvImpl& i : conv_impls(d))
      if (name == i.name) return &i;
  return nullptr;
}
}  // namespace

std::string conv_forced_impl() {
  static const std::optional<std::string> from_env = []() -> std::optional<std::string> {
    const char* v = std::getenv("RN50_CONV_IMPL");
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }();
  std::string name;
  {
    std::lock_guard<std::mutex> lock(g_forced_mutex);
    name = g_forced_override ? *g_forced_override : from_env.value_or("");
  }
  if (name.empty() || name == "auto") return "";
  const ConvImpl* impl = impl_named(name);
  std::string all;
  for (const std::string& n : conv_impl_names()) all += (all.empty() ? "" : ", ") + n;
  RN50_CHECK(impl != nullptr,
             "RN50_CONV_IMPL is '{}': not a CPU convolution implementation; use auto (the "
             "registry's order) or one of {}",
             name, all);
  const char* why = impl->unavailable();
  RN50_CHECK(why == nullptr,
             "RN50_CONV_IMPL is '{}': {}; unset it, or pin one of the others ({})", name,
             why ? why : "", all);
  return name;
}

void set_conv_impl(std::optional<std::string> name) {
  std::lock_guard<std::mutex> lock(g_forced_mutex);
  g_forced_override = std::move(name);
}

const ConvImpl& choose_conv_impl(const ConvCall& c) {
  const std::span<const ConvImpl> impls = conv_impls(c.dir);
  if (const std::string forced = conv_forced_impl(); !forced.empty()) {
    for (const ConvImpl& i : impls)
      if (forced == i.name && i.takes(c)) return i;
    return impls.back();
  }
  for (const ConvImpl& i : impls)
    if (i.fits(c)) return i;
  return impls.back();  // unreachable: the last entry fits every call
}

void run_conv(OnednnBackend& be, const ConvCall& c) {
  // Everything the fits predicates read: shapes, dtypes, layouts (Key::add), stride, pad, the
  // policy and the thread count (our Winograd wants enough tiles per thread).
  Key k = key(Tag::conv_choice)
              .add(static_cast<int64_t>(c.dir))
              .add(c.x)
              .add(c.w)
              .add(c.y)
              .add(c.p.stride)
              .add(c.p.pad)
              .add(static_cast<int64_t>(conv_algo()))
              .add(omp_get_max_threads())
              .add(static_cast<int64_t>(std::hash<std::string>{}(conv_forced_impl())));
  const ConvImpl*& slot = be.conv_choice(k);
  const bool first = slot == nullptr;
  if (first) slot = &choose_conv_impl(c);
  const ConvImpl& impl = *slot;
  OpProfiler::note_impl(impl.name);
  const char* ran = impl.run(be, c);
  if (ran) OpProfiler::note_impl(ran);
  if (!first) return;
  if (conv_log_enabled())
    conv_log_append(fmt::format(
        "conv {} x {} w {} y {} stride {} pad {} {} {} policy {}{}: {}\n", conv_dir_name(c.dir),
        dims_of(c.x), dims_of(c.w), dims_of(c.y), c.p.stride, c.p.pad, dtype_name(c.x.dtype()),
        layout_name(c.x.layout()), conv_policy_name(conv_algo()),
        conv_forced_impl().empty() ? "" : " RN50_CONV_IMPL=" + conv_forced_impl(),
        ran ? ran : impl.name));
}

}  // namespace rn50::onednn
