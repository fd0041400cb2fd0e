// The CPU AdamW on 16 lanes (AVX-512F), tail by mask registers. Compiled with -mavx512f
// -ffp-contract=off (kernels/CMakeLists.txt); chosen at run time only on CPUs that have AVX-512F.
// No std:: templates here: an out-of-line copy built with AVX-512 could be picked by the linker
// for code that runs on any CPU.
#include "kernels/cpu/adamw_paths.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__)
const bool kAdamwAvx512Compiled = true;

void adamw_range_avx512(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                        const AdamWStep& s) {
  const __m512 decay = _mm512_set1_ps(s.decay), b1_weight = _mm512_set1_ps(s.b1_weight);
  const __m512 b2 = _mm512_set1_ps(s.b2), b2_weight = _mm512_set1_ps(s.b2_weight);
  const __m512 step_size = _mm512_set1_ps(s.step_size), bc2_sqrt = _mm512_set1_ps(s.bc2_sqrt);
  const __m512 eps = _mm512_set1_ps(s.eps), grad_scale = _mm512_set1_ps(s.grad_scale);
  // 16 lanes from i, those in `on`: masked-off lanes load as 0 and are not stored.
  auto update = [&](int64_t i, __mmask16 on) {
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(on, grad + i), grad_scale);
    const __m512 m_old = _mm512_maskz_loadu_ps(on, exp_avg + i);
    const __m512 m = _mm512_add_ps(m_old, _mm512_mul_ps(b1_weight, _mm512_sub_ps(g, m_old)));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(on, exp_avg_sq + i), b2),
                                   _mm512_mul_ps(_mm512_mul_ps(b2_weight, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_sqrt_ps(on, v), bc2_sqrt), eps);
    const __m512 p = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(on, param + i), decay),
                                   _mm512_div_ps(_mm512_mul_ps(step_size, m), denom));
    _mm512_mask_storeu_ps(param + i, on, p);
    _mm512_mask_storeu_ps(exp_avg + i, on, m);
    _mm512_mask_storeu_ps(exp_avg_sq + i, on, v);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) update(i, static_cast<__mmask16>(0xFFFF));
  if (i < n) update(i, static_cast<__mmask16>((1u << (n - i)) - 1u));
}

#else  // not an x86 compiler given -mavx512f: never chosen

const bool kAdamwAvx512Compiled = false;

void adamw_range_avx512(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                        const AdamWStep& s) {
  adamw_range_scalar(param, grad, exp_avg, exp_avg_sq, n, s);
}

#endif

}  // namespace tessera::kernels::cpu
