// A quantised matrix's bf16 products for a few activation rows (decode: quant_bf16_matmul under 4
// rows) on AVX-512 BF16, with no panel: tiles of MR activation rows by NR weight rows, 32 columns a
// step, each weight row's 32 values dequantised in registers (dequantize_weights' values, then
// rounded to bf16, nearest even) straight into vdpbf16ps. int8: (q * scale) in f32, two halves
// packed to bf16 by vcvtne2ps2bf16; int4: a group's 16 levels (l - zero) * scale rounded to bf16
// once into a table, and each column's level (low nibble first) looked up with vpermw, the byte
// holding it widened and split by one vpmaddwd. The
// columns, pairs, accumulators and lane sums are those of bf16_matmul_avx512.cpp's tiles on the
// rounded panel, so a row's result has the same bits on either path and for any row count.
// Needs a group that is a multiple of 32 (quant_bf16_gemv_fits). Compiled with
// -mavx512f/bw/vl/dq/bf16 (kernels/CMakeLists.txt), chosen only on CPUs that run them. No std::
// templates here (see adamw_avx512.cpp).
#include "kernels/cpu/bf16_matmul_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)
#include <immintrin.h>

#include "kernels/cpu/avx512_lane_sums.h"
#include "kernels/cpu/quant_tile_rows.h"
#else
#include "core/error.h"
#endif

namespace tessera::kernels::cpu {

bool quant_bf16_gemv_fits(const QuantMatrixView& w) { return w.group > 0 && w.group % 32 == 0; }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)

namespace {

// 32 int8 weights from q as bf16 (q * scale rounded), in column order. Each half widened straight
// from memory (no extract of a 256-bit load's upper half: one shuffle fewer per 32 weights).
inline __m512bh int8_bf16(const uint8_t* q, __m512 scale) {
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
  const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b0)), scale);
  const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b1)), scale);
  return _mm512_cvtne2ps_pbh(hi, lo);
}

// Row z: the levels less zero point z as f32, l - z for l < 16 (a group's table is one multiply by
// its scale away).
struct LevelsLessZero {
  alignas(64) float rows[16][16];
  constexpr LevelsLessZero() : rows() {
    for (int z = 0; z < 16; ++z)
      for (int l = 0; l < 16; ++l) rows[z][l] = static_cast<float>(l - z);
  }
};
constexpr LevelsLessZero kLevelsLessZero;

// A group's int4 table: word l and word l + 16 (l < 16) hold bf16((l - zero) * scale),
// dequantize_weights' value rounded (twice, so an index's bit 4 does not matter). One multiply and
// one conversion that writes both halves.
inline __m512i int4_bf16_table(int zero, const float* scale) {
  const __m512 values = _mm512_mul_ps(_mm512_load_ps(kLevelsLessZero.rows[zero]), _mm512_set1_ps(*scale));
  return (__m512i)_mm512_cvtne2ps_pbh(values, values);
}

// 32 int4 weights (16 bytes at q, low nibble first) as bf16, in column order: byte j widened to
// dword j (columns 2j, 2j+1), times 0x1001 in one vpmaddwd, which leaves the byte in word 2j (its
// low nibble in index bits 0-3, bit 4 the high nibble's: the table holds its 16 values twice) and
// the byte shifted down 4 in word 2j+1 (its high nibble); then looked up with vpermw (5 index bits).
// Three instructions before the lookup fewer than widening to words twice and splitting between.
inline __m512bh int4_bf16(const uint8_t* q, __m512i table) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m512i index = _mm512_madd_epi16(b, _mm512_set1_epi32(0x1001));
  return (__m512bh)_mm512_permutexvar_epi16(index, table);
}

// y[i * ldy + n + r] for i < MR, r < NR: activation rows xb + i * cols (bf16) times weight rows n + r.
template <int Bits, int MR, int NR>
void tile(float* y, int64_t ldy, const uint16_t* xb, const QuantMatrixView& w, int64_t n) {
  const QuantTileRows<Bits, NR> rows(w, n);  // the rows' pointers and the prefetch distance
  const int64_t cols = w.cols, group = w.group, groups = rows.groups, ahead = rows.ahead;
  const uint8_t* const* q = rows.q;
  const float* const* scales = rows.scales;
  const uint8_t* const* zeros = rows.zeros;
  const uint16_t* xs[MR];
  for (int i = 0; i < MR; ++i) xs[i] = xb + i * cols;
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512 scale[NR];
    __m512i table[NR];
    for (int r = 0; r < NR; ++r) {
      if constexpr (Bits == 8)
        scale[r] = _mm512_set1_ps(scales[r][g]);
      else
        table[r] = int4_bf16_table(zeros[r][g], scales[r] + g);
    }
    for (int64_t k = g * group, end = k + group; k < end; k += 32) {
      // Each row's line one tile ahead, once a line (as quant_int4_gemv_vnni.cpp: the next tile's
      // row at this column, for rows up to 2 KiB, so every line is asked for a whole tile early).
      const int64_t byte = Bits == 8 ? k : k / 2;
      if constexpr (NR > 1)
        if (byte % 64 == 0)
          for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(q[r] + ahead + byte), _MM_HINT_T0);
      __m512bh wv[NR];
      for (int r = 0; r < NR; ++r) {
        const uint8_t* p = q[r] + byte;
        if constexpr (Bits == 8)
          wv[r] = int8_bf16(p, scale[r]);
        else
          wv[r] = int4_bf16(p, table[r]);
      }
      for (int i = 0; i < MR; ++i) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(xs[i] + k);
        for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
      }
    }
  }
  store_lane_sums<MR, NR>(y + n, ldy, acc);
}

// MR activation rows against weight rows [n0, n1): 4 at a time, then one by one (as bf16_matmul_avx512.cpp).
template <int Bits, int MR>
void rows_of(float* y, int64_t ldy, const uint16_t* xb, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile<Bits, MR, 4>(y, ldy, xb, w, n);
  for (; n < n1; ++n) tile<Bits, MR, 1>(y, ldy, xb, w, n);
}

template <int Bits>
void gemv_rows(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  switch (m) {
    case 3: rows_of<Bits, 3>(y, w.rows, xb, w, n0, n1); break;
    case 2: rows_of<Bits, 2>(y, w.rows, xb, w, n0, n1); break;
    case 1: rows_of<Bits, 1>(y, w.rows, xb, w, n0, n1); break;
    default: break;
  }
}

}  // namespace

void quant_bf16_gemv_rows_avx512(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w, int64_t n0,
                                 int64_t n1) {
  if (w.bits == 8)
    gemv_rows<8>(y, xb, m, w, n0, n1);
  else
    gemv_rows<4>(y, xb, m, w, n0, n1);
}

#else  // not an x86 compiler given AVX512-BF16: never chosen (quant_bf16_matmul keeps its panels)

void quant_bf16_gemv_rows_avx512(float*, const uint16_t*, int64_t, const QuantMatrixView&, int64_t, int64_t) {
  throw Error("quant_bf16_gemv_rows_avx512: not compiled in (no AVX512-BF16 compiler support)");
}

#endif

}  // namespace tessera::kernels::cpu
