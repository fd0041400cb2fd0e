// Device helpers shared by the kernel files: grid-stride indices and warp / block reductions
// (deterministic: a fixed tree for a given launch shape).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::kernels::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32); every thread of the block must call it,
// and every thread gets the total.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // an earlier call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : T(0));
}

// A running softmax denominator: sum of exp(x - max) over the values seen, with their max.
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum max_sum_add(MaxSum a, float x) {
  if (x > a.max) {
    a.sum = a.sum * expf(a.max - x) + 1.0f;  // exp(-inf) = 0 for the first value
    a.max = x;
  } else {
    a.sum += expf(x - a.max);
  }
  return a;
}

__device__ __forceinline__ MaxSum max_sum_merge(MaxSum a, MaxSum b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

__device__ __forceinline__ MaxSum warp_max_sum(MaxSum v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(kFullMask, v.max, offset), __shfl_xor_sync(kFullMask, v.sum, offset)};
    v = max_sum_merge(v, other);
  }
  return v;
}

// MaxSum over the whole block, same contract as block_sum.
__device__ inline MaxSum block_max_sum(MaxSum v) {
  __shared__ MaxSum partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max_sum(lane < warps ? partial[lane] : MaxSum{-INFINITY, 0.0f});
}

}  // namespace tessera::kernels::cuda
