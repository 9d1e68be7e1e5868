// Helpers shared by the op tests: random host tensors, moving tensors to/from a backend's device,
// dtype conversion through the reference backend, and tolerance comparison in logical order.
// Only the public API (rn50/backend.h, rn50/tensor.h) is used, so the helpers work for any
// backend, including device backends.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rn50/backend.h"
#include "rn50/tensor.h"

namespace rn50::test {

/// The process-wide reference backend (host, float64 accumulation).
inline Backend& ref_backend() {
  static std::unique_ptr<Backend> b = make_backend("ref");
  return *b;
}

/// Host tensor of `shape` with elements drawn uniformly from [lo, hi] (f32 or f64).
inline Tensor random_tensor(std::vector<int64_t> shape, std::mt19937_64& rng, double lo = -1.0,
                            double hi = 1.0, DType dt = DType::f32, Layout layout = Layout::NCHW) {
  Tensor t = Tensor::empty(std::move(shape), dt, layout);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::f64)
      t.data_as<double>()[i] = u(rng);
    else
      t.data_as<float>()[i] = static_cast<float>(u(rng));
  }
  return t;
}

/// Host copy of a host tensor converted to dtype `dt` and layout `layout` (via the ref backend:
/// f32/f64/f16/bf16, round-to-nearest-even).
inline Tensor convert(const Tensor& host, DType dt, Layout layout) {
  Tensor out = Tensor::empty(host.shape(), dt, layout);
  ref_backend().copy(host, out);
  return out;
}
inline Tensor convert(const Tensor& host, DType dt) { return convert(host, dt, host.layout()); }

/// `host` rounded to dtype `dt` and back to its own dtype: exactly the values a backend that
/// stores the tensor in `dt` sees.
inline Tensor rounded(const Tensor& host, DType dt) {
  if (dt == host.dtype()) return host.clone();
  return convert(convert(host, dt), host.dtype());
}

/// A tensor on `be`'s device with the contents of the host tensor `host`, in dtype `dt` and
/// layout `layout` (converted on the host first, then copied with be.alloc + be.copy).
inline Tensor upload(Backend& be, const Tensor& host, DType dt, Layout layout) {
  Tensor h = convert(host, dt, layout);
  Tensor d = be.alloc(h.shape(), dt, layout);
  be.copy(h, d);
  return d;
}
inline Tensor upload(Backend& be, const Tensor& host) {
  return upload(be, host, host.dtype(), host.layout());
}

/// Host f64 NCHW copy of a tensor living on `be` (be.copy to a host tensor of the same dtype
/// and layout, then converted on the host).
inline Tensor download(Backend& be, const Tensor& dev) {
  Tensor h = Tensor::empty(dev.shape(), dev.dtype(), dev.layout());
  be.copy(dev, h);
  be.synchronize();
  return convert(h, DType::f64, Layout::NCHW);
}

/// A tensor of `shape` on `be` in dtype `dt` and layout `layout`, every element NaN: an output
/// that an op forgets to write (or accumulates into) fails the comparison.
inline Tensor nan_output(Backend& be, std::vector<int64_t> shape, DType dt,
                         Layout layout = Layout::NCHW) {
  Tensor h = Tensor::empty(std::move(shape), DType::f32, Layout::NCHW);
  h.fill(std::numeric_limits<double>::quiet_NaN());
  return upload(be, h, dt, layout);
}

/// Reference operand: an f64 host tensor in `layout` holding the values a backend that stores
/// `host` in dtype `dt` sees.
inline Tensor ref_input(const Tensor& host, DType dt, Layout layout) {
  return convert(rounded(host, dt), DType::f64, layout);
}

/// Tolerance |got - want| <= atol + rtol * |want|.
struct Tol {
  double atol = 0;
  double rtol = 0;
};

inline std::string index_str(const std::vector<int64_t>& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  std::string s = "(";
  for (size_t d = 0; d < idx.size(); ++d) {
    if (d) s += ',';
    s += std::to_string(idx[d]);
  }
  return s + ")";
}

/// Compares two host tensors of the same logical shape element by element in logical order
/// (layouts and float dtypes may differ). The effective absolute tolerance is
/// tol.atol * max(1, rms(want)), so that atol is relative to the typical magnitude of the
/// reference output (reductions over long axes produce large values). NaN never matches.
inline ::testing::AssertionResult all_close(const std::string& what, const Tensor& got,
                                            const Tensor& want, Tol tol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure()
           << what << ": shape mismatch, got " << got.str() << " want " << want.str();
  Tensor g = convert(got, DType::f64, Layout::NCHW), w = convert(want, DType::f64, Layout::NCHW);
  const double* gp = g.data_as<double>();
  const double* wp = w.data_as<double>();
  const int64_t n = g.numel();
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += wp[i] * wp[i];
  const double rms = n ? std::sqrt(ss / static_cast<double>(n)) : 0.0;
  const double atol = tol.atol * std::max(1.0, rms);
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0, max_err = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(gp[i] - wp[i]);
    const double allowed = atol + tol.rtol * std::fabs(wp[i]);
    if (!(err <= allowed)) {
      ++bad;
      const double ratio = std::isnan(err) ? INFINITY : err / std::max(allowed, 1e-300);
      if (worst < 0 || ratio > worst_ratio) {
        worst_ratio = ratio;
        worst = i;
      }
    }
    if (!std::isnan(err)) max_err = std::max(max_err, err);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << n << " elements outside |got - want| <= " << atol << " + "
     << tol.rtol << " * |want| (atol " << tol.atol << " x max(1, rms " << rms << ")); worst at "
     << index_str(g.shape(), worst) << ": got " << gp[worst] << " want " << wp[worst]
     << "; max abs error " << max_err << "  [got " << got.str() << ", want " << want.str() << "]";
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace rn50::test
