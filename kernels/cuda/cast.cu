// CUDA casts of kernels/cuda/cuda_ops.h, the twins of kernels/cpu/cast.cpp: f32 <-> bf16 / f16 and
// rounding f32 in place through bf16 / f16 (nearest even). Grid-stride loops, queued.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

__global__ void f32_to_bf16_kernel(uint16_t* out, const float* inp, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride())
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(inp[i]));
}

__global__ void bf16_to_f32_kernel(float* out, const uint16_t* inp, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride())
    out[i] = __bfloat162float(__ushort_as_bfloat16(inp[i]));
}

__global__ void f32_to_f16_kernel(uint16_t* out, const float* inp, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) out[i] = __half_as_ushort(__float2half_rn(inp[i]));
}

__global__ void f16_to_f32_kernel(float* out, const uint16_t* inp, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) out[i] = __half2float(__ushort_as_half(inp[i]));
}

// x rounded in place through the low precision; bits (may be null) keeps the low-precision bits.
__global__ void round_bf16_inplace_kernel(float* x, uint16_t* bits, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const __nv_bfloat16 low = __float2bfloat16_rn(x[i]);
    if (bits) bits[i] = __bfloat16_as_ushort(low);
    x[i] = __bfloat162float(low);
  }
}

__global__ void round_f16_inplace_kernel(float* x, uint16_t* bits, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const __half low = __float2half_rn(x[i]);
    if (bits) bits[i] = __half_as_ushort(low);
    x[i] = __half2float(low);
  }
}

}  // namespace

void f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
  run_grid_stride("f32_to_bf16", f32_to_bf16_kernel, n, out, inp, n);
}

void bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  run_grid_stride("bf16_to_f32", bf16_to_f32_kernel, n, out, inp, n);
}

void f32_to_f16(uint16_t* out, const float* inp, int64_t n) {
  run_grid_stride("f32_to_f16", f32_to_f16_kernel, n, out, inp, n);
}

void f16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  run_grid_stride("f16_to_f32", f16_to_f32_kernel, n, out, inp, n);
}

void round_bf16_inplace(float* x, uint16_t* bits, int64_t n) {
  run_grid_stride("round_bf16_inplace", round_bf16_inplace_kernel, n, x, bits, n);
}

void round_f16_inplace(float* x, uint16_t* bits, int64_t n) {
  run_grid_stride("round_f16_inplace", round_f16_inplace_kernel, n, x, bits, n);
}

}  // namespace tessera::kernels::cuda
