// rn50 CUDA backend: the fully connected layer (torch.nn.Linear) on cuBLASLt.
//   forward   y = x w^T + b         x (N,C), w (K,C), b (K), y (N,K)
//   backward  dx = dy w  (skipped when dx is undefined),  dw = dy^T x,  db = sum_n dy
// All row-major, all outputs overwritten.
//
// cuBLASLt is column-major; a row-major (R, S) matrix is the column-major S x R matrix with
// leading dimension S, i.e. its transpose. So (column-major views, ^T = CUBLAS_OP_T):
//   y^T  (K x N) = w_cm^T (K x C) * x_cm  (C x N)     A = w (C x K, ld C) op T, B = x op N
//   dx^T (C x N) = w_cm   (C x K) * dy_cm (K x N)     A = w op N, B = dy (K x N, ld K) op N
//   dw^T (C x K) = x_cm   (C x N) * dy_cm^T (N x K)   A = x (C x N, ld C) op N, B = dy op T
// The bias is written into y first (linear_bias_fill) and the forward matmul accumulates onto
// it with beta = 1 (C == D, in place), so y is rounded once; db is a column-sum kernel
// (linear_bias_grad). Both kernels are in linear_kernels.cu.
//
// Dtypes: the compute dtype T is x's (F32, F16 or BF16); the other matmul inputs (w, dy) are
// converted to T in linear_scratch when they differ. Outputs of dtype T or F32 are written by
// cuBLASLt directly (A/B 16-bit with C/D F32 is a supported combination); others go through an
// F32 scratch matrix and a conversion. Compute type CUBLAS_COMPUTE_32F_FAST_TF32 for F32 when
// TF32 is allowed, CUBLAS_COMPUTE_32F otherwise (and for F16 / BF16), scale type F32.
//
// Plans (matmul descriptor, matrix layouts and the heuristic's algorithm) are cached per
// (direction, shapes, dtypes, operand alignments) in CudaBackend::linear_plans; the shared
// workspace and linear_scratch grow on a key's first call only.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/plans.h"
#include "core/check.h"

namespace rn50::cuda {

// Defined in linear_kernels.cu.
void linear_bias_fill(const void* b, DType bt, void* y, DType yt, int64_t N, int64_t K,
                      cudaStream_t stream);
void linear_bias_grad(const void* dy, DType dyt, void* db, DType dbt, int64_t N, int64_t K,
                      cudaStream_t stream);

LinearPlan::~LinearPlan() {
  if (d) (void)cublasLtMatrixLayoutDestroy(d);
  if (b) (void)cublasLtMatrixLayoutDestroy(b);
  if (a) (void)cublasLtMatrixLayoutDestroy(a);
  if (desc) (void)cublasLtMatmulDescDestroy(desc);
}

namespace {

/// Largest cuBLASLt workspace the heuristic may ask for (NVIDIA recommends 32 MiB on Hopper).
constexpr uint64_t kMatmulWorkspaceCap = uint64_t{32} << 20;

bool is_compute_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

/// A column-major matrix operand: pointer, dtype, stored rows x cols, leading dimension.
struct Mat {
  const void* ptr;
  DType dt;
  int64_t rows, cols, ld;
};

/// RAII for the heuristic preference (only needed while a plan is built).
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() {
    if (p) (void)cublasLtMatmulPreferenceDestroy(p);
  }
};

/// D = op(A) op(B) + beta * D (cuBLASLt, column-major, C == D), with a cached plan.
/// D is rows(D) x cols(D); op(A) is rows(D) x k and op(B) is k x cols(D).
void matmul(CudaBackend& be, const char* op, cublasOperation_t ta, const Mat& A,
            cublasOperation_t tb, const Mat& B, const Mat& D, float beta) {
  const std::string key = fmt::format(
      "{} {}{} {}x{}/{}@{} {}{} {}x{}/{}@{} {} {}x{}/{}@{} b{}", op, ta == CUBLAS_OP_T ? "T" : "N",
      dtype_name(A.dt), A.rows, A.cols, A.ld, alignment(A.ptr), tb == CUBLAS_OP_T ? "T" : "N",
      dtype_name(B.dt), B.rows, B.cols, B.ld, alignment(B.ptr), dtype_name(D.dt), D.rows, D.cols,
      D.ld, alignment(D.ptr), beta);
  auto it = be.linear_plans.find(key);
  if (it == be.linear_plans.end()) {
    auto plan = std::make_unique<LinearPlan>();
    const cublasComputeType_t ct = A.dt == DType::f32 && be.allow_tf32()
                                       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                       : CUBLAS_COMPUTE_32F;
    RN50_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, ct, CUDA_R_32F));
    const int32_t opa = ta, opb = tb;
    RN50_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &opa, sizeof(opa)));
    RN50_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &opb, sizeof(opb)));
    RN50_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_dtype(A.dt), uint64_t(A.rows),
                                                 uint64_t(A.cols), A.ld));
    RN50_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_dtype(B.dt), uint64_t(B.rows),
                                                 uint64_t(B.cols), B.ld));
    RN50_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, cuda_dtype(D.dt), uint64_t(D.rows),
                                                 uint64_t(D.cols), D.ld));
    Pref pref;
    RN50_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t cap = kMatmulWorkspaceCap;
    RN50_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof(cap)));
    const uint32_t al_a = alignment(A.ptr), al_b = alignment(B.ptr), al_d = alignment(D.ptr);
    RN50_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    RN50_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    RN50_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
    RN50_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(be.cublaslt(), plan->desc, plan->a, plan->b, plan->d,
                                       plan->d, pref.p, 1, &res, &found);
    RN50_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS,
               "cuda {}: cuBLASLt has no algorithm for A {} {} {}x{} (ld {}), B {} {} {}x{} "
               "(ld {}), D {} {}x{} (ld {}) ({}; {} results)",
               op, ta == CUBLAS_OP_T ? "T" : "N", dtype_name(A.dt), A.rows, A.cols, A.ld,
               tb == CUBLAS_OP_T ? "T" : "N", dtype_name(B.dt), B.rows, B.cols, B.ld,
               dtype_name(D.dt), D.rows, D.cols, D.ld, cublasLtGetStatusString(st), found);
    plan->algo = res.algo;
    plan->ws_bytes = res.workspaceSize;
    it = be.linear_plans.emplace(key, std::move(plan)).first;
  }
  const LinearPlan& plan = *it->second;
  void* ws = be.workspace.ensure(plan.ws_bytes);
  const float alpha = 1.f;
  RN50_CUBLAS_CHECK(cublasLtMatmul(be.cublaslt(), plan.desc, &alpha, A.ptr, plan.a, B.ptr,
                                   plan.b, &beta, D.ptr, plan.d, const_cast<void*>(D.ptr),
                                   plan.d, &plan.algo, ws, plan.ws_bytes, be.stream()));
}

/// Carves linear_scratch into 256-byte aligned regions for one call. Regions are requested in
/// a fixed order that depends only on shapes and dtypes, so after a key's first call the
/// scratch never grows.
class Scratch {
 public:
  /// Reserves `bytes`; returns the region's offset.
  size_t reserve(size_t bytes) {
    const size_t off = total_;
    total_ += (bytes + 255) / 256 * 256;
    return off;
  }
  /// Grows the buffer to the reserved total; returns its base.
  char* base(DeviceBuffer& buf) const { return static_cast<char*>(buf.ensure(total_)); }

 private:
  size_t total_ = 0;
};

/// Checks that t is an F32/F16/BF16 tensor on the backend's device of exactly `shape`.
void check_2d(const CudaBackend& be, const char* op, const char* name, const Tensor& t,
              const std::vector<int64_t>& shape) {
  be.check_device(op, name, t);
  if (t.shape() == shape && is_compute_dtype(t.dtype())) return;
  std::string want;
  for (int64_t d : shape) {
    if (!want.empty()) want += ',';
    want += std::to_string(d);
  }
  RN50_FAIL("cuda {}: {} is {}, expected F32/F16/BF16 of shape [{}]", op, name, t.str(), want);
}

/// (N, C, K) of an fc layer with x (N,C) and w (K,C), both checked (device, dtype, shape).
std::array<int64_t, 3> linear_dims(const CudaBackend& be, const char* op, const Tensor& x,
                                   const Tensor& w) {
  be.check_device(op, "x", x);
  be.check_device(op, "w", w);
  RN50_CHECK(x.ndim() == 2 && w.ndim() == 2 && w.dim(1) == x.dim(1),
             "cuda {}: x {} does not match w {} (x (N,C), w (K,C))", op, x.str(), w.str());
  const int64_t N = x.dim(0), C = x.dim(1), K = w.dim(0);
  check_2d(be, op, "x", x, {N, C});
  check_2d(be, op, "w", w, {K, C});
  return {N, C, K};
}

}  // namespace

void CudaBackend::linear_fwd(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_fwd";
  const auto [N, C, K] = linear_dims(*this, op, x, w);
  check_2d(*this, op, "b", b, {K});
  check_2d(*this, op, "y", y, {N, K});
  if (N == 0 || K == 0) return;
  const DType T = x.dtype();
  const bool conv_w = w.dtype() != T;
  const bool tmp_y = y.dtype() != T && y.dtype() != DType::f32;
  const DType yt = tmp_y ? DType::f32 : y.dtype();

  Scratch sc;
  const size_t w_off = conv_w ? sc.reserve(w.numel() * dtype_size(T)) : 0;
  const size_t y_off = tmp_y ? sc.reserve(y.numel() * dtype_size(DType::f32)) : 0;
  char* base = sc.base(linear_scratch);
  const void* wp = w.data();
  if (conv_w) {
    Tensor wt = Tensor::view(base + w_off, w.shape(), T, Layout::NCHW, device());
    convert_on_device(w, wt);
    wp = wt.data();
  }
  void* yp = tmp_y ? static_cast<void*>(base + y_off) : y.data();

  linear_bias_fill(b.data(), b.dtype(), yp, yt, N, K, stream_);
  if (C > 0)
    matmul(*this, op, CUBLAS_OP_T, Mat{wp, T, C, K, C}, CUBLAS_OP_N, Mat{x.data(), T, C, N, C},
           Mat{yp, yt, K, N, K}, 1.f);
  if (tmp_y) {
    Tensor yt_view = Tensor::view(yp, y.shape(), DType::f32, Layout::NCHW, device());
    convert_on_device(yt_view, y);
  }
}

void CudaBackend::linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                             Tensor& dw, Tensor& db) {
  const char* op = "linear_bwd";
  const auto [N, C, K] = linear_dims(*this, op, x, w);
  check_2d(*this, op, "dy", dy, {N, K});
  check_2d(*this, op, "dw", dw, {K, C});
  check_2d(*this, op, "db", db, {K});
  const bool want_dx = dx.defined();
  if (want_dx) check_2d(*this, op, "dx", dx, {N, C});
  const DType T = x.dtype();
  auto direct = [&](const Tensor& t) { return t.dtype() == T || t.dtype() == DType::f32; };

  // Scratch regions: w and dy in T when they differ, F32 outputs for other output dtypes.
  Scratch sc;
  const bool conv_w = want_dx && w.dtype() != T, conv_dy = dy.dtype() != T;
  const bool tmp_dx = want_dx && !direct(dx), tmp_dw = !direct(dw);
  const size_t w_off = conv_w ? sc.reserve(w.numel() * dtype_size(T)) : 0;
  const size_t dy_off = conv_dy ? sc.reserve(dy.numel() * dtype_size(T)) : 0;
  const size_t dx_off = tmp_dx ? sc.reserve(dx.numel() * sizeof(float)) : 0;
  const size_t dw_off = tmp_dw ? sc.reserve(dw.numel() * sizeof(float)) : 0;
  char* base = sc.base(linear_scratch);
  auto as_t = [&](const Tensor& t, bool conv, size_t off) -> const void* {
    if (!conv) return t.data();
    Tensor v = Tensor::view(base + off, t.shape(), T, Layout::NCHW, device());
    convert_on_device(t, v);
    return v.data();
  };
  const void* dyp = as_t(dy, conv_dy, dy_off);

  // db = column sums of dy (read in its own dtype).
  linear_bias_grad(dy.data(), dy.dtype(), db.data(), db.dtype(), N, K, stream_);

  // dw^T (C x K) = x_cm (C x N) * dy_cm^T (N x K); with N == 0 the sum is empty: dw = 0.
  void* dwp = tmp_dw ? static_cast<void*>(base + dw_off) : dw.data();
  const DType dwt = tmp_dw ? DType::f32 : dw.dtype();
  if (N > 0 && C > 0 && K > 0)
    matmul(*this, "linear_bwd_weights", CUBLAS_OP_N, Mat{x.data(), T, C, N, C}, CUBLAS_OP_T,
           Mat{dyp, T, K, N, K}, Mat{dwp, dwt, C, K, C}, 0.f);
  else if (dw.numel() > 0)
    RN50_CUDA_CHECK(cudaMemsetAsync(dwp, 0, dw.numel() * dtype_size(dwt), stream_));
  if (tmp_dw) {
    Tensor v = Tensor::view(dwp, dw.shape(), DType::f32, Layout::NCHW, device());
    convert_on_device(v, dw);
  }

  if (!want_dx) return;
  // dx^T (C x N) = w_cm (C x K) * dy_cm (K x N); with K == 0: dx = 0.
  const void* wp = as_t(w, conv_w, w_off);
  void* dxp = tmp_dx ? static_cast<void*>(base + dx_off) : dx.data();
  const DType dxt = tmp_dx ? DType::f32 : dx.dtype();
  if (N > 0 && C > 0 && K > 0)
    matmul(*this, "linear_bwd_data", CUBLAS_OP_N, Mat{wp, T, C, K, C}, CUBLAS_OP_N,
           Mat{dyp, T, K, N, K}, Mat{dxp, dxt, C, N, C}, 0.f);
  else if (dx.numel() > 0)
    RN50_CUDA_CHECK(cudaMemsetAsync(dxp, 0, dx.numel() * dtype_size(dxt), stream_));
  if (tmp_dx) {
    Tensor v = Tensor::view(dxp, dx.shape(), DType::f32, Layout::NCHW, device());
    convert_on_device(v, dx);
  }
}

}  // namespace rn50::cuda
