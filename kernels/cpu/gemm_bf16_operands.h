// For the CPU GEMMs with bf16 inputs (gemm_bf16.cpp, gemm_bias.cpp): where the products run and
// the operands' bf16 bits.
#pragma once
#include <cstdint>

namespace tessera::kernels::cpu {

// Whether gemm_bf16 runs on oneDNN's bf16 matmul (oneDNN chosen, and the CPU has bf16 dot
// products); else it is emulated with the fp32 gemm.
bool gemm_bf16_on_onednn();

// x's bf16 bits: its copy when the caller gave one, else x rounded (nearest even) into the calling
// thread's buffer for operand `which` (0: a, 1: b), which grows to the largest operand and is kept.
const uint16_t* gemm_bf16_operand(int which, const float* x, const uint16_t* copy, int64_t n);

}  // namespace tessera::kernels::cpu
