// CUDA elementwise ops of kernels/cuda/cuda_ops.h: add, add_inplace, scale_inplace, broadcast_rows,
// gelu (tanh) forward/backward, bias + gelu forward and the f32 <-> bf16/f16 casts. Grid-stride
// loops.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// Queues a grid-stride kernel over n elements.
template <typename... Params, typename... Args>
void run_elementwise(const char* op, void (*kernel)(Params...), int64_t n, Args... args) {
  if (n <= 0) return;
  launch(op, kernel, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, args...);
  finish(op);
}

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
  run_elementwise("add", add_kernel, n, out, a, b, n);
}

void add_inplace(float* acc, const float* x, int64_t n) {
  run_elementwise("add_inplace", add_inplace_kernel, n, acc, x, n);
}

void scale_inplace(float* x, float s, int64_t n) {
  run_elementwise("scale_inplace", scale_kernel, n, x, s, n);
}

void broadcast_rows(float* out, const float* bias, int64_t rows, int64_t cols) {
  run_elementwise("broadcast_rows", broadcast_rows_kernel, rows * cols, out, bias, rows * cols, cols);
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  run_elementwise("gelu_forward", gelu_forward_kernel, n, out, inp, n);
}

void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t rows, int64_t cols) {
  run_elementwise("bias_gelu_forward", bias_gelu_forward_kernel, rows * cols, out, pre, bias, rows * cols, cols);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  run_elementwise("gelu_backward", gelu_backward_kernel, n, dinp, inp, dout, n);
}

void f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
  run_elementwise("f32_to_bf16", f32_to_bf16_kernel, n, out, inp, n);
}

void bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  run_elementwise("bf16_to_f32", bf16_to_f32_kernel, n, out, inp, n);
}

void f32_to_f16(uint16_t* out, const float* inp, int64_t n) {
  run_elementwise("f32_to_f16", f32_to_f16_kernel, n, out, inp, n);
}

void f16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  run_elementwise("f16_to_f32", f16_to_f32_kernel, n, out, inp, n);
}

void round_bf16_inplace(float* x, uint16_t* bits, int64_t n) {
  run_elementwise("round_bf16_inplace", round_bf16_inplace_kernel, n, x, bits, n);
}

void round_f16_inplace(float* x, uint16_t* bits, int64_t n) {
  run_elementwise("round_f16_inplace", round_f16_inplace_kernel, n, x, bits, n);
}

}  // namespace tessera::kernels::cuda
