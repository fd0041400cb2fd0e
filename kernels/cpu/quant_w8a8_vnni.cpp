// The int8-activation products' AVX-512 VNNI block kernel (quant_w8a8_paths.h): tiles of up to 4
// activation rows by the block's 32 weight rows (two vectors of 16), 4 columns a step: each step
// broadcasts 4 activation bytes per row and multiplies them into both weight vectors with vpdpbusd
// (unsigned weight bytes x signed activation bytes, 4 products summed into each int32 lane). At a
// group's end the int32 sums lose the weights' offset (offset x the group's activation sum), are
// converted to f32 and multiply-added with the two scales' product into f32 accumulators.
// Compiled with -mavx512f/bw/vl/vnni (kernels/CMakeLists.txt), chosen only on CPUs that run them.
#include "kernels/cpu/quant_w8a8_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#include <cstring>
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
const bool kW8A8VnniCompiled = true;

namespace {

template <int MR>
void tile(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t groups,
          int64_t padded, const uint8_t* packed, const float* scales, const int32_t* offsets, int64_t count) {
  __m512 f[MR][2];
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  const int64_t row = groups * padded;  // an activation row's bytes
  for (int64_t g = 0; g < groups; ++g) {
    __m512i a[MR][2];
    for (int i = 0; i < MR; ++i) a[i][0] = a[i][1] = _mm512_setzero_si512();
    const uint8_t* p = packed + g * padded * kW8A8BlockRows;
    const int8_t* x = xq + g * padded;
    for (int64_t k = 0; k < padded; k += 4, p += 4 * kW8A8BlockRows) {
      const __m512i w0 = _mm512_loadu_si512(p), w1 = _mm512_loadu_si512(p + 64);
      for (int i = 0; i < MR; ++i) {
        int32_t word;
        std::memcpy(&word, x + i * row + k, 4);
        const __m512i b = _mm512_set1_epi32(word);
        a[i][0] = _mm512_dpbusd_epi32(a[i][0], w0, b);
        a[i][1] = _mm512_dpbusd_epi32(a[i][1], w1, b);
      }
    }
    const __m512i off0 = _mm512_loadu_si512(offsets + g * kW8A8BlockRows);
    const __m512i off1 = _mm512_loadu_si512(offsets + g * kW8A8BlockRows + 16);
    const __m512 s0 = _mm512_loadu_ps(scales + g * kW8A8BlockRows), s1 = _mm512_loadu_ps(scales + g * kW8A8BlockRows + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512i sum = _mm512_set1_epi32(xsums[i * groups + g]);
      const __m512 sx = _mm512_set1_ps(xscales[i * groups + g]);
      const __m512i c0 = _mm512_sub_epi32(a[i][0], _mm512_mullo_epi32(off0, sum));
      const __m512i c1 = _mm512_sub_epi32(a[i][1], _mm512_mullo_epi32(off1, sum));
      f[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c0), _mm512_mul_ps(s0, sx), f[i][0]);
      f[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c1), _mm512_mul_ps(s1, sx), f[i][1]);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>(count >= 16 ? 0xFFFFu : (1u << count) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(count >= 32 ? 0xFFFFu : count <= 16 ? 0u : (1u << (count - 16)) - 1u);
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, m0, f[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, m1, f[i][1]);
  }
}

}  // namespace

void w8a8_block_vnni(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t m,
                     int64_t groups, int64_t padded, const uint8_t* packed, const float* scales,
                     const int32_t* offsets, int64_t count) {
  const int64_t row = groups * padded;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    tile<4>(y + i * ldy, ldy, xq + i * row, xscales + i * groups, xsums + i * groups, groups, padded, packed, scales,
            offsets, count);
  const int64_t left = m - i;
  float* yi = y + i * ldy;
  const int8_t* xi = xq + i * row;
  if (left == 3) tile<3>(yi, ldy, xi, xscales + i * groups, xsums + i * groups, groups, padded, packed, scales, offsets, count);
  if (left == 2) tile<2>(yi, ldy, xi, xscales + i * groups, xsums + i * groups, groups, padded, packed, scales, offsets, count);
  if (left == 1) tile<1>(yi, ldy, xi, xscales + i * groups, xsums + i * groups, groups, padded, packed, scales, offsets, count);
}

#else
const bool kW8A8VnniCompiled = false;
void w8a8_block_vnni(float*, int64_t, const int8_t*, const float*, const int32_t*, int64_t, int64_t, int64_t,
                     const uint8_t*, const float*, const int32_t*, int64_t) {}
#endif

}  // namespace tessera::kernels::cpu
