// CUDA elementwise ops of kernels/cuda/cuda_ops.h, the twins of kernels/cpu/elementwise.cpp: add,
// add_inplace, scale_inplace, broadcast_rows, gelu (tanh) forward/backward, bias + gelu forward
// (grid-stride loops, queued), and the reductions bias_backward (column sums, accumulated) and
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
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) out[i] = a[i] + b[i];
}

__global__ void add_inplace_kernel(float* acc, const float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) acc[i] += x[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) x[i] *= s;
}

__global__ void broadcast_rows_kernel(float* out, const float* bias, int64_t n, int64_t cols) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) out[i] = bias[i % cols];
}

// 0.5 (1 + tanh u) = sigmoid(2u), evaluated from e = exp(-2|u|) in (0, 1] so that nothing
// overflows and the negative tail has no cancellation: sigmoid(2u) = (u < 0 ? e : 1) / (1 + e), and
// sigmoid'(2u) / 2 = sigmoid(2u) (1 - sigmoid(2u)) = e / (1 + e)^2.
struct GeluLogistic {
  float s;     // 0.5 (1 + tanh u)
  float s_ds;  // s (1 - s) = (1 - tanh^2 u) / 4
};

__device__ __forceinline__ GeluLogistic gelu_logistic(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float e = expf(-2.0f * fabsf(u));
  const float inv = 1.0f / (1.0f + e);
  return {(u < 0.0f ? e : 1.0f) * inv, e * inv * inv};
}

// gelu(x) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3).
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const float x = inp[i];
    out[i] = x * gelu_logistic(x).s;
  }
}

// pre += bias (row-broadcast), then out = gelu(pre).
__global__ void bias_gelu_forward_kernel(float* out, float* pre, const float* bias, int64_t n, int64_t cols) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const float x = pre[i] + bias[i % cols];
    pre[i] = x;
    out[i] = x * gelu_logistic(x).s;
  }
}

// dinp = dout * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2);
// dinp may alias dout (each element is read before it is written).
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const float x = inp[i];
    const GeluLogistic g = gelu_logistic(x);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = dout[i] * (g.s + 2.0f * x * g.s_ds * du);
  }
}


}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
  run_grid_stride("add", add_kernel, n, out, a, b, n);
}

void add_inplace(float* acc, const float* x, int64_t n) {
  run_grid_stride("add_inplace", add_inplace_kernel, n, acc, x, n);
}

void scale_inplace(float* x, float s, int64_t n) {
  run_grid_stride("scale_inplace", scale_kernel, n, x, s, n);
}

void broadcast_rows(float* out, const float* bias, int64_t rows, int64_t cols) {
  run_grid_stride("broadcast_rows", broadcast_rows_kernel, rows * cols, out, bias, rows * cols, cols);
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  run_grid_stride("gelu_forward", gelu_forward_kernel, n, out, inp, n);
}

void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t rows, int64_t cols) {
  run_grid_stride("bias_gelu_forward", bias_gelu_forward_kernel, rows * cols, out, pre, bias, rows * cols, cols);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  run_grid_stride("gelu_backward", gelu_backward_kernel, n, dinp, inp, dout, n);
}

// ---- reductions ----

namespace {

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
