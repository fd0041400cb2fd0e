// simd_exp: an expf that the compiler can vectorise (an OpenMP `declare simd` function), used by
// the softmax, attention and GELU kernels; callers declare it themselves (no private header).
#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::kernels::cpu {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]; exp(r) by its
// degree-7 Taylor polynomial (|error| < 1e-8 on that interval), so the result is within ~1.5 ulp.
// 2^n is applied in two halves so that subnormal results come out right; exp(-inf) = 0,
// exp(x > 88.72) = inf, NaN stays NaN.
#pragma omp declare simd notinbranch
float simd_exp(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;     // ln 2, high part (exact product)
  r = r - n * -2.12194440e-4f;         // ln 2, low part
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
  const float scale_a = std::bit_cast<float>((half + 127) << 23);
  const float scale_b = std::bit_cast<float>((ni - half + 127) << 23);
  float y = p * scale_a * scale_b;
  y = x < -104.0f ? 0.0f : y;
  y = x > 88.72283935546875f ? INFINITY : y;
  return y;
}

}  // namespace tessera::kernels::cpu
