// The quantised matmuls' AVX-512 path (quant_paths.h): tiles of MR activation rows by NR weight
// rows, 16 columns a step (masked at a group's end), each weight dequantised in registers and
// multiply-added into MR x NR f32 accumulators, summed across lanes at the end. int4: a group's 16
// levels dequantised once into a table, (l - zero) * scale, and each weight looked up in it (one
// vpermps per 16 weights), 32 columns a step inside a group. int8: (q * scale) per weight, except in the GEMV (MR = 1), which sums
// x_k q_k over a group and applies the scale in one fused multiply-add per group (one rounding
// fewer, one instruction per 16 weights fewer). A weight row is dequantised once per step for all
// MR activation rows, an activation vector loaded once for all NR weight rows; the GEMV (MR = 1)
// prefetches its weight stream a tile ahead in software. Also the
// dequantisation of blocks of rows into an f32 panel for the batched products (quant_gemm.cpp).
// Compiled with -mavx512f/bw/vl (kernels/CMakeLists.txt) and chosen only on CPUs that run them. No
// std:: templates here (see adamw_avx512.cpp).
#include "kernels/cpu/quant_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "kernels/cpu/avx512_lane_sums.h"
#include "kernels/cpu/quant_tile_rows.h"
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
const bool kQuantAvx512Compiled = true;

namespace {

constexpr __mmask16 kAll = 0xFFFF;
// Tags for a step of 16 whole columns (plain loads) or a group's masked tail.
struct Full {
  static constexpr bool value = true;
};
struct Part {
  static constexpr bool value = false;
};

// 16 int8 weights from q (lanes in `on`; the others read as 0) as f32.
template <bool Full>
inline __m512 int8_as_f32(const int8_t* q, __mmask16 on) {
  const __m128i bytes = Full ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)) : _mm_maskz_loadu_epi8(on, q);
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}

// The 16 int4 levels (0..15, low nibble first) of the 8 bytes at q (bytes in `bytes_on`), one per
// 32-bit lane: the indices into a group's table.
template <bool Full>
inline __m512i int4_levels(const uint8_t* q, __mmask16 bytes_on) {
  const __m128i bytes = Full ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)) : _mm_maskz_loadu_epi8(bytes_on, q);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, nibble);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
}

// A group's int4 table: lane l holds (l - zero) * scale, exactly dequantize_weights' value of level l.
inline __m512 int4_table(int zero, float scale) {
  const __m512i levels = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(levels, _mm512_set1_epi32(zero))), _mm512_set1_ps(scale));
}

// The byte mask of an int4 step whose column mask is `on` (k and the count in `on` are even: the group is).
inline __mmask16 int4_bytes(__mmask16 on) {
  return static_cast<__mmask16>(on == kAll ? 0xFFu : (1u << (__builtin_popcount(on) / 2)) - 1u);
}

// y[i * ldy + n + r] for i < MR, r < NR: activation rows x + i * w.cols times weight rows n + r.
template <int Bits, int MR, int NR>
void tile(float* y, int64_t ldy, const float* x, const QuantMatrixView& w, int64_t n) {
  // int8 GEMV: the scale applied to each group's sum (see the top).
  constexpr bool kGroupSums = Bits == 8 && MR == 1;
  // Everything the loop reads, in locals: the row pointers and extents (no reloads through w).
  const QuantTileRows<Bits, NR> rows(w, n);  // the rows' pointers and the prefetch distance
  const int64_t cols = w.cols, group = w.group, groups = rows.groups, ahead = rows.ahead;
  const uint8_t* const* q = rows.q;
  const float* const* scales = rows.scales;
  const uint8_t* const* zeros = rows.zeros;
  const float* xs[MR];
  for (int i = 0; i < MR; ++i) xs[i] = x + i * cols;
  auto prefetch = [&](int64_t byte) {
    if constexpr (MR == 1 && NR > 1)
      _mm_prefetch(reinterpret_cast<const char*>(q[0] + ahead + NR * byte), _MM_HINT_T0);
  };
  __m512 acc[MR][NR], sums[NR];
  for (int r = 0; r < NR; ++r) sums[r] = _mm512_setzero_ps();
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  // 16 columns from k (those in `on`) of every row, into the accumulators (or the group's sums).
  // `factor`: the group's scale per row (int8) or its table (int4).
  auto step = [&](auto full, int64_t k, __mmask16 on, const __m512* factor) {
    constexpr bool kFull = decltype(full)::value;
    prefetch(Bits == 8 ? k : k / 2);
    __m512 wv[NR];
    for (int r = 0; r < NR; ++r) {
      if constexpr (Bits == 8) {
        const __m512 qf = int8_as_f32<kFull>(reinterpret_cast<const int8_t*>(q[r]) + k, on);
        wv[r] = kGroupSums ? qf : _mm512_mul_ps(qf, factor[r]);
      } else {
        wv[r] = _mm512_permutexvar_ps(int4_levels<kFull>(q[r] + k / 2, int4_bytes(on)), factor[r]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = kFull ? _mm512_loadu_ps(xs[i] + k) : _mm512_maskz_loadu_ps(on, xs[i] + k);
      for (int r = 0; r < NR; ++r) {
        if constexpr (kGroupSums)
          sums[r] = _mm512_fmadd_ps(xv, wv[r], sums[r]);
        else
          acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    }
  };
  // int4, 32 columns from k (whole, inside one group): 16 bytes widened to one byte per 32-bit lane;
  // vpermps reads an index's low 4 bits, so the lanes look up the even columns' levels (low
  // nibbles) as they are and the odd columns' after a shift by 4, and the activations are split into
  // even and odd columns once for all NR rows.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  auto step32 = [&](int64_t k, const __m512* table) {
    prefetch(k / 2);
    __m512 we[NR], wo[NR];
    for (int r = 0; r < NR; ++r) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + k / 2)));
      we[r] = _mm512_permutexvar_ps(b, table[r]);
      wo[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table[r]);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512 x0 = _mm512_loadu_ps(xs[i] + k), x1 = _mm512_loadu_ps(xs[i] + k + 16);
      const __m512 xe = _mm512_permutex2var_ps(x0, even, x1), xo = _mm512_permutex2var_ps(x0, odd, x1);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(xo, wo[r], _mm512_fmadd_ps(xe, we[r], acc[i][r]));
    }
  };
  for (int64_t g = 0; g < groups; ++g) {
    __m512 factor[NR];
    for (int r = 0; r < NR; ++r) {
      if constexpr (Bits == 4)
        factor[r] = int4_table(zeros[r][g], scales[r][g]);
      else
        factor[r] = _mm512_set1_ps(scales[r][g]);
      if constexpr (kGroupSums) sums[r] = _mm512_setzero_ps();
    }
    const int64_t end = (g + 1) * group;
    int64_t k = g * group;
    if constexpr (Bits == 4)
      for (; k + 32 <= end; k += 32) step32(k, factor);
    for (; k + 16 <= end; k += 16) step(Full{}, k, kAll, factor);
    if (k < end) step(Part{}, k, static_cast<__mmask16>((1u << (end - k)) - 1u), factor);
    if constexpr (kGroupSums)
      for (int r = 0; r < NR; ++r) acc[0][r] = _mm512_fmadd_ps(sums[r], factor[r], acc[0][r]);
  }
  store_lane_sums<MR, NR>(y + n, ldy, acc);
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

// Row n's dequantised values into out[cols].
template <int Bits>
void dequantize_row(float* out, const QuantMatrixView& w, int64_t n) {
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  const uint8_t* q = w.q + n * (Bits == 8 ? cols : cols / 2);
  for (int64_t g = 0; g < groups; ++g) {
    const float s = w.scales[n * groups + g];
    const __m512 factor = Bits == 4 ? int4_table(w.zeros[n * groups + g], s) : _mm512_set1_ps(s);
    const int64_t end = (g + 1) * group;
    for (int64_t k = g * group; k < end; k += 16) {
      const __mmask16 on = k + 16 <= end ? kAll : static_cast<__mmask16>((1u << (end - k)) - 1u);
      __m512 v;
      if constexpr (Bits == 8)
        v = _mm512_mul_ps(int8_as_f32<false>(reinterpret_cast<const int8_t*>(q) + k, on), factor);
      else
        v = _mm512_permutexvar_ps(int4_levels<false>(q + k / 2, int4_bytes(on)), factor);
      _mm512_mask_storeu_ps(out + k, on, v);
    }
  }
}

}  // namespace

void quant_dequantize_rows_avx512(float* panel, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    if (w.bits == 8)
      dequantize_row<8>(panel + (n - n0) * w.cols, w, n);
    else
      dequantize_row<4>(panel + (n - n0) * w.cols, w, n);
  }
}

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
void quant_dequantize_rows_avx512(float* panel, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  quant_dequantize_rows_scalar(panel, w, n0, n1);
}
void quant_gemm_rows_avx512(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  quant_gemm_rows_scalar(y, x, m, w, n0, n1);
}

#endif

}  // namespace tessera::kernels::cpu
