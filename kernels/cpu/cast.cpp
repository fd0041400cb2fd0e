// Casts between f32 and the 16-bit floats: bf16 and IEEE half (f16), rounding to nearest even;
// NaN stays NaN, inf stays inf, half subnormals are produced and read exactly.
#include <algorithm>
#include <bit>
#include <cstdint>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)

namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per parallel work item

// Runs body(first, count) over [0, n) in chunks, in parallel when there is more than one chunk.
template <typename Body>
void chunked(int64_t n, Body body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(kChunk, n - c * kChunk));
}

#if !defined(__F16C__)
// Portable IEEE half conversions (used when the CPU has no F16C).
inline uint16_t f16_from_f32(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (ax < 0x38800000u) {
    // Half subnormal (or zero): adding 0.5 puts the value's bits at a ulp of 2^-24, so the FPU
    // rounds it to nearest even; the bits above those of 0.5 are the half's mantissa.
    const float t = std::bit_cast<float>(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(t) - 0x3f000000u));
  }
  ax += 0xfffu + ((ax >> 13) & 1u);                                   // round to nearest even
  return static_cast<uint16_t>(sign | ((ax - 0x38000000u) >> 13));  // rebias 127 -> 15
}

inline float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24, exact
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}
#endif

// n conversions on the calling thread: F16C eight at a time where the CPU has it.
void f32_to_f16_serial(uint16_t* out, const float* inp, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(inp + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(inp[i], _MM_FROUND_TO_NEAREST_INT);
#else
  for (; i < n; ++i) out[i] = f16_from_f32(inp[i]);
#endif
}

void f16_to_f32_serial(float* out, const uint16_t* inp, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(inp + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(inp[i]);
#else
  for (; i < n; ++i) out[i] = f32_from_f16(inp[i]);
#endif
}

}  // namespace

void f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
  chunked(n, [&](int64_t first, int64_t count) {
#pragma omp simd
    for (int64_t i = first; i < first + count; ++i) out[i] = bf16_from_f32(inp[i]);
  });
}

void bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  chunked(n, [&](int64_t first, int64_t count) {
#pragma omp simd
    for (int64_t i = first; i < first + count; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(inp[i]) << 16);
  });
}

void f32_to_f16(uint16_t* out, const float* inp, int64_t n) {
  chunked(n, [&](int64_t first, int64_t count) { f32_to_f16_serial(out + first, inp + first, count); });
}

void f16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  chunked(n, [&](int64_t first, int64_t count) { f16_to_f32_serial(out + first, inp + first, count); });
}

void round_bf16_inplace(float* x, uint16_t* bits, int64_t n) {
  chunked(n, [&](int64_t first, int64_t count) {
    if (bits) {
#pragma omp simd
      for (int64_t i = first; i < first + count; ++i) {
        const uint16_t b = bf16_from_f32(x[i]);
        bits[i] = b;
        x[i] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
      }
    } else {
#pragma omp simd
      for (int64_t i = first; i < first + count; ++i) x[i] = bf16_rounded(x[i]);
    }
  });
}

void round_f16_inplace(float* x, uint16_t* bits, int64_t n) {
  // Through a small stack buffer per chunk piece, with the conversions above.
  chunked(n, [&](int64_t first, int64_t count) {
    constexpr int64_t kPiece = 1024;
    uint16_t piece[kPiece];
    for (int64_t p = first; p < first + count; p += kPiece) {
      const int64_t m = std::min(kPiece, first + count - p);
      uint16_t* out = bits ? bits + p : piece;
      f32_to_f16_serial(out, x + p, m);
      f16_to_f32_serial(x + p, out, m);
    }
  });
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(f32_to_bf16)
TESSERA_ISA_DECLARE(bf16_to_f32)
TESSERA_ISA_DECLARE(f32_to_f16)
TESSERA_ISA_DECLARE(f16_to_f32)
TESSERA_ISA_DECLARE(round_bf16_inplace)
TESSERA_ISA_DECLARE(round_f16_inplace)

void f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
  TESSERA_ISA_CALL(f32_to_bf16, out, inp, n);
}
void bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  TESSERA_ISA_CALL(bf16_to_f32, out, inp, n);
}
void f32_to_f16(uint16_t* out, const float* inp, int64_t n) {
  TESSERA_ISA_CALL(f32_to_f16, out, inp, n);
}
void f16_to_f32(float* out, const uint16_t* inp, int64_t n) {
  TESSERA_ISA_CALL(f16_to_f32, out, inp, n);
}
void round_bf16_inplace(float* x, uint16_t* bits, int64_t n) {
  TESSERA_ISA_CALL(round_bf16_inplace, x, bits, n);
}
void round_f16_inplace(float* x, uint16_t* bits, int64_t n) {
  TESSERA_ISA_CALL(round_f16_inplace, x, bits, n);
}
#endif

}  // namespace tessera::kernels::cpu
