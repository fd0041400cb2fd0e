// GEMM on the CPU: row-major cblas_sgemm, single and batched.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {

// c[m, n] *= beta (k == 0: the product is empty); beta == 0 overwrites, as BLAS does.
void scale_only(int64_t m, int64_t n, float beta, float* c) {
  const int64_t total = m * n;
  if (beta == 0.0f) {
    std::fill(c, c + total, 0.0f);
  } else if (beta != 1.0f) {
#pragma omp parallel for simd if (total > (1 << 16))
    for (int64_t i = 0; i < total; ++i) c[i] *= beta;
  }
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           const float* b, float beta, float* c) {
  const blasint lda = static_cast<blasint>(std::max<int64_t>(1, trans_a ? m : k));
  const blasint ldb = static_cast<blasint>(std::max<int64_t>(1, trans_b ? k : n));
  const blasint ldc = static_cast<blasint>(std::max<int64_t>(1, n));
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, lda, b,
              ldb, beta, c, ldc);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c);
  sgemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

// One product after another, each using every thread. Measured against one OpenMP loop over the
// batch with OpenBLAS single-threaded inside, that was slower in every shape tried (2 cores,
// OpenBLAS 0.3.21 OpenMP build: 48 x 128x128x64 1.36 vs 0.93 ms, 8 x 256^3 1.66 vs 1.20 ms).
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) return scale_only(batch * m, n, beta, c);
  for (int64_t i = 0; i < batch; ++i)
    sgemm(trans_a, trans_b, m, n, k, alpha, a + i * m * k, b + i * k * n, beta, c + i * m * n);
}

}  // namespace tessera::kernels::cpu
