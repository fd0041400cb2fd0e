// What the cuBLAS GEMMs (gemm.cpp, gemm_bf16.cpp) share, defined in gemm.cpp: the current device's
// handle, bound to op_stream(); sizes checked into cuBLAS's ints; the transpose flag; the empty
// product (k = 0) as c = beta * c.
#pragma once
#include <cublas_v2.h>

#include <cstdint>

namespace tessera::kernels::cuda::cublas_gemm {

cublasHandle_t handle_for_current_device();
int as_int(int64_t v, const char* what);
inline cublasOperation_t op_of(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }
void scale_only(float beta, float* c, int64_t count);

}  // namespace tessera::kernels::cuda::cublas_gemm
