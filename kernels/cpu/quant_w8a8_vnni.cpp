// The int8-activation products' AVX-512 VNNI block kernel (quant_w8a8_paths.h): tiles of up to 4
// activation rows by the block's 32 weight rows (two vectors of 16), 4 columns a step: each step
// broadcasts 4 activation bytes per row and multiplies them into both weight vectors with vpdpbusd
// (unsigned weight bytes x signed activation bytes, 4 products summed into each int32 lane); int4
// blocks load 8 columns of 16 rows a vector and split them into two such steps (AND, shift). At a
// group's end the int32 sums lose the weights' offset (offset x the group's activation sum), are
// converted to f32 and multiply-added with the two scales' product into f32 accumulators (the offset
// taken out with one vpdpwssd where the group's activation sum fits an int16).
// Compiled with -mavx512f/bw/vl/vnni (kernels/CMakeLists.txt), chosen only on CPUs that run them.
#include "kernels/cpu/quant_w8a8_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
const bool kW8A8VnniCompiled = true;

namespace {

template <int MR, int Bits>
void tile(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t groups,
          int64_t padded, const uint8_t* packed, const float* scales, const int32_t* offsets, int64_t count) {
  constexpr int64_t R = kW8A8BlockRows;
  __m512 f[MR][2];
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  const int64_t row = groups * padded;  // an activation row's bytes
  // A group's activation sum fits an int16 (|sum| <= 127 x padded) where padded <= 256.
  const bool small_sums = padded <= 256;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i a[MR][2];
    for (int i = 0; i < MR; ++i) a[i][0] = a[i][1] = _mm512_setzero_si512();
    const uint8_t* p = packed + g * w8a8_group_bytes(padded, Bits);
    const int8_t* x = xq + g * padded;
    if constexpr (Bits == 8) {
      for (int64_t k = 0; k < padded; k += 4, p += 4 * R) {
        const __m512i w0 = _mm512_loadu_si512(p), w1 = _mm512_loadu_si512(p + 64);
        for (int i = 0; i < MR; ++i) {
          int32_t word;
          std::memcpy(&word, x + i * row + k, 4);
          const __m512i b = _mm512_set1_epi32(word);
          a[i][0] = _mm512_dpbusd_epi32(a[i][0], w0, b);
          a[i][1] = _mm512_dpbusd_epi32(a[i][1], w1, b);
        }
      }
    } else {
      const __m512i low = _mm512_set1_epi8(0x0F);
      for (int64_t k = 0; k < padded; k += 8, p += 4 * R) {
        const __m512i v0 = _mm512_loadu_si512(p), v1 = _mm512_loadu_si512(p + 64);
        const __m512i lo0 = _mm512_and_si512(v0, low), hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low);
        const __m512i lo1 = _mm512_and_si512(v1, low), hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low);
        for (int i = 0; i < MR; ++i) {
          int32_t first, second;  // columns k..k+3 and k+4..k+7
          std::memcpy(&first, x + i * row + k, 4);
          std::memcpy(&second, x + i * row + k + 4, 4);
          const __m512i b0 = _mm512_set1_epi32(first), b1 = _mm512_set1_epi32(second);
          a[i][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a[i][0], lo0, b0), hi0, b1);
          a[i][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a[i][1], lo1, b0), hi1, b1);
        }
      }
    }
    const __m512i off0 = _mm512_loadu_si512(offsets + g * R), off1 = _mm512_loadu_si512(offsets + g * R + 16);
    const __m512 s0 = _mm512_loadu_ps(scales + g * R), s1 = _mm512_loadu_ps(scales + g * R + 16);
    for (int i = 0; i < MR; ++i) {
      const int32_t xsum = xsums[i * groups + g];
      const __m512 sx = _mm512_set1_ps(xscales[i * groups + g]);
      __m512i c0, c1;
      if (small_sums) {  // a - off x sum in one vpdpwssd: off (<= 128) and -sum as the low int16 of each lane
        const __m512i minus = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint16_t>(-xsum)));
        c0 = _mm512_dpwssd_epi32(a[i][0], off0, minus);
        c1 = _mm512_dpwssd_epi32(a[i][1], off1, minus);
      } else {
        const __m512i sum = _mm512_set1_epi32(xsum);
        c0 = _mm512_sub_epi32(a[i][0], _mm512_mullo_epi32(off0, sum));
        c1 = _mm512_sub_epi32(a[i][1], _mm512_mullo_epi32(off1, sum));
      }
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

// Rows in tiles of 4, then a tile of the 1-3 left.
template <int Bits>
void rows_of_tiles(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t m,
                   int64_t groups, int64_t padded, const uint8_t* packed, const float* scales, const int32_t* offsets,
                   int64_t count) {
  const int64_t row = groups * padded;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    tile<4, Bits>(y + i * ldy, ldy, xq + i * row, xscales + i * groups, xsums + i * groups, groups, padded, packed,
                  scales, offsets, count);
  const int64_t left = m - i;
  float* yi = y + i * ldy;
  const int8_t* xi = xq + i * row;
  const float* si = xscales + i * groups;
  const int32_t* ui = xsums + i * groups;
  if (left == 3) tile<3, Bits>(yi, ldy, xi, si, ui, groups, padded, packed, scales, offsets, count);
  if (left == 2) tile<2, Bits>(yi, ldy, xi, si, ui, groups, padded, packed, scales, offsets, count);
  if (left == 1) tile<1, Bits>(yi, ldy, xi, si, ui, groups, padded, packed, scales, offsets, count);
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

// w8a8_pack_block for int8 in groups of a multiple of 8 columns (the packed block is then
// [cols / 4][32][4] whatever the groups): 16 rows x 64 columns at a time, loaded, offset by +128
// (xor), transposed as 32-bit words, stored 4 columns of 16 rows a vector.
void w8a8_pack_block_vnni(uint8_t* packed, float* scales, int32_t* offsets, const QuantMatrixView& w, int64_t n0,
                          int64_t count) {
  const int64_t groups = w.cols / w.group, R = kW8A8BlockRows;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      scales[g * R + r] = r < count ? w.scales[(n0 + r) * groups + g] : 0.0f;
      offsets[g * R + r] = r < count ? 128 : 0;
    }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t k = 0; k < w.cols; k += 64) {
      const int64_t step = w.cols - k < 64 ? w.cols - k : 64;  // columns here, a multiple of 8
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t row = h * 16 + i;
        if (row >= count) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const __mmask64 on = step == 64 ? ~__mmask64{0} : (__mmask64{1} << step) - 1;
        r[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(on, w.q + (n0 + row) * w.cols + k), flip);
      }
      transpose16(r);
      for (int64_t c = 0; c < step / 4; ++c) _mm512_storeu_si512(packed + (k / 4 + c) * 4 * R + h * 64, r[c]);
    }
}

// quantize_activations_int8_portable's values 16 at a time: the group's largest magnitude (exact
// in any order), the same scalar reciprocal, the product clamped, rounded to nearest even
// (roundscale, as the portable add-and-subtract of 1.5 x 2^23) and narrowed.
void quantize_activations_int8_avx512(int8_t* xq, float* scales, int32_t* sums, const float* x, int64_t m,
                                      int64_t cols, int64_t group) {
  const int64_t groups = cols / group, padded = w8a8_padded_group(group);
  const __m512 top = _mm512_set1_ps(127.0f), bottom = _mm512_set1_ps(-127.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const float* in = x + i * cols + g * group;
      int8_t* out = xq + (i * groups + g) * padded;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < group; k += 16) {
        const __mmask16 on = group - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (group - k)) - 1u);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(on, in + k)));
      }
      const float largest = _mm512_reduce_max_ps(amax);
      const float inv = largest > 0.0f ? 127.0f / largest : 0.0f;
      const __m512 scale = _mm512_set1_ps(inv);
      __m512i sum = _mm512_setzero_si512();
      for (int64_t k = 0; k < padded; k += 16) {  // past the group: zeros (the load's mask)
        const int64_t real = std::max<int64_t>(0, std::min<int64_t>(16, group - k));
        const __mmask16 on = __mmask16(real >= 16 ? 0xFFFFu : (1u << real) - 1u);
        const __mmask16 store = __mmask16(padded - k >= 16 ? 0xFFFFu : (1u << (padded - k)) - 1u);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(on, in + k), scale);
        v = _mm512_min_ps(top, _mm512_max_ps(bottom, v));
        const __m512i q = _mm512_cvtps_epi32(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum = _mm512_add_epi32(sum, q);
        _mm_mask_storeu_epi8(out + k, store, _mm512_cvtepi32_epi8(q));
      }
      scales[i * groups + g] = largest / 127.0f;
      sums[i * groups + g] = _mm512_reduce_add_epi32(sum);
    }
}

void w8a8_block_vnni(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t m,
                     int64_t groups, int64_t padded, int bits, const uint8_t* packed, const float* scales,
                     const int32_t* offsets, int64_t count) {
  if (bits == 8)
    rows_of_tiles<8>(y, ldy, xq, xscales, xsums, m, groups, padded, packed, scales, offsets, count);
  else
    rows_of_tiles<4>(y, ldy, xq, xscales, xsums, m, groups, padded, packed, scales, offsets, count);
}

#else
const bool kW8A8VnniCompiled = false;
void w8a8_block_vnni(float*, int64_t, const int8_t*, const float*, const int32_t*, int64_t, int64_t, int64_t, int,
                     const uint8_t*, const float*, const int32_t*, int64_t) {}
void w8a8_pack_block_vnni(uint8_t*, float*, int32_t*, const QuantMatrixView&, int64_t, int64_t) {}
void quantize_activations_int8_avx512(int8_t*, float*, int32_t*, const float*, int64_t, int64_t, int64_t) {}
#endif

}  // namespace tessera::kernels::cpu
