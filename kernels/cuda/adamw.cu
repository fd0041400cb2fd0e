// CUDA AdamW of kernels/cuda/cuda_ops.h: one fused pass updating exp_avg, exp_avg_sq and param in
// place, in PyTorch's order (decoupled decay first, then the bias-corrected step). Synchronous.
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

struct AdamWStep {
  float lr, beta1, beta2, eps, decay;  // decay = 1 - lr * weight_decay
  float bias_correction1, bias_correction2, grad_scale;
};

__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ exp_avg,
                             float* __restrict__ exp_avg_sq, int64_t n, AdamWStep s) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const float g = grad[i] * s.grad_scale;
    const float m = s.beta1 * exp_avg[i] + (1.0f - s.beta1) * g;
    const float v = s.beta2 * exp_avg_sq[i] + (1.0f - s.beta2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float m_hat = m / s.bias_correction1;
    const float v_hat = v / s.bias_correction2;
    float p = param[i] * s.decay;
    p -= s.lr * m_hat / (sqrtf(v_hat) + s.eps);
    param[i] = p;
  }
}

}  // namespace

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  TESSERA_CHECK(args.step >= 1, "adamw: step must be >= 1 (1-based), got ", args.step);
  if (n <= 0) return;
  const double step = static_cast<double>(args.step);
  const AdamWStep s{args.lr,
                    args.beta1,
                    args.beta2,
                    args.eps,
                    1.0f - args.lr * args.weight_decay,
                    static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), step)),
                    static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), step)),
                    args.grad_scale};
  launch("adamw", adamw_kernel, dim3(grid_for(n, 256)), dim3(256), 0, param, grad, exp_avg, exp_avg_sq, n, s);
  finish("adamw");
}

}  // namespace tessera::kernels::cuda
