// CUDA reductions of kernels/cuda/cuda_ops.h: bias_backward (column sums, accumulated) and
// sum_squares (in double, returned to the host; also of values as they are rounded to bf16 in
// place). Deterministic (no atomics); the sums of squares wait for their result, the rest is queued.
#include <cuda_bf16.h>

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

// partial[block] = sum of x[i]^2 over the block's grid-stride share, in double; with kRound each
// x[i] is first rounded to bf16 in place (nearest even) and the rounded value squared (without,
// x is not written).
template <bool kRound>
__global__ void sum_squares_partials(double* partial, float* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    float v = x[i];
    if constexpr (kRound) {
      v = __bfloat162float(__float2bfloat16_rn(v));
      x[i] = v;
    }
    acc += static_cast<double>(v) * v;
  }
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

namespace {

// The sum of squares to the host: partial sums per block, then one block adds them in order.
template <bool kRound>
double sum_of_squares(const char* op, float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const unsigned blocks = grid_for(n, kThreads * 8) < kMaxPartials ? grid_for(n, kThreads * 8) : kMaxPartials;
  Scratch scratch((blocks + 1) * sizeof(double));
  double* partial = scratch.as<double>();
  double* total = partial + blocks;
  launch(op, sum_squares_partials<kRound>, dim3(blocks), dim3(kThreads), 0, partial, x, n);
  launch(op, sum_partials, dim3(1), dim3(kMaxPartials), 0, total, static_cast<const double*>(partial),
         static_cast<int>(blocks));
  double result = 0.0;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, op_stream()));
  finish(op);
  wait_for_ops(op);  // the host reads the result
  return result;
}

}  // namespace

double sum_squares(const float* x, int64_t n) {
  return sum_of_squares<false>("sum_squares", const_cast<float*>(x), n);  // not written
}

double round_bf16_inplace_sum_squares(float* x, int64_t n) {
  return sum_of_squares<true>("round_bf16_sum_squares", x, n);
}

}  // namespace tessera::kernels::cuda
