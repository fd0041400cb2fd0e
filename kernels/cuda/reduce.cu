// CUDA reductions of kernels/cuda/cuda_ops.h: bias_backward (column sums, accumulated) and
// sum_squares (in double, returned to the host). Deterministic (no atomics); sum_squares waits for its result, the rest is queued.
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPartials = 1024;  // blocks of the first sum_squares pass

struct MatrixAt {
  const float* m;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const { return m[r * cols + c]; }
};

// partial[block] = sum of x[i]^2 over the block's grid-stride share, in double.
__global__ void sum_squares_partials(double* partial, const float* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += global_stride()) acc += static_cast<double>(x[i]) * x[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// *total = sum of partial[0, count), one block of kMaxPartials threads.
__global__ void sum_partials(double* total, const double* partial, int count) {
  const double v = static_cast<int>(threadIdx.x) < count ? partial[threadIdx.x] : 0.0;
  const double sum = block_sum(v);
  if (threadIdx.x == 0) *total = sum;
}

}  // namespace

void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  accumulate_column_sums("bias_backward", dbias, MatrixAt{dout, cols}, rows, cols);
  finish("bias_backward");
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const unsigned blocks = grid_for(n, kThreads * 8) < kMaxPartials ? grid_for(n, kThreads * 8) : kMaxPartials;
  Scratch scratch((blocks + 1) * sizeof(double));
  double* partial = scratch.as<double>();
  double* total = partial + blocks;
  launch("sum_squares", sum_squares_partials, dim3(blocks), dim3(kThreads), 0, partial, x, n);
  launch("sum_squares", sum_partials, dim3(1), dim3(kMaxPartials), 0, total, static_cast<const double*>(partial),
         static_cast<int>(blocks));
  double result = 0.0;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, op_stream()));
  finish("sum_squares");
  wait_for_ops("sum_squares");  // the host reads the result
  return result;
}

}  // namespace tessera::kernels::cuda
