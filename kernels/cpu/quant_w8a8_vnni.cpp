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

// A 16 x 16 transpose of 32-bit elements: r[i] holds row i's 16 words; afterwards r[c] holds word c
// of every row (lane i: row i). Two unpack stages inside 128-bit lanes, two lane shuffles.
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int j = 0; j < 8; ++j) {
    t[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
  }
  // u[c + 4 j], 128-bit lane L: rows 4j..4j+3 at word 4L + c.
  for (int j = 0; j < 4; ++j) {
    u[4 * j + 0] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
    u[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[c + 4], 0x88), w0 = _mm512_shuffle_i32x4(u[c], u[c + 4], 0xDD);
    const __m512i v1 = _mm512_shuffle_i32x4(u[c + 8], u[c + 12], 0x88), w1 = _mm512_shuffle_i32x4(u[c + 8], u[c + 12], 0xDD);
    r[c] = _mm512_shuffle_i32x4(v0, v1, 0x88);       // words 0..3: lane 0
    r[c + 8] = _mm512_shuffle_i32x4(v0, v1, 0xDD);   // lane 2
    r[c + 4] = _mm512_shuffle_i32x4(w0, w1, 0x88);   // lane 1
    r[c + 12] = _mm512_shuffle_i32x4(w0, w1, 0xDD);  // lane 3
  }
}

}  // namespace

// w8a8_pack_block for groups of a multiple of 4 columns (the packed block is then [cols / 4][32][4]
// whatever the groups): 16 rows x 64 columns at a time, loaded (int4: 32 bytes widened to 64
// levels), int8 offset by +128 (xor), transposed as 32-bit words, stored 4 columns of 16 rows a vector.
void w8a8_pack_block_vnni(uint8_t* packed, float* scales, int32_t* offsets, const QuantMatrixView& w, int64_t n0,
                          int64_t count) {
  const int64_t groups = w.cols / w.group, R = kW8A8BlockRows;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      scales[g * R + r] = r < count ? w.scales[(n0 + r) * groups + g] : 0.0f;
      offsets[g * R + r] = r < count ? (w.bits == 8 ? 128 : w.zeros[(n0 + r) * groups + g]) : 0;
    }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), nibble = _mm512_set1_epi16(0x000F);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t k = 0; k < w.cols; k += 64) {
      const int64_t step = w.cols - k < 64 ? w.cols - k : 64;  // columns here, a multiple of 4
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t row = h * 16 + i;
        if (row >= count) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const int64_t n = n0 + row;
        if (w.bits == 8) {
          const __mmask64 on = step == 64 ? ~__mmask64{0} : (__mmask64{1} << step) - 1;
          r[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(on, w.q + n * w.cols + k), flip);
        } else {
          const __mmask32 on = step == 64 ? ~__mmask32{0} : (__mmask32{1} << (step / 2)) - 1;
          const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(on, w.q + (n * w.cols + k) / 2));
          r[i] = _mm512_or_si512(_mm512_and_si512(b, nibble),
                                 _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(b, 4), nibble), 8));
        }
      }
      transpose16(r);
      for (int64_t c = 0; c < step / 4; ++c) _mm512_storeu_si512(packed + (k / 4 + c) * 4 * R + h * 64, r[c]);
    }
}

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
void w8a8_pack_block_vnni(uint8_t*, float*, int32_t*, const QuantMatrixView&, int64_t, int64_t) {}
#endif

}  // namespace tessera::kernels::cpu
