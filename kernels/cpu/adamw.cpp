// AdamW on the CPU: one fused pass over param, grad and both moments, in PyTorch's order.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {

// As torch.optim.AdamW (single-tensor path), with g = grad * grad_scale:
//   p *= 1 - lr wd;  m += (1 - b1)(g - m);  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Bias corrections are computed in double, as PyTorch does on the host.
void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  const double t = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), t);
  const float decay = static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay);
  const float step_size = static_cast<float>(static_cast<double>(args.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float b1_weight = 1.0f - args.beta1, b2 = args.beta2, b2_weight = 1.0f - args.beta2;
  const float eps = args.eps, grad_scale = args.grad_scale;
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float m = exp_avg[i] + b1_weight * (g - exp_avg[i]);
    const float v = exp_avg_sq[i] * b2 + b2_weight * g * g;
    const float denom = std::sqrt(v) / bc2_sqrt + eps;
    param[i] = param[i] * decay - step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace tessera::kernels::cpu
