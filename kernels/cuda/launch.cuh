// Kernel launch plumbing for the .cu files: launch() enqueues a kernel on op_stream() with the
// launch checked under the op's name; run_grid_stride() a grid-stride kernel over n elements;
// dynamic_smem<T>() is the block's dynamic shared memory.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/cuda_check.h"

namespace tessera::kernels::cuda {

template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char tessera_dynamic_smem[];
  return reinterpret_cast<T*>(tessera_dynamic_smem);
}

// kernel<<<grid, block, smem, op_stream()>>>(args...); kernels needing more than 48 KiB of dynamic
// shared memory are opted in first. Empty grids launch nothing.
template <typename... Params, typename... Args>
void launch(const char* op, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (smem > 48 * 1024)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
  kernel<<<grid, block, smem, op_stream()>>>(args...);
  check_cuda(cudaGetLastError(), op, __FILE__, __LINE__);
}

// Queues a grid-stride kernel over n elements, 256 threads a block (elementwise.cu, cast.cu).
template <typename... Params, typename... Args>
void run_grid_stride(const char* op, void (*kernel)(Params...), int64_t n, Args... args) {
  constexpr int kThreads = 256;
  if (n <= 0) return;
  launch(op, kernel, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, args...);
  finish(op);
}

}  // namespace tessera::kernels::cuda
