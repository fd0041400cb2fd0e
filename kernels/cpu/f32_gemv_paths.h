// The decode step's f32 product, y = W x for one activation row with W [rows, cols] f32 (generate's
// f32 weights at batch 1): on AVX-512 a register-tile GEMV that streams W once with a software
// prefetch a tile ahead (f32_gemv_avx512.cpp), chosen where the quantised matmuls take their
// AVX-512 path (quant_best_path: the kernel copies run AVX-512 and the CPU has it); elsewhere the
// GEMM library's sgemm at m = 1. Either way y is the K products x_k w_k summed in f32 in some order:
//   |y - sum_k x_k w_k| <= gamma_K sum_k |x_k w_k|   (tests/unit/test_kernels_f32_gemv.cpp).
#pragma once
#include <cstdint>

namespace tessera::kernels::cpu {

enum class F32GemvPath { library, avx512 };
const char* f32_gemv_path_name(F32GemvPath path);
bool f32_gemv_path_supported(F32GemvPath path);  // compiled in and run by this CPU
F32GemvPath f32_gemv_best_path();
// y[rows] = W x on a given (supported) path, OpenMP threads over blocks of output rows.
void f32_gemv_on_path(F32GemvPath path, float* y, const float* x, const float* w, int64_t rows, int64_t cols);
void f32_gemv(float* y, const float* x, const float* w, int64_t rows, int64_t cols);  // the best path
// y[n] = sum_k x[k] W[n, k] for n in [n0, n1), one thread (f32_gemv_avx512.cpp).
void f32_gemv_rows_avx512(float* y, const float* x, const float* w, int64_t cols, int64_t n0, int64_t n1);

}  // namespace tessera::kernels::cpu
