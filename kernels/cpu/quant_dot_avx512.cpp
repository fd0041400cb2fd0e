// The quantised matmuls' AVX-512 path (quant_paths.h): tiles of MR activation rows by NR weight
// rows, 16 columns a step (masked at a group's end), each weight dequantised in registers as
// (q [- zero]) * scale and multiply-added into MR x NR f32 accumulators, summed across lanes at the
// end. A weight row is dequantised once per step for all MR activation rows, an activation vector
// loaded once for all NR weight rows. Compiled with -mavx512f/bw/vl (kernels/CMakeLists.txt) and
// chosen only on CPUs that run them. No std:: templates here (see adamw_avx512.cpp).
#include "kernels/cpu/quant_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
const bool kQuantAvx512Compiled = true;

namespace {

// 16 int8 weights from q (lanes in `on`; the others read as 0), times the scale.
inline __m512 dequant8(const int8_t* q, __mmask16 on, __m512 scale) {
  const __m128i bytes = _mm_maskz_loadu_epi8(on, q);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), scale);
}

// 16 int4 weights from 8 bytes at q (bytes in `on`), low nibble first, minus the zero point, times
// the scale.
inline __m512 dequant4(const uint8_t* q, __mmask16 on, __m512i zero, __m512 scale) {
  const __m128i bytes = _mm_maskz_loadu_epi8(on, q);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, nibble);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
  const __m512i values = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), zero);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(values), scale);
}

// y[i * ldy + n + r] for i < MR, r < NR: activation rows x + i * w.cols times weight rows n + r.
template <int Bits, int MR, int NR>
void tile(float* y, int64_t ldy, const float* x, const QuantMatrixView& w, int64_t n) {
  // Everything the loop reads, in locals: the row pointers and extents (no reloads through w).
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  const int64_t row_bytes = Bits == 8 ? cols : cols / 2;
  const uint8_t* q[NR];
  const float* scales[NR];
  const uint8_t* zeros[NR];
  for (int r = 0; r < NR; ++r) {
    q[r] = w.q + (n + r) * row_bytes;
    scales[r] = w.scales + (n + r) * groups;
    zeros[r] = Bits == 4 ? w.zeros + (n + r) * groups : nullptr;
  }
  const float* xs[MR];
  for (int i = 0; i < MR; ++i) xs[i] = x + i * cols;
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  // 16 columns from k (those in `on`) of every row, into the accumulators.
  auto step = [&](int64_t k, __mmask16 on, const __m512* scale, const __m512i* zero) {
    __m512 wv[NR];
    for (int r = 0; r < NR; ++r) {
      if constexpr (Bits == 8) {
        wv[r] = dequant8(reinterpret_cast<const int8_t*>(q[r]) + k, on, scale[r]);
      } else {  // k and the count in `on` are even: the group is
        const auto bytes_on = static_cast<__mmask16>(on == 0xFFFF ? 0xFFu : (1u << (__builtin_popcount(on) / 2)) - 1u);
        wv[r] = dequant4(q[r] + k / 2, bytes_on, zero[r], scale[r]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(on, xs[i] + k);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  };
  for (int64_t g = 0; g < groups; ++g) {
    __m512 scale[NR];
    __m512i zero[NR];
    for (int r = 0; r < NR; ++r) {
      scale[r] = _mm512_set1_ps(scales[r][g]);
      zero[r] = Bits == 4 ? _mm512_set1_epi32(zeros[r][g]) : _mm512_setzero_si512();
    }
    const int64_t end = (g + 1) * group;
    int64_t k = g * group;
    for (; k + 16 <= end; k += 16) step(k, static_cast<__mmask16>(0xFFFFu), scale, zero);
    if (k < end) step(k, static_cast<__mmask16>((1u << (end - k)) - 1u), scale, zero);
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) y[i * ldy + n + r] = _mm512_reduce_add_ps(acc[i][r]);
}

// MR activation rows against weight rows [n0, n1): 4 at a time, then one by one.
template <int Bits, int MR>
void rows(float* y, int64_t ldy, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile<Bits, MR, 4>(y, ldy, x, w, n);
  for (; n < n1; ++n) tile<Bits, MR, 1>(y, ldy, x, w, n);
}

template <int Bits>
void gemm_rows(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) rows<Bits, 4>(y + i * w.rows, w.rows, x + i * w.cols, w, n0, n1);
  switch (m - i) {
    case 3: rows<Bits, 3>(y + i * w.rows, w.rows, x + i * w.cols, w, n0, n1); break;
    case 2: rows<Bits, 2>(y + i * w.rows, w.rows, x + i * w.cols, w, n0, n1); break;
    case 1: rows<Bits, 1>(y + i * w.rows, w.rows, x + i * w.cols, w, n0, n1); break;
    default: break;
  }
}

}  // namespace

void quant_gemv_rows_avx512(float* y, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  if (w.bits == 8)
    rows<8, 1>(y, 0, x, w, n0, n1);
  else
    rows<4, 1>(y, 0, x, w, n0, n1);
}

void quant_gemm_rows_avx512(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  if (w.bits == 8)
    gemm_rows<8>(y, x, m, w, n0, n1);
  else
    gemm_rows<4>(y, x, m, w, n0, n1);
}

#else  // not an x86 compiler given AVX-512: never chosen

const bool kQuantAvx512Compiled = false;

void quant_gemv_rows_avx512(float* y, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  quant_gemv_rows_scalar(y, x, w, n0, n1);
}
void quant_gemm_rows_avx512(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  quant_gemm_rows_scalar(y, x, m, w, n0, n1);
}

#endif

}  // namespace tessera::kernels::cpu
