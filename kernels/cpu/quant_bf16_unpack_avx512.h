// The AVX-512 BF16 unpacking of quantised weights into bf16 (dequantize_weights' values rounded to
// bf16, nearest even), shared by the kernels that dequantise in registers and must give the same
// bits: quant_bf16_gemv_avx512.cpp (straight into vdpbf16ps) and bf16_matmul_amx.cpp (into the AMX
// tiles' staging lines). Include only from translation units compiled with AVX-512 F/BW/VL/DQ/BF16;
// internal linkage (an unnamed namespace), so the differently flagged units never share a copy.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::cpu {
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

// A step's lookup indices, column order: byte j widened to dword j, times 0x1001 in one vpmaddwd,
// which leaves the byte in word 2j (its low nibble in index bits 0-3, bit 4 the high nibble's: the
// table holds its 16 values twice) and the byte shifted down 4 in word 2j+1 (its high nibble).
struct Widened {
  static constexpr bool kPermuted = false;
  static __m512i index(const uint8_t* q, __m512i) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    return _mm512_madd_epi16(b, _mm512_set1_epi32(0x1001));
  }
};

}  // namespace
}  // namespace tessera::kernels::cpu
