// Unit tests of simd_exp, the vectorisable expf behind softmax, attention and GELU (an internal
// function of the CPU kernels, declared here as the kernels declare it, in its base copy, isa.h):
// accuracy within 2 ulp over the whole normal range, called both vectorised and scalar, and the
// special values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tessera::kernels::cpu::isa_base {
#pragma omp declare simd notinbranch
float simd_exp(float x);
}  // namespace tessera::kernels::cpu::isa_base

using tessera::kernels::cpu::isa_base::simd_exp;

namespace {

// simd_exp over x in a loop the compiler vectorises: the SIMD variants are what the kernels call.
std::vector<float> exp_of(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  const float* in = x.data();
  float* out = y.data();
  const int64_t n = static_cast<int64_t>(x.size());
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = simd_exp(in[i]);
  return y;
}

// Error in units of the last place of the float result (ulp of the double exp, at float precision).
double ulps(float got, double want) { return std::fabs(got - want) / std::ldexp(1.0, std::ilogb(want) - 23); }

TEST(SimdExp, WithinTwoUlpOverTheNormalRange) {
  std::vector<float> x;
  for (float v = -87.0f; v < 88.72f; v += 1.7e-4f) x.push_back(v);
  const std::vector<float> y = exp_of(x);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, ulps(y[i], std::exp(double(x[i]))));
    ASSERT_LE(ulps(simd_exp(x[i]), std::exp(double(x[i]))), 2.0) << "scalar call, x = " << x[i];
  }
  EXPECT_LE(worst, 2.0);
}

TEST(SimdExp, SpecialValues) {
  const std::vector<float> x = {0.0f, -0.0f, 1.0f, -INFINITY, INFINITY, NAN, -NAN, -87.5f, -1e30f, 88.75f, 1e30f};
  const std::vector<float> y = exp_of(x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_LE(ulps(y[2], M_E), 1.0);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], INFINITY);
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_TRUE(std::isnan(y[6]));
  EXPECT_EQ(y[7], 0.0f);  // below exp(-87): flushed to 0, never subnormal
  EXPECT_EQ(y[8], 0.0f);
  EXPECT_EQ(y[9], INFINITY);
  EXPECT_EQ(y[10], INFINITY);
  EXPECT_LE(ulps(simd_exp(88.7f), std::exp(double(88.7f))), 2.0);  // 2^128 territory stays finite
}

}  // namespace
