// rn50 reference backend: elementwise ops. Operands have identical logical shapes (any rank);
// 4-D operands may each be NCHW or NHWC. Computed on logical element order.
//   relu:     y = max(x, 0);           backward dx = dy * (y > 0)  (torch threshold_backward)
//   add:      y = a + b
//   add_relu: y = max(a + b, 0);       backward is relu_bwd on y (for both a and b)
//   add_relu_bwd: dx = y > 0 ? g1 + g2 : 0 (relu_bwd of a join whose gradient came in two parts)
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/ref/ref_util.h"

namespace rn50::ref {

namespace {
void check_same(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b) {
  check_float(op, an, a);
  check_float(op, bn, b);
  RN50_CHECK(a.same_shape(b), "ref {}: {} {} and {} {} differ in shape", op, an, a.str(), bn,
             b.str());
}
}  // namespace

void RefBackend::relu_fwd(const Tensor& x, Tensor& y) {
  check_same("relu_fwd", "x", x, "y", y);
  std::vector<double> v = load(x);
  for (double& e : v) e = e > 0 ? e : 0.0;
  store(v, y);
}

void RefBackend::relu_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_same("relu_bwd", "y", y, "dy", dy);
  check_same("relu_bwd", "y", y, "dx", dx);
  const std::vector<double> Y = load(y);
  std::vector<double> v = load(dy);
  for (size_t i = 0; i < v.size(); ++i) v[i] = Y[i] > 0 ? v[i] : 0.0;
  store(v, dx);
}

void RefBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_same("add", "a", a, "b", b);
  check_same("add", "a", a, "y", y);
  std::vector<double> v = load(a);
  const std::vector<double> B = load(b);
  for (size_t i = 0; i < v.size(); ++i) v[i] += B[i];
  store(v, y);
}

void RefBackend::add_relu_bwd(const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& dx) {
  check_same("add_relu_bwd", "y", y, "g1", g1);
  check_same("add_relu_bwd", "y", y, "g2", g2);
  check_same("add_relu_bwd", "y", y, "dx", dx);
  const std::vector<double> Y = load(y), B = load(g2);
  std::vector<double> v = load(g1);
  for (size_t i = 0; i < v.size(); ++i) v[i] = Y[i] > 0 ? v[i] + B[i] : 0.0;
  store(v, dx);
}

void RefBackend::add_relu_fwd(const Tensor& a, const Tensor& b, Tensor& y) {
  check_same("add_relu_fwd", "a", a, "b", b);
  check_same("add_relu_fwd", "a", a, "y", y);
  std::vector<double> v = load(a);
  const std::vector<double> B = load(b);
  for (size_t i = 0; i < v.size(); ++i) {
    const double s = v[i] + B[i];
    v[i] = s > 0 ? s : 0.0;
  }
  store(v, y);
}

}  // namespace rn50::ref
