// CUDA GEMM of kernels/cuda/cuda_ops.h through cuBLAS (the twin of kernels/cpu/gemm.cpp), row-major
// as column-major C^T = op(B)^T op(A)^T; fp32 math without TF32. One lazily created handle per
// device, bound to op_stream(), shared with gemm_bf16.cpp (cublas_gemm.h).
#include <cublas_v2.h>

#include <climits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace tessera::kernels::cuda {
namespace {

// A cuBLAS handle on the device current at construction. CUBLAS_DEFAULT_MATH computes fp32 GEMMs in
// fp32 (TF32 tensor cores only come with CUBLAS_TF32_TENSOR_OP_MATH), for parity with the CPU kernels.
class CublasHandle {
 public:
  CublasHandle() {
    TESSERA_CUBLAS_CHECK(cublasCreate(&handle_));
    TESSERA_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    TESSERA_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
  }
  ~CublasHandle() { (void)cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace

namespace cublas_gemm {

// The current device's handle, bound to op_stream(). The handles are a per-process cache of
// device resources (created on first use, destroyed at exit), not state that changes results.
cublasHandle_t handle_for_current_device() {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));  // first, so the runtime outlives the handles at exit
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CublasHandle>> handles;
  std::lock_guard<std::mutex> lock(mutex);
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(device + 1);
  if (!handles[device]) handles[device] = std::make_unique<CublasHandle>();
  const cublasHandle_t handle = handles[device]->get();
  TESSERA_CUBLAS_CHECK(cublasSetStream(handle, op_stream()));
  return handle;
}

int as_int(int64_t v, const char* what) {
  TESSERA_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// With k = 0 the product is empty: c = beta * c (beta = 0 overwrites, NaN included).
void scale_only(float beta, float* c, int64_t count) {
  if (beta == 0.0f) TESSERA_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(count) * sizeof(float), op_stream()));
  else if (beta != 1.0f) scale_inplace(c, beta, count);
}

}  // namespace cublas_gemm

using namespace cublas_gemm;

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
          float beta, float* c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    scale_only(beta, c, m * n);
    finish("gemm");
    return;
  }
  const int mi = as_int(m, "m"), ni = as_int(n, "n"), ki = as_int(k, "k");
  const int lda = trans_a ? mi : ki, ldb = trans_b ? ki : ni;
  TESSERA_CUBLAS_CHECK(cublasSgemm(handle_for_current_device(), op_of(trans_b), op_of(trans_a), ni, mi, ki, &alpha, b,
                                   ldb, a, lda, &beta, c, ni));
  finish("gemm");
}

void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  if (batch <= 0 || m <= 0 || n <= 0) return;
  if (k <= 0) {
    scale_only(beta, c, batch * m * n);
    finish("gemm_batched");
    return;
  }
  const int mi = as_int(m, "m"), ni = as_int(n, "n"), ki = as_int(k, "k"), bi = as_int(batch, "batch");
  const int lda = trans_a ? mi : ki, ldb = trans_b ? ki : ni;
  TESSERA_CUBLAS_CHECK(cublasSgemmStridedBatched(handle_for_current_device(), op_of(trans_b), op_of(trans_a), ni, mi,
                                                 ki, &alpha, b, ldb, k * n, a, lda, m * k, &beta, c, ni, m * n, bi));
  finish("gemm_batched");
}

}  // namespace tessera::kernels::cuda
