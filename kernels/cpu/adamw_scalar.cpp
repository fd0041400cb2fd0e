// The CPU AdamW's portable path: the reference loop every SIMD path must match bit for bit.
// Compiled with -ffp-contract=off (kernels/CMakeLists.txt) so no multiply-add is fused.
#include <cmath>

#include "kernels/cpu/adamw_paths.h"

namespace tessera::kernels::cpu {

void adamw_range_scalar(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                        const AdamWStep& s) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * s.grad_scale;
    const float m = exp_avg[i] + s.b1_weight * (g - exp_avg[i]);
    const float v = exp_avg_sq[i] * s.b2 + s.b2_weight * g * g;
    const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
    param[i] = param[i] * s.decay - s.step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace tessera::kernels::cpu
