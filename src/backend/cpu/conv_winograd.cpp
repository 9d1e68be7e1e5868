// rn50: the training backend's 3x3 stride-1 convolutions on NHWC activations as our own
// Winograd: f32 F(4x4, 3x3) and bf16 F(2x2, 3x3), all three directions (conv_winograd.h).
// Why: oneDNN 2.6 has Winograd only with AVX-512; on AVX2-only CPUs its direct jit:avx2 kernel
// is what the training step's 3x3 stride-1 convs ran (forward and backward data, 13 of
// ResNet-50's convs each), while the inference engine's WinogradF43Conv ran the same shapes
// faster (winograd_f43.cpp; bench/results/cpu/2026-11-28-avx2-epyc/own_winograd_f43_train.md). The
// backward-data conv of a stride-1 pad-1 3x3 conv is itself one, with the weights transposed and
// rotated, so one op serves both. The weights change every step: U is transformed from them on
// every call (36 x C x K floats, about 1/300 of the conv's work at ResNet-50's batch 32). The
// weight gradient is the same algorithm transposed (winograd_f43.h, weight_grad_from_products): the
// input tiles' V as in the forward, the output gradient's tiles through A instead of A^T, their 36
// products summed over all tiles by one batched matmul per chunk, and G^T M G at the end. Results
// differ from the direct convolution by rounding only. bf16 (on CPUs with AVX-512 BF16 and no AMX,
// where oneDNN 2.6 has no bf16 Winograd) takes the same routes through WinogradF23Bf16: its U (16 x
// C x K bf16) transformed on every call, its weight gradient's V and Z in bf16 and their products
// summed in f32, in smaller chunks (kWgradChunkBytesBf16). Its error is about twice the direct bf16
// conv's (winograd_f23_bf16.h).
#include "backend/cpu/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "backend/cpu/winograd_f23_bf16.h"
#include "backend/cpu/winograd_f43.h"
#include "rn50/profile.h"

namespace rn50::onednn {

using dnnl::memory;

namespace {

size_t g_wgrad_chunk_override = 0;  ///< set_winograd_wgrad_chunk_bytes (0: none)

/// Bytes of V and Z per chunk of the weight gradient's tiles: the chunk's transforms are
/// written and then read by the products while they still sit in the caches (L3 here)...
constexpr size_t kWgradChunkBytes = size_t{16} << 20;
/// The same for bf16 (F(2x2, 3x3): 16 positions of 2 bytes per channel of a tile, V and Z):
/// 4 MiB, the best of 1 to 64 MiB over ResNet-50's shapes taken together (measured in
/// bench/results/cpu/2026-11-29-zen4-epyc/own_winograd_f23_bf16_chunks.md).
constexpr size_t kWgradChunkBytesBf16 = size_t{4} << 20;
/// ... but at least this many tiles per chunk: every chunk's products read and write all of M
/// (36 C K floats, 38 MiB at 512 channels), 8 bytes per 2 x rows FLOPs of each element.
constexpr int64_t kWgradMinChunkTiles = 128;

constexpr ProfileOp kWinoWeights{"winograd weight transform", "reorder", "-"};
constexpr ProfileOp kWinoWgradTiles{"winograd tiles (conv bwd_weights)", "reorder", "bwd_weights"};

/// A conv direction's op and its transformed-weights buffer (written on every call).
struct WinoEntry : CacheEntry {
  std::shared_ptr<aligned_vector<float>> u;
  std::unique_ptr<WinogradF43Conv> conv;
};

/// The shape direction `dir` computes: fwd x (N,C) -> y (N,K); bwd_data dy (N,K) -> dx (N,C);
/// bwd_weights the forward conv's (act x, out dy).
WinogradF43Conv::Shape shape_of(ConvDir dir, const Tensor& act, const Tensor& out) {
  const bool fwd = dir != ConvDir::bwd_data;
  return {act.n(), fwd ? act.c() : out.c(), fwd ? out.c() : act.c(), act.h(), act.w(), true};
}

WinoEntry& entry_for(OnednnBackend& be, ConvDir dir, const Tensor& act, const Tensor& w,
                     const Tensor& out) {
  Key k = key(Tag::conv_winograd).add(static_cast<int64_t>(dir)).add(act).add(w).add(out);
  return be.cached<WinoEntry>(k, [&] {
    auto r = std::make_unique<WinoEntry>();
    const WinogradF43Conv::Shape s = shape_of(dir, act, out);
    r->u = std::make_shared<aligned_vector<float>>(WinogradF43Conv::weight_bytes(s) / sizeof(float));
    r->conv = std::make_unique<WinogradF43Conv>(s, r->u, nullptr, false, false);
    return r;
  });
}

/// A bf16 conv direction's op (F(2x2, 3x3)) and its transformed-weights buffer (written on
/// every call).
struct WinoBf16Entry : CacheEntry {
  aligned_vector<uint16_t> u;
  std::unique_ptr<WinogradF23Bf16> conv;
};

/// The bf16 shape direction `dir` computes (shape_of's).
WinogradF23Bf16::Shape bf16_shape_of(ConvDir dir, const Tensor& act, const Tensor& out) {
  const WinogradF43Conv::Shape s = shape_of(dir, act, out);
  return {s.n, s.c, s.k, s.h, s.w};
}

/// The weight order of direction `dir` for weights `w` (OIHW, or OHWI when stored NHWC).
WinogradF43Conv::WeightOrder order_of(ConvDir dir, const Tensor& w) {
  using Order = WinogradF43Conv::WeightOrder;
  const bool ohwi = w.layout() == Layout::NHWC;
  return dir == ConvDir::fwd ? (ohwi ? Order::ohwi : Order::oihw)
                             : (ohwi ? Order::ohwi_bwd_data : Order::oihw_bwd_data);
}

/// One direction's conv from `in` into `out` (fwd: x -> y; bwd_data: dy -> dx).
void run(OnednnBackend& be, ConvDir dir, const Tensor& in, const Tensor& w, Tensor& out) {
  const bool fwd = dir == ConvDir::fwd;
  const Tensor& act = fwd ? in : out;  // x or dx
  const Tensor& o = fwd ? out : in;    // y or dy
  WinoEntry& e = entry_for(be, dir, act, w, o);
  const WinogradF43Conv::Shape s = shape_of(dir, act, o);
  const WinogradF43Conv::WeightOrder order = order_of(dir, w);
  {
    OpProfiler::Scope timed(kWinoWeights, 0,
                            static_cast<double>(w.nbytes() + WinogradF43Conv::weight_bytes(s)),
                            nullptr);
    WinogradF43Conv::transform_weights_into(w.data_as<const float>(), s.c, s.k, order,
                                            e.u->data());
  }
  e.conv->run(in.data_as<const float>(), out.data_as<float>());
}

/// The weight gradient's products of a chunk of `rows` tiles: M (P, C, K) f32 = V^T Z, or +=
/// with `accumulate` (oneDNN's sum post-op), with V (P, rows, C) read transposed and Z (P,
/// rows, K) in `dt` (f32, or bf16 summed in f32), P the positions of a transformed tile.
Exec make_wgrad_matmul(OnednnBackend& be, int64_t positions, memory::data_type dt, int64_t c,
                       int64_t k, int64_t rows, bool accumulate) {
  const int64_t P = positions;
  const memory::desc a({P, c, rows}, dt, memory::dims{rows * c, 1, c});
  const memory::desc b({P, rows, k}, dt, memory::format_tag::abc);
  const memory::desc m({P, c, k}, memory::data_type::f32, memory::format_tag::abc);
  dnnl::primitive_attr attr = OnednnBackend::attr();
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, m), attr, be.engine());
  return be.make_exec(pd, dnnl::matmul(pd),
                      {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, m}});
}

/// The weight gradient of one shape: its chunks of tiles and their products (the first chunk's
/// writes M, the others' add to it); f32 as F(4x4, 3x3) (36 positions), bf16 as F(2x2, 3x3)
/// (16 positions).
struct WgradEntry : CacheEntry {
  WinogradF43Conv::Shape s;
  bool bf16 = false;  ///< F(2x2, 3x3) in bf16, else F(4x4, 3x3) in f32
  int64_t positions() const { return bf16 ? 16 : 36; }  ///< of a transformed tile
  int64_t elem() const { return bf16 ? 2 : 4; }         ///< bytes of a V or Z element
  int64_t tiles = 0, chunk = 0, chunks = 0, tail = 0;
  Exec mm_first, mm, mm_tail;
};

WgradEntry& wgrad_entry_for(OnednnBackend& be, const Tensor& x, const Tensor& dy,
                            const Tensor& dw) {
  const size_t chunk_bytes =
      g_wgrad_chunk_override ? g_wgrad_chunk_override
      : x.dtype() == DType::bf16 ? kWgradChunkBytesBf16
                                 : kWgradChunkBytes;
  Key k = key(Tag::conv_winograd).add(static_cast<int64_t>(ConvDir::bwd_weights)).add(x).add(
      dy).add(dw).add(static_cast<int64_t>(chunk_bytes));
  return be.cached<WgradEntry>(k, [&] {
    auto e = std::make_unique<WgradEntry>();
    e->s = shape_of(ConvDir::fwd, x, dy);
    const WinogradF43Conv::Shape& s = e->s;
    e->bf16 = x.dtype() == DType::bf16;
    e->tiles = e->bf16 ? WinogradF23Bf16::tiles(bf16_shape_of(ConvDir::fwd, x, dy))
                       : WinogradF43Conv::tiles(s);
    const int64_t row_bytes = e->positions() * (s.c + s.k) * e->elem();
    const int64_t most = std::max<int64_t>(g_wgrad_chunk_override ? 1 : kWgradMinChunkTiles,
                                           static_cast<int64_t>(chunk_bytes) / row_bytes);
    e->chunks = (e->tiles + most - 1) / most;
    e->chunk = (e->tiles + e->chunks - 1) / e->chunks;  // even chunks, the last no longer
    e->tail = e->tiles - (e->chunks - 1) * e->chunk;
    const auto dt = e->bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const int64_t P = e->positions();
    e->mm_first = make_wgrad_matmul(be, P, dt, s.c, s.k, e->chunk, false);
    if (e->chunks > 1) e->mm = make_wgrad_matmul(be, P, dt, s.c, s.k, e->chunk, true);
    if (e->tail != e->chunk) e->mm_tail = make_wgrad_matmul(be, P, dt, s.c, s.k, e->tail, true);
    return e;
  });
}

/// The conditions every direction shares: 3x3 weights, stride 1, pad 1, f32 NHWC activations
/// of equal size with C and K multiples of 8, and the policy (conv_own_winograd_allowed).
/// `act` is x or dx, `out` y or dy.
bool takes(const Conv2dParams& p, const Tensor& act, const Tensor& w, const Tensor& out) {
  return w.ndim() == 4 && w.h() == 3 && w.w() == 3 && p.stride == 1 && p.pad == 1 &&
         act.ndim() == 4 && out.ndim() == 4 && act.dtype() == DType::f32 &&
         w.dtype() == DType::f32 && out.dtype() == DType::f32 && act.layout() == Layout::NHWC &&
         out.layout() == Layout::NHWC && act.c() % 8 == 0 && out.c() % 8 == 0 &&
         act.h() == out.h() && act.w() == out.w() && conv_own_winograd_allowed();
}

/// The bf16 case of conv_as_own_winograd (fwd, bwd_data) and conv_bwd_weights_as_own_winograd
/// (bwd_weights: act x, w dw, out dy): 3x3, stride 1, pad 1, bf16 NHWC activations of equal
/// size, WinogradF23Bf16::worthwhile (C and K multiples of 16, enough tiles per thread; under
/// policy `matmul`, which the tests use on small shapes, ::fits) and the policy for the output
/// size.
bool takes_bf16(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                const Tensor& out) {
  if (act.ndim() != 4 || out.ndim() != 4) return false;
  const WinogradF23Bf16::Shape shape = bf16_shape_of(dir, act, out);
  return w.ndim() == 4 && w.h() == 3 && w.w() == 3 && p.stride == 1 && p.pad == 1 &&
         act.dtype() == DType::bf16 && w.dtype() == DType::bf16 && out.dtype() == DType::bf16 &&
         act.layout() == Layout::NHWC && out.layout() == Layout::NHWC && act.h() == out.h() &&
         act.w() == out.w() &&
         (conv_algo() == ConvAlgo::matmul ? WinogradF23Bf16::fits(shape)
                                          : WinogradF23Bf16::worthwhile(shape)) &&
         conv_own_winograd_bf16_allowed(ConvShapeInfo{act.c(), out.c(), 3, 1, out.h() * out.w()});
}

/// The bf16 direction `dir` from `in` into `out` (fwd: x -> y; bwd_data: dy -> dx).
void run_bf16(OnednnBackend& be, ConvDir dir, const Tensor& in, const Tensor& w, Tensor& out) {
  const bool fwd = dir == ConvDir::fwd;
  const Tensor& act = fwd ? in : out;  // x or dx
  const Tensor& o = fwd ? out : in;    // y or dy
  const WinogradF23Bf16::Shape s = bf16_shape_of(dir, act, o);
  Key k = key(Tag::conv_winograd).add(static_cast<int64_t>(dir)).add(act).add(w).add(o);
  auto& e = be.cached<WinoBf16Entry>(k, [&] {
    auto r = std::make_unique<WinoBf16Entry>();
    r->u.resize(WinogradF23Bf16::weight_elems(s));
    r->conv = std::make_unique<WinogradF23Bf16>(be.engine(), s);
    return r;
  });
  {
    OpProfiler::Scope timed(kWinoWeights, 0,
                            static_cast<double>(w.nbytes() + e.u.size() * sizeof(uint16_t)),
                            nullptr);
    WinogradF23Bf16::transform_weights_into(w.data_as<const uint16_t>(), s.c, s.k,
                                            order_of(dir, w), e.u.data());
  }
  e.conv->run(e.u.data(), in.data_as<const uint16_t>(), out.data_as<uint16_t>());
}

}  // namespace

bool conv_as_own_winograd(ConvDir dir, const Conv2dParams& p, const Tensor& act, const Tensor& w,
                          const Tensor& out) {
  if (act.dtype() == DType::bf16)
    return dir != ConvDir::bwd_weights && takes_bf16(dir, p, act, w, out);
  return dir != ConvDir::bwd_weights && takes(p, act, w, out) &&
         WinogradF43Conv::worthwhile(shape_of(dir, act, out));
}

void conv_fwd_own_winograd(OnednnBackend& be, const Conv2dParams&, const Tensor& x,
                           const Tensor& w, Tensor& y) {
  if (x.dtype() == DType::bf16) return run_bf16(be, ConvDir::fwd, x, w, y);
  run(be, ConvDir::fwd, x, w, y);
}

void conv_bwd_data_own_winograd(OnednnBackend& be, const Conv2dParams&, const Tensor& dy,
                                const Tensor& w, Tensor& dx) {
  if (dy.dtype() == DType::bf16) return run_bf16(be, ConvDir::bwd_data, dy, w, dx);
  run(be, ConvDir::bwd_data, dy, w, dx);
}

void set_winograd_wgrad_chunk_bytes(std::optional<size_t> bytes) {
  g_wgrad_chunk_override = bytes.value_or(0);
}

bool conv_bwd_weights_as_own_winograd(const Conv2dParams& p, const Tensor& x, const Tensor& dw,
                                      const Tensor& dy) {
  if (x.dtype() == DType::bf16) return takes_bf16(ConvDir::bwd_weights, p, x, dw, dy);
  return takes(p, x, dw, dy) &&
         WinogradF43Conv::weight_grad_worthwhile(shape_of(ConvDir::fwd, x, dy));
}

void conv_bwd_weights_own_winograd(OnednnBackend& be, const Conv2dParams&, const Tensor& x,
                                   const Tensor& dy, Tensor& dw) {
  WgradEntry& e = wgrad_entry_for(be, x, dy, dw);
  const WinogradF43Conv::Shape& s = e.s;
  const WinogradF23Bf16::Shape s2{s.n, s.c, s.k, s.h, s.w};
  const auto m_bytes = static_cast<size_t>(e.positions() * s.c * s.k) * sizeof(float);
  auto* m = static_cast<float*>(be.scratch(kScratchWeights, m_bytes));
  void* v = be.scratch(kScratchAct0, static_cast<size_t>(e.positions() * e.chunk * s.c * e.elem()));
  void* z = be.scratch(kScratchAct1, static_cast<size_t>(e.positions() * e.chunk * s.k * e.elem()));
  for (int64_t ch = 0; ch < e.chunks; ++ch) {
    const int64_t p0 = ch * e.chunk, rows = ch + 1 == e.chunks ? e.tail : e.chunk;
    {
      OpProfiler::Scope timed(
          kWinoWgradTiles, 0, static_cast<double>(e.positions() * rows * (s.c + s.k) * e.elem()),
          nullptr);
#pragma omp parallel
      {  // each thread its share of the chunk's tiles
        const int64_t nthr = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t a = rows * t / nthr, b = rows * (t + 1) / nthr;
        if (e.bf16) {
          WinogradF23Bf16::transform_input_tiles(s2, x.data_as<const uint16_t>(), p0 + a, b - a,
                                                 static_cast<uint16_t*>(v) + a * s.c, rows);
          WinogradF23Bf16::transform_output_grad_tiles(s2, dy.data_as<const uint16_t>(),
                                                       p0 + a, b - a,
                                                       static_cast<uint16_t*>(z) + a * s.k, rows);
        } else {
          WinogradF43Conv::transform_input_tiles(s, x.data_as<const float>(), p0 + a, b - a,
                                                 static_cast<float*>(v) + a * s.c, rows, true);
          WinogradF43Conv::transform_output_grad_tiles(s, dy.data_as<const float>(), p0 + a,
                                                       b - a, static_cast<float*>(z) + a * s.k,
                                                       rows);
        }
      }
    }
    Exec& mm = ch == 0 ? e.mm_first : rows == e.chunk ? e.mm : e.mm_tail;
    mm.set(DNNL_ARG_SRC, v);
    mm.set(DNNL_ARG_WEIGHTS, z);
    mm.set(DNNL_ARG_DST, m);
    be.run(mm);
  }
  using Order = WinogradF43Conv::WeightOrder;
  const Order order = dw.layout() == Layout::NHWC ? Order::ohwi : Order::oihw;
  if (e.bf16)
    WinogradF23Bf16::weight_grad_from_products(m, s.c, s.k, order, dw.data_as<uint16_t>());
  else
    WinogradF43Conv::weight_grad_from_products(m, s.c, s.k, order, dw.data_as<float>());
}

}  // namespace rn50::onednn
