// oneDNN's matmul primitive for the CPU GEMMs (builds with oneDNN only): one primitive per shape,
// scaling, input type and bias, created on first use and kept. gemm.cpp sends it the linears'
// forward products in fp32, gemm_bf16.cpp every product with bf16 inputs, gemm_bias.cpp the
// linears' forward products with their bias.
#pragma once
#include <cstdint>

namespace tessera::kernels::cpu {

// c[m, n] = alpha * op(a) op(b) + beta * c (+ bias[n] on every row, when given: added in the
// primitive's epilogue), row-major, c and bias fp32; a and b fp32, or bf16 bits when
// bf16_inputs. beta = 0 overwrites c (NaN included). Returns false, computing nothing, for a new
// shape once 1024 primitives are kept (shapes that vary step to step, such as a mixture of
// experts' token counts, would otherwise grow the cache without end): the caller then takes its
// other path.
bool onednn_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                   const void* b, bool bf16_inputs, float beta, float* c, const float* bias = nullptr);

// Whether oneDNN runs bf16 products on this CPU's dot-product instructions (AVX512-BF16 or AMX).
bool onednn_has_bf16_dot_products();

}  // namespace tessera::kernels::cpu
