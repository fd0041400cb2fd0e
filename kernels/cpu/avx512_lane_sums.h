// Sums across the 16 lanes of AVX-512 accumulators, shared by the AVX-512 tiles that must sum their
// lanes the same way (bf16_matmul_avx512.cpp and quant_bf16_gemv_avx512.cpp give the same bits for
// the same products; quant_dot_avx512.cpp's tiles sum theirs alike). Include only from translation
// units compiled with AVX-512 (F and DQ).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::cpu {

// [sum of a0's 16 lanes, a1's, a2's, a3's]: four 512-bit sums in one 128-bit vector.
inline __m128 lane_sums4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  auto quarter = [](__m512 v) {  // 16 lanes to 4 partial sums
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  };
  return _mm_hadd_ps(_mm_hadd_ps(quarter(a0), quarter(a1)), _mm_hadd_ps(quarter(a2), quarter(a3)));
}

// A tile's MR x NR accumulators summed into y (row i at y + i * ldy): NR = 4 through lane_sums4,
// otherwise each by itself.
template <int MR, int NR>
inline void store_lane_sums(float* y, int64_t ldy, const __m512 (&acc)[MR][NR]) {
  for (int i = 0; i < MR; ++i) {
    if constexpr (NR == 4)
      _mm_storeu_ps(y + i * ldy, lane_sums4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    else
      for (int r = 0; r < NR; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

}  // namespace tessera::kernels::cpu
