// simd_exp: an expf that the compiler can vectorise (an OpenMP `declare simd` function), used by
// the softmax, attention and GELU kernels through simd_math.h, in each of their per-ISA copies.
#include "kernels/cpu/simd_math.h"

#include <bit>
#include <cstdint>

namespace tessera::kernels::cpu::TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {
// A signed integer that orders like the float whose bits it is given (and back: the map is its own
// inverse). Clamping through it takes integer min/max only: a float comparison, which may trap,
// is not if-converted under the default -ftrapping-math, and the function would not vectorise.
constexpr int32_t ordered(int32_t bits) { return bits ^ ((bits >> 31) & 0x7fffffff); }
constexpr int32_t kLow = ordered(std::bit_cast<int32_t>(-87.0f));  // below: 0 (no subnormals)
constexpr int32_t kHigh = ordered(std::bit_cast<int32_t>(89.0f));  // above: inf in float
}  // namespace

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]; exp(r) by its
// degree-7 Taylor polynomial (|error| < 1e-8 on that interval), so the result is within ~1.5 ulp.
// x is first clamped to [-87, 89]: above, the result is inf anyway; below, it is returned as 0
// rather than as a subnormal (exp(-87) = 1.6e-38), because arithmetic that produces subnormals
// takes a microcode assist of ~100 cycles on x86, and softmax feeds exp(-inf) for every masked
// key. 2^n is applied in two halves so that n = 128 (x near 88.7) stays finite. exp(-inf) = 0,
// exp(inf) = inf, NaN stays NaN.
#pragma omp declare simd notinbranch
float simd_exp(float x) {
  const int32_t bits = std::bit_cast<int32_t>(x);
  const int32_t key = ordered(bits);
  const int32_t raised = key < kLow ? kLow : key;
  const int32_t zero_mask = (key - raised) >> 31;  // all ones where x < -87: the result is 0
  const float xc = std::bit_cast<float>(ordered(raised > kHigh ? kHigh : raised));
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;  // ln 2, high part (exact product)
  r = r - n * -2.12194440e-4f;      // ln 2, low part
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni >> 1;
  const float y =
      p * std::bit_cast<float>((half + 127) << 23) * std::bit_cast<float>((ni - half + 127) << 23);
  const int32_t nan_mask = (0x7f800000 - (bits & 0x7fffffff)) >> 31;  // all ones iff x is NaN
  return std::bit_cast<float>((std::bit_cast<int32_t>(y) & ~(zero_mask | nan_mask)) | (bits & nan_mask));
}

}  // namespace tessera::kernels::cpu::TESSERA_ISA
