// CUDA AdamW of kernels/cuda/cuda_ops.h: one fused pass updating exp_avg, exp_avg_sq and param in
// place, as torch.optim.AdamW and the CPU twin (same operations, same order). Synchronous.
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

// The per-step scalars, computed on the host in double as PyTorch does.
struct AdamWStep {
  float decay;      // 1 - lr * weight_decay
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float b1_weight, b2, b2_weight, eps, grad_scale;
};

// g = grad * grad_scale; m += (1 - b1)(g - m); v = b2 v + (1 - b2) g^2;
// p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps).
__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ exp_avg,
                             float* __restrict__ exp_avg_sq, int64_t n, AdamWStep s) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const float g = grad[i] * s.grad_scale;
    const float m = exp_avg[i] + s.b1_weight * (g - exp_avg[i]);
    const float v = exp_avg_sq[i] * s.b2 + s.b2_weight * g * g;
    const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
    param[i] = param[i] * s.decay - s.step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

// The step's scalars from the hyperparameters, in double as PyTorch computes them on the host.
AdamWStep step_scalars(const ops::AdamWArgs& args) {
  TESSERA_CHECK(args.step >= 1, "adamw: step must be >= 1 (1-based), got ", args.step);
  const double t = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), t);
  return AdamWStep{static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay),
                   static_cast<float>(static_cast<double>(args.lr) / bc1),
                   static_cast<float>(std::sqrt(bc2)),
                   1.0f - args.beta1,
                   args.beta2,
                   1.0f - args.beta2,
                   args.eps,
                   args.grad_scale};
}

// Queues the update of n elements on op_stream() and, with zero_grad, the gradient's zeroing
// behind it (the caller's mutable gradient, read through const by the kernel).
void enqueue(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWStep& s,
             bool zero_grad) {
  if (n <= 0) return;
  launch("adamw", adamw_kernel, dim3(grid_for(n, 256)), dim3(256), 0, param, grad, exp_avg, exp_avg_sq, n, s);
  if (zero_grad)
    TESSERA_CUDA_CHECK(cudaMemsetAsync(const_cast<float*>(grad), 0, static_cast<size_t>(n) * sizeof(float), op_stream()));
}

}  // namespace

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  enqueue(param, grad, exp_avg, exp_avg_sq, n, step_scalars(args), args.zero_grad);
  finish("adamw");
}

// Every span's launch queued back to back on op_stream(), one synchronisation at the end.
void adamw_spans(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const ops::AdamWSpan* spans,
                 int64_t count, const ops::AdamWArgs& args) {
  ops::AdamWArgs no_decay = args;
  no_decay.weight_decay = 0.0f;
  const AdamWStep scalars[2] = {step_scalars(no_decay), step_scalars(args)};
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = spans[i].begin;
    enqueue(param + at, grad + at, exp_avg + at, exp_avg_sq + at, spans[i].end - at, scalars[spans[i].decay ? 1 : 0],
            args.zero_grad);
  }
  finish("adamw_spans");
}

}  // namespace tessera::kernels::cuda
