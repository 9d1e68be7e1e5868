// rn50 data: Pillow-exact antialiased bilinear resampling (see resize.h for the algorithm).
//
// Bit-exactness with Pillow needs the double-precision coefficient arithmetic evaluated exactly
// as written: no fused multiply-add contraction (GCC contracts a*b+c by default under
// -march=native, Debian's Pillow is built for baseline x86-64 without FMA).
#include "data/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

#pragma GCC optimize("fp-contract=off")  // applies to the functions below

namespace rn50::data {
namespace {

/// Pillow: PRECISION_BITS = 32 - 8 - 2 fractional bits for the fixed-point weights.
constexpr int kPrecisionBits = 22;

/// Pillow's bilinear_filter: the triangle 1 - |x| on [-1, 1].
inline double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/// Pillow's clip8: drop the fraction (arithmetic shift) and clamp to 0..255.
inline uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

/// Fixed-point filter taps of one axis for output indices [out_first, out_first + n).
struct AxisCoeffs {
  int ksize = 0;
  std::vector<int> first;  ///< first source index read by each output index
  std::vector<int> count;  ///< number of taps
  std::vector<int32_t> k;  ///< ksize weights per output index (count used)
};

/// Pillow's precompute_coeffs + normalize_coeffs_8bpc for BILINEAR, restricted to a range of
/// output indices (each index's taps depend on that index only).
void precompute(int in_size, float in0, float in1, int out_size, int out_first, int n,
                AxisCoeffs& c) {
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // bilinear support 1, widened when downscaling
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(n));
  c.count.resize(static_cast<size_t>(n));
  c.k.assign(static_cast<size_t>(n) * c.ksize, 0);
  std::vector<double> w(static_cast<size_t>(c.ksize));
  for (int i = 0; i < n; ++i) {
    const int xx = out_first + i;
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[static_cast<size_t>(x)] = triangle((x + xmin - center + 0.5) * ss);
      ww += w[static_cast<size_t>(x)];
    }
    int32_t* k = &c.k[static_cast<size_t>(i) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      double v = w[static_cast<size_t>(x)];
      if (ww != 0.0) v /= ww;
      k[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[static_cast<size_t>(i)] = xmin;
    c.count[static_cast<size_t>(i)] = std::max(xmax, 0);
  }
}

/// Outputs [x0, x1) of one row of the horizontal pass, each computed over exactly K taps. Taps
/// past an output's `count` have weight 0 (precompute zero-fills), so they add nothing to the
/// exact integer sum; the caller guarantees first[x] + K <= the row width (reads stay inside).
template <int K>
void horizontal_row_fixed(const uint8_t* s, const int* first, const int32_t* kk, int x0, int x1,
                          uint8_t* d) {
  for (int x = x0; x < x1; ++x) {
    const int32_t* k = kk + static_cast<ptrdiff_t>(x) * K;
    const uint8_t* p = s + 3 * first[x];
    int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
    for (int t = 0; t < K; ++t) {
      s0 += p[3 * t + 0] * k[t];
      s1 += p[3 * t + 1] * k[t];
      s2 += p[3 * t + 2] * k[t];
    }
    d[3 * x + 0] = clip8(s0);
    d[3 * x + 1] = clip8(s1);
    d[3 * x + 2] = clip8(s2);
  }
}

/// Outputs [x0, x1) of one row of the horizontal pass, each over its own `count` taps.
void horizontal_row_generic(const uint8_t* s, const int* first, const int* count, const int32_t* kk,
                            int ksize, int x0, int x1, uint8_t* d) {
  for (int x = x0; x < x1; ++x) {
    const int32_t* k = kk + static_cast<ptrdiff_t>(x) * ksize;
    const uint8_t* p = s + 3 * first[x];
    int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
    for (int t = 0, n = count[x]; t < n; ++t, p += 3) {
      s0 += p[0] * k[t];
      s1 += p[1] * k[t];
      s2 += p[2] * k[t];
    }
    d[3 * x + 0] = clip8(s0);
    d[3 * x + 1] = clip8(s1);
    d[3 * x + 2] = clip8(s2);
  }
}

/// Horizontal pass: rows [row0, row0 + nrows) of `src`, output columns described by `c`, into
/// dst (3 * c.first.size() bytes per row, dst_stride apart). Outputs whose fixed-size tap window
/// fits inside the row use an unrolled loop (ksize 3, 5, 7: up to 3x downscaling; ~25% faster);
/// the few at the right edge, and wider filters, use the per-output tap count. The integer sums
/// are the same either way.
void horizontal_pass(const RgbView& src, int row0, int nrows, const AxisCoeffs& c, uint8_t* dst,
                     ptrdiff_t dst_stride) {
  const int ow = static_cast<int>(c.first.size());
  const int* first = c.first.data();
  const int* count = c.count.data();
  const int32_t* kk = c.k.data();
  const int ksize = c.ksize;
  // first[] is non-decreasing: outputs [0, fast_end) can read ksize taps without leaving the row.
  int fast_end = 0;
  if (ksize <= 7) {
    while (fast_end < ow && first[fast_end] + ksize <= src.width) ++fast_end;
  }
  for (int r = 0; r < nrows; ++r) {
    const uint8_t* s = src.data + (row0 + r) * src.stride;
    uint8_t* d = dst + r * dst_stride;
    switch (ksize) {
      case 3:
        horizontal_row_fixed<3>(s, first, kk, 0, fast_end, d);
        break;
      case 5:
        horizontal_row_fixed<5>(s, first, kk, 0, fast_end, d);
        break;
      case 7:
        horizontal_row_fixed<7>(s, first, kk, 0, fast_end, d);
        break;
      default:
        break;
    }
    horizontal_row_generic(s, first, count, kk, ksize, fast_end, ow, d);
  }
}

/// Vertical pass: `in` holds rows starting at source row `row0` (in_stride apart), `width`
/// pixels each; output rows described by `c` go to dst.
void vertical_pass(const uint8_t* in, ptrdiff_t in_stride, int row0, int width, const AxisCoeffs& c,
                   uint8_t* dst, ptrdiff_t dst_stride) {
  thread_local std::vector<int32_t> acc;
  const int n = 3 * width;
  acc.resize(static_cast<size_t>(n));
  int32_t* a = acc.data();
  const int oh = static_cast<int>(c.first.size());
  for (int y = 0; y < oh; ++y) {
    std::fill(a, a + n, 1 << (kPrecisionBits - 1));
    const int32_t* k = &c.k[static_cast<size_t>(y) * c.ksize];
    const uint8_t* row = in + (c.first[static_cast<size_t>(y)] - row0) * in_stride;
    for (int t = 0, taps = c.count[static_cast<size_t>(y)]; t < taps; ++t, row += in_stride) {
      const int32_t kt = k[t];
      for (int i = 0; i < n; ++i) a[i] += row[i] * kt;  // int32 sums: order does not matter
    }
    uint8_t* d = dst + y * dst_stride;
    for (int i = 0; i < n; ++i) d[i] = clip8(a[i]);
  }
}

}  // namespace

void resize_bilinear_aa(const RgbView& src, int out_w, int out_h, const ResizeBox* box,
                        const Rect& window, uint8_t* dst, ptrdiff_t dst_stride) {
  RN50_CHECK(src.width > 0 && src.height > 0 && src.data != nullptr,
             "resize: empty source image ({}x{})", src.width, src.height);
  RN50_CHECK(out_w > 0 && out_h > 0, "resize: invalid output size {}x{}", out_w, out_h);
  RN50_CHECK(window.x >= 0 && window.y >= 0 && window.w > 0 && window.h > 0 &&
                 window.x + window.w <= out_w && window.y + window.h <= out_h,
             "resize: output window {}x{}+{}+{} outside the {}x{} output", window.w, window.h,
             window.x, window.y, out_w, out_h);
  const ResizeBox b =
      box ? *box
          : ResizeBox{0.f, 0.f, static_cast<float>(src.width), static_cast<float>(src.height)};
  RN50_CHECK(b.x0 >= 0 && b.y0 >= 0 && b.x1 <= src.width && b.y1 <= src.height && b.x1 > b.x0 &&
                 b.y1 > b.y0,
             "resize: box ({}, {}, {}, {}) is empty or outside the {}x{} source", b.x0, b.y0, b.x1,
             b.y1, src.width, src.height);

  // Pillow (ImagingResampleInner) skips a pass whose axis keeps its size over the whole image.
  const bool need_h = out_w != src.width || b.x0 != 0 || b.x1 != src.width;
  const bool need_v = out_h != src.height || b.y0 != 0 || b.y1 != src.height;

  thread_local AxisCoeffs ch, cv;
  if (!need_h && !need_v) {
    for (int y = 0; y < window.h; ++y) {
      std::copy_n(src.data + (window.y + y) * src.stride + 3 * window.x, 3 * window.w,
                  dst + y * dst_stride);
    }
    return;
  }
  if (!need_v) {  // horizontal only: straight into dst
    precompute(src.width, b.x0, b.x1, out_w, window.x, window.w, ch);
    horizontal_pass(src, window.y, window.h, ch, dst, dst_stride);
    return;
  }
  precompute(src.height, b.y0, b.y1, out_h, window.y, window.h, cv);
  if (!need_h) {  // vertical only: read the source columns of the window directly
    vertical_pass(src.data + 3 * window.x, src.stride, 0, window.w, cv, dst, dst_stride);
    return;
  }
  // Both passes: the horizontal pass covers just the source rows the vertical taps read
  // (first/count are monotonic in the output index).
  const int row0 = cv.first.front();
  const int row1 = cv.first.back() + cv.count.back();
  precompute(src.width, b.x0, b.x1, out_w, window.x, window.w, ch);
  thread_local std::vector<uint8_t> tmp;
  const ptrdiff_t tstride = ptrdiff_t{window.w} * 3;
  tmp.resize(static_cast<size_t>(std::max(row1 - row0, 0)) * static_cast<size_t>(tstride));
  horizontal_pass(src, row0, row1 - row0, ch, tmp.data(), tstride);
  vertical_pass(tmp.data(), tstride, row0, window.w, cv, dst, dst_stride);
}

Image resize_bilinear_aa(const Image& src, int out_w, int out_h, std::optional<ResizeBox> box) {
  Image out;
  out.width = out_w;
  out.height = out_h;
  RN50_CHECK(out_w > 0 && out_h > 0, "resize: invalid output size {}x{}", out_w, out_h);
  out.pixels.resize(static_cast<size_t>(out_w) * out_h * 3);
  resize_bilinear_aa(view_of(src), out_w, out_h, box ? &*box : nullptr, Rect{0, 0, out_w, out_h},
                     out.pixels.data(), ptrdiff_t{out_w} * 3);
  return out;
}

}  // namespace rn50::data
