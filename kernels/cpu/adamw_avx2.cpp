// The CPU AdamW on 8 lanes (AVX2), tail by masked loads and stores. Compiled with -mavx2
// -ffp-contract=off (kernels/CMakeLists.txt); chosen at run time only on CPUs that have AVX2.
// No std:: templates here: an out-of-line copy built with AVX2 could be picked by the linker for
// code that runs on any CPU.
#include "kernels/cpu/adamw_paths.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX2__)
const bool kAdamwAvx2Compiled = true;

namespace {

// Lanes [0, count) of 8 on, the rest off (count in 1..7).
inline __m256i first_lanes(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

}  // namespace

void adamw_range_avx2(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                      const AdamWStep& s) {
  const __m256 decay = _mm256_set1_ps(s.decay), b1_weight = _mm256_set1_ps(s.b1_weight);
  const __m256 b2 = _mm256_set1_ps(s.b2), b2_weight = _mm256_set1_ps(s.b2_weight);
  const __m256 step_size = _mm256_set1_ps(s.step_size), bc2_sqrt = _mm256_set1_ps(s.bc2_sqrt);
  const __m256 eps = _mm256_set1_ps(s.eps), grad_scale = _mm256_set1_ps(s.grad_scale);
  // The update of 8 loaded lanes; stores through `store`.
  auto update = [&](__m256 p_old, __m256 g_raw, __m256 m_old, __m256 v_old, auto&& store) {
    const __m256 g = _mm256_mul_ps(g_raw, grad_scale);
    const __m256 m = _mm256_add_ps(m_old, _mm256_mul_ps(b1_weight, _mm256_sub_ps(g, m_old)));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(v_old, b2), _mm256_mul_ps(_mm256_mul_ps(b2_weight, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2_sqrt), eps);
    const __m256 p = _mm256_sub_ps(_mm256_mul_ps(p_old, decay), _mm256_div_ps(_mm256_mul_ps(step_size, m), denom));
    store(p, m, v);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    update(_mm256_loadu_ps(param + i), _mm256_loadu_ps(grad + i), _mm256_loadu_ps(exp_avg + i),
           _mm256_loadu_ps(exp_avg_sq + i), [&](__m256 p, __m256 m, __m256 v) {
             _mm256_storeu_ps(param + i, p);
             _mm256_storeu_ps(exp_avg + i, m);
             _mm256_storeu_ps(exp_avg_sq + i, v);
           });
  }
  if (i < n) {
    // Masked-off lanes load as 0 and are never stored (sqrt(0) / ... stays finite).
    const __m256i on = first_lanes(n - i);
    update(_mm256_maskload_ps(param + i, on), _mm256_maskload_ps(grad + i, on), _mm256_maskload_ps(exp_avg + i, on),
           _mm256_maskload_ps(exp_avg_sq + i, on), [&](__m256 p, __m256 m, __m256 v) {
             _mm256_maskstore_ps(param + i, on, p);
             _mm256_maskstore_ps(exp_avg + i, on, m);
             _mm256_maskstore_ps(exp_avg_sq + i, on, v);
           });
  }
}

#else  // not an x86 compiler given -mavx2: never chosen

const bool kAdamwAvx2Compiled = false;

void adamw_range_avx2(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                      const AdamWStep& s) {
  adamw_range_scalar(param, grad, exp_avg, exp_avg_sq, n, s);
}

#endif

}  // namespace tessera::kernels::cpu
