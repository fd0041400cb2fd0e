// AdamW on the CPU: one fused pass over param, grad and both moments, in PyTorch's order.
#include <algorithm>
#include <cmath>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {

// The scalars of one step, rounded to float once.
struct Step {
  float decay, b1_weight, b2, b2_weight, step_size, bc2_sqrt, eps, grad_scale;
};

inline void update(float& p, float grad, float& m_io, float& v_io, const Step& s) {
  const float g = grad * s.grad_scale;
  const float m = m_io + s.b1_weight * (g - m_io);
  const float v = v_io * s.b2 + s.b2_weight * g * g;
  const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
  p = p * s.decay - s.step_size * m / denom;
  m_io = m;
  v_io = v;
}

// [first, last) of the arrays. The compiler leaves a loop around std::sqrt scalar (sqrt may set
// errno), so with AVX the body is spelled out on 8 lanes; the scalar update does the tail.
void update_range(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t first, int64_t last,
                  const Step& s) {
  int64_t i = first;
#if defined(__AVX__)
  const __m256 decay = _mm256_set1_ps(s.decay), b1_weight = _mm256_set1_ps(s.b1_weight);
  const __m256 b2 = _mm256_set1_ps(s.b2), b2_weight = _mm256_set1_ps(s.b2_weight);
  const __m256 step_size = _mm256_set1_ps(s.step_size), bc2_sqrt = _mm256_set1_ps(s.bc2_sqrt);
  const __m256 eps = _mm256_set1_ps(s.eps), grad_scale = _mm256_set1_ps(s.grad_scale);
  for (; i + 8 <= last; i += 8) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), grad_scale);
    const __m256 m_old = _mm256_loadu_ps(exp_avg + i);
    const __m256 m = _mm256_add_ps(m_old, _mm256_mul_ps(b1_weight, _mm256_sub_ps(g, m_old)));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq + i), b2),
                                   _mm256_mul_ps(_mm256_mul_ps(b2_weight, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2_sqrt), eps);
    const __m256 p = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(param + i), decay),
                                   _mm256_div_ps(_mm256_mul_ps(step_size, m), denom));
    _mm256_storeu_ps(param + i, p);
    _mm256_storeu_ps(exp_avg + i, m);
    _mm256_storeu_ps(exp_avg_sq + i, v);
  }
#endif
  for (; i < last; ++i) update(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s);
}

}  // namespace

// As torch.optim.AdamW (single-tensor path), with g = grad * grad_scale:
//   p *= 1 - lr wd;  m += (1 - b1)(g - m);  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Bias corrections are computed in double, as PyTorch does on the host.
void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  const double t = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), t);
  const Step s{static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay),
               static_cast<float>(1.0 - static_cast<double>(args.beta1)),
               args.beta2,
               static_cast<float>(1.0 - static_cast<double>(args.beta2)),
               static_cast<float>(static_cast<double>(args.lr) / bc1),
               static_cast<float>(std::sqrt(bc2)),
               args.eps,
               args.grad_scale};
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c)
    update_range(param, grad, exp_avg, exp_avg_sq, c * kChunk, std::min(n, (c + 1) * kChunk), s);
}

}  // namespace tessera::kernels::cpu
