// Warp-level bf16 tensor-core products (mma.sync m16n8k16, fp32 accumulators) for the .cu kernels
// that hold their tiles in shared memory: fragment loads from bf16 tiles, the product, and the
// conversion of an accumulator tile into the A operand of the next product (flash attention's P).
//
// Fragment layout (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 g + t, g in [0, 8), t in [0, 4).
//   A (16 x 16, rows x k): a[0] = (g, 2t..2t+1), a[1] = (g + 8, 2t..), a[2] = (g, 2t + 8..), a[3] = (g + 8, 2t + 8..)
//   B (16 x 8, k x cols):  b[0] = (2t..2t+1, g),  b[1] = (2t + 8.., g)
//   C (16 x 8, fp32):      c[0], c[1] = (g, 2t), (g, 2t + 1);  c[2], c[3] = (g + 8, 2t), (g + 8, 2t + 1)
// Each 32-bit register holds two bf16, the lower index in the low half.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace tessera::kernels::cuda::mma {

// Two floats rounded to bf16 (to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// d += a b (16 x 8 += 16 x 16 by 16 x 8).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t pair_at(const __nv_bfloat16* tile, int stride, int row, int col) {
  return *reinterpret_cast<const uint32_t*>(tile + row * stride + col);
}

// The A fragment of rows [row0, row0 + 16) and columns [k0, k0 + 16) of a row-major bf16 tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* tile, int stride, int row0, int k0) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  a[0] = pair_at(tile, stride, row0 + g, k0 + 2 * t);
  a[1] = pair_at(tile, stride, row0 + g + 8, k0 + 2 * t);
  a[2] = pair_at(tile, stride, row0 + g, k0 + 2 * t + 8);
  a[3] = pair_at(tile, stride, row0 + g + 8, k0 + 2 * t + 8);
}

// The B fragment B[k][n] = tile[n0 + n][k0 + k]: B is the transpose of rows [n0, n0 + 8) of a
// row-major tile (for S = Q K^T, B comes from K's rows).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const __nv_bfloat16* tile, int stride, int n0, int k0) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  b[0] = pair_at(tile, stride, n0 + g, k0 + 2 * t);
  b[1] = pair_at(tile, stride, n0 + g, k0 + 2 * t + 8);
}

// The A fragment of columns [16 j, 16 j + 16) of a 16-row accumulator tile held as 8-column
// pieces c[2 j] and c[2 j + 1] (the C layout of two n-tiles is the A layout of one k-step).
__device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Sum and max over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

}  // namespace tessera::kernels::cuda::mma
