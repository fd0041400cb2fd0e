// CUDA GEMM with bf16 inputs of kernels/cuda/cuda_ops.h (the twin of kernels/cpu/gemm_bf16.cpp): a and
// b rounded to bf16 (or their given bf16 copies), cuBLAS's bf16 tensor-core GEMM with fp32
// accumulation (CUBLAS_COMPUTE_32F), on gemm.cpp's handle (cublas_gemm.h).
#include <cublas_v2.h>

#include "core/error.h"
#include "kernels/cuda/bf16_operand.h"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace tessera::kernels::cuda {

using namespace cublas_gemm;

namespace {

void gemm_bf16_on(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c) {
  if (batch <= 0 || m <= 0 || n <= 0) return;
  if (k <= 0) {
    scale_only(beta, c, batch * m * n);
    finish("gemm_bf16");
    return;
  }
  const int mi = as_int(m, "m"), ni = as_int(n, "n"), ki = as_int(k, "k"), bi = as_int(batch, "batch");
  const int lda = trans_a ? mi : ki, ldb = trans_b ? ki : ni;
  const Bf16Operand a16(a, a_bits, batch * m * k), b16(b, b_bits, batch * k * n);
  TESSERA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_for_current_device(), op_of(trans_b), op_of(trans_a), ni, mi,
                                                  ki, &alpha, b16.bits(), CUDA_R_16BF, ldb, k * n, a16.bits(),
                                                  CUDA_R_16BF, lda, m * k, &beta, c, CUDA_R_32F, ni, m * n, bi,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  finish("gemm_bf16");
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c) {
  gemm_bf16_on(1, trans_a, trans_b, m, n, k, alpha, a, a_bits, b, b_bits, beta, c);
}

void gemm_batched_bf16(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, const float* b, float beta, float* c) {
  gemm_bf16_on(batch, trans_a, trans_b, m, n, k, alpha, a, nullptr, b, nullptr, beta, c);
}

}  // namespace tessera::kernels::cuda
