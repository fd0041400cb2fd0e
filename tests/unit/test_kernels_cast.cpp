// Unit tests of the CPU casts through ops::cast: f32 <-> bf16 and f32 <-> f16 on known bit
// patterns (1, -2.5, 65504, subnormals, ties to even, inf, NaN), every 16-bit pattern round trip,
// and random floats against an independent round-to-nearest-even reference; ops::round_inplace
// against the cast there and back, with and without its bits, and its refusals.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::DType;
using tessera::Tensor;

namespace {

std::vector<uint16_t> to_half(const std::vector<float>& x, DType dtype) {
  Tensor in = Tensor::empty({static_cast<int64_t>(x.size())});
  std::copy(x.begin(), x.end(), in.data<float>());
  Tensor out = Tensor::empty(in.shape(), dtype);
  tessera::ops::cast(out, in);
  return {out.bits16(), out.bits16() + x.size()};
}

std::vector<float> from_half(const std::vector<uint16_t>& h, DType dtype) {
  Tensor in = Tensor::empty({static_cast<int64_t>(h.size())}, dtype);
  std::copy(h.begin(), h.end(), in.bits16());
  Tensor out = Tensor::empty(in.shape());
  tessera::ops::cast(out, in);
  return {out.data<float>(), out.data<float>() + h.size()};
}

float bits(uint32_t u) { return std::bit_cast<float>(u); }

// Round x to a float format with `mantissa` stored bits and minimum normal exponent `min_exp`
// (subnormals below it), nearest even, overflowing to inf past `max_finite`. Exact in double.
double round_ref(double x, int mantissa, int min_exp, double max_finite) {
  if (x == 0.0 || std::isnan(x) || std::isinf(x)) return x;
  const int e = std::max(std::ilogb(x), min_exp);
  const double ulp = std::ldexp(1.0, e - mantissa);
  const double r = std::nearbyint(x / ulp) * ulp;  // default rounding mode: to nearest even
  const double limit = max_finite + std::ldexp(1.0, std::ilogb(max_finite) - mantissa - 1);  // halfway to next
  return std::fabs(x) >= limit ? std::copysign(INFINITY, x) : r;
}

TEST(Cast, Bf16KnownValues) {
  const std::vector<float> x = {1.0f, -2.5f, 0.0f, -0.0f, INFINITY, -INFINITY,
                                bits(0x3F808000u),   // 1 + 2^-8: tie, stays at even 0x3F80
                                bits(0x3F818000u),   // 1 + 3 * 2^-8: tie, rounds up to even 0x3F82
                                bits(0x3F808001u),   // just above the tie: up
                                bits(0x3F807FFFu),   // just below the tie: down
                                3.4028234663852886e38f,  // FLT_MAX rounds to inf
                                bits(0x00000001u)};  // smallest subnormal: rounds to 0
  const std::vector<uint16_t> want = {0x3F80, 0xC020, 0x0000, 0x8000, 0x7F80, 0xFF80,
                                      0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0x0000};
  EXPECT_EQ(to_half(x, DType::bf16), want);
  const auto nan = to_half({NAN, -NAN, bits(0x7F800001u)}, DType::bf16);  // the last: a payload below bit 16
  for (uint16_t h : nan) EXPECT_TRUE((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0) << std::hex << h;
}

TEST(Cast, F16KnownValues) {
  const std::vector<float> x = {1.0f, -2.5f, 0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, INFINITY,
                                std::ldexp(1.0f, -14),  // smallest normal
                                std::ldexp(1.0f, -24),  // smallest subnormal
                                std::ldexp(1.0f, -25),  // half of it: tie, to even 0
                                std::ldexp(3.0f, -25),  // 1.5 subnormal ulps: tie, to even 2
                                std::ldexp(1.0f, -26),  // below half: 0
                                1.0f + std::ldexp(1.0f, -11),  // tie: stays 1
                                1.0f + std::ldexp(3.0f, -11),  // tie: up to even 0x3C02
                                0.1f, 1e-30f, 1e30f};
  const std::vector<uint16_t> want = {0x3C00, 0xC100, 0x0000, 0x8000, 0x7BFF, 0x7BFF, 0x7C00, 0xFC00, 0x7C00,
                                      0x0400, 0x0001, 0x0000, 0x0002, 0x0000, 0x3C00, 0x3C02,
                                      0x2E66, 0x0000, 0x7C00};
  EXPECT_EQ(to_half(x, DType::f16), want);
  for (uint16_t h : to_half({NAN, -NAN}, DType::f16)) EXPECT_TRUE((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
  const auto back = from_half({0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x8000}, DType::f16);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[2], 65504.0f);
  EXPECT_EQ(back[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(back[4], std::ldexp(1023.0f, -24));
  EXPECT_EQ(back[5], std::ldexp(1.0f, -14));
  EXPECT_EQ(back[6], INFINITY);
  EXPECT_EQ(back[7], -INFINITY);
  EXPECT_TRUE(back[8] == 0.0f && std::signbit(back[8]));
  EXPECT_TRUE(std::isnan(from_half({0x7E00}, DType::f16)[0]));
  EXPECT_EQ(from_half({0x3F80, 0xC020, 0x0001}, DType::bf16), (std::vector<float>{1.0f, -2.5f, bits(0x00010000u)}));
}

// Every 16-bit pattern survives 16 -> 32 -> 16 bit for bit (NaNs as NaNs), on 1 and 3 threads
// (65536 elements: several parallel chunks and a vector tail).
TEST(Cast, EveryHalfPatternRoundTrips) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (int threads : {1, 3}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (DType dtype : {DType::f16, DType::bf16}) {
      const uint16_t exp_mask = dtype == DType::f16 ? 0x7C00 : 0x7F80;
      const auto back = to_half(from_half(all, dtype), dtype);
      for (uint32_t i = 0; i < 65536; ++i) {
        const bool is_nan = (i & exp_mask) == exp_mask && (i & ~(exp_mask | 0x8000u)) != 0;
        if (is_nan) {
          ASSERT_TRUE((back[i] & exp_mask) == exp_mask && (back[i] & ~(exp_mask | 0x8000u)) != 0) << i;
          ASSERT_EQ(back[i] & 0x8000, i & 0x8000) << i;
        } else {
          ASSERT_EQ(back[i], i) << dtype_name(dtype) << " pattern " << i;
        }
      }
    }
    omp_set_num_threads(saved);
  }
}

// Random floats over many binades (f16 normal, subnormal, overflow; bf16 across the full range)
// against the double reference; an odd length exercises the scalar tail.
TEST(Cast, RandomFloatsRoundToNearestEven) {
  const int64_t n = 100003;
  std::vector<float> x(n), u(n);
  tessera::philox_fill_uniform(u.data(), n, 5, 1, 0, 0.0f, 1.0f);
  tessera::philox_fill_normal(x.data(), n, 5, 2, 0, 0.0f, 1.0f);
  std::vector<float> x16(n), xb(n);
  for (int64_t i = 0; i < n; ++i) {
    x16[i] = x[i] * std::ldexp(1.0f, static_cast<int>(u[i] * 46.0f) - 28);   // 2^-28 .. 2^18
    xb[i] = x[i] * std::ldexp(1.0f, static_cast<int>(u[i] * 240.0f) - 120);  // 2^-120 .. 2^120
  }
  const auto h = from_half(to_half(x16, DType::f16), DType::f16);
  const auto b = from_half(to_half(xb, DType::bf16), DType::bf16);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(double(h[i]), round_ref(x16[i], 10, -14, 65504.0)) << "f16 of " << x16[i];
    ASSERT_EQ(double(b[i]), round_ref(xb[i], 7, -126, 3.3895313892515355e38)) << "bf16 of " << xb[i];
  }
}

// round_inplace gives what the cast there and back gives, bit for bit (NaN: a NaN), on 1 and 3
// threads, and its bits are the cast's.
TEST(Cast, RoundInplaceEqualsTheCastThereAndBack) {
  const int64_t n = 70001;
  std::vector<float> x(n), u(n);
  tessera::philox_fill_uniform(u.data(), n, 6, 1, 0, 0.0f, 1.0f);
  tessera::philox_fill_normal(x.data(), n, 6, 2, 0, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(u[i] * 60.0f) - 30);
  x[0] = NAN;
  x[1] = INFINITY;
  x[2] = bits(0x3f808000u);  // a bf16 tie
  x[3] = 70000.0f;           // past f16's largest: inf
  for (DType dtype : {DType::bf16, DType::f16}) {
    const auto want_bits = to_half(x, dtype);
    const auto want = from_half(want_bits, dtype);
    for (int threads : {1, 3}) {
      const tessera::testing::ScopedThreads scope(threads);
      for (bool with_bits : {false, true}) {
        Tensor values = Tensor::empty({n});
        std::copy(x.begin(), x.end(), values.data<float>());
        Tensor low = with_bits ? Tensor::empty({n + 5}, dtype) : Tensor();  // larger is allowed
        tessera::ops::round_inplace(values, dtype, low);
        for (int64_t i = 0; i < n; ++i) {
          const float got = values.data<float>()[i];
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got)) << i;
          } else {
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[i]))
                << tessera::dtype_name(dtype) << " of " << x[i] << ", threads " << threads;
          }
          if (with_bits && !std::isnan(want[i])) {
            ASSERT_EQ(low.bits16()[i], want_bits[i]) << i;
          }
        }
      }
    }
  }
}

TEST(Cast, RoundInplaceRefusesBadArguments) {
  Tensor values = Tensor::empty({8});
  Tensor short_bits = Tensor::empty({7}, DType::bf16), f16_bits = Tensor::empty({8}, DType::f16);
  EXPECT_THROW(tessera::ops::round_inplace(values, DType::bf16, short_bits), tessera::Error);
  EXPECT_THROW(tessera::ops::round_inplace(values, DType::bf16, f16_bits), tessera::Error);
  EXPECT_THROW(tessera::ops::round_inplace(values, DType::f32), tessera::Error);
  Tensor low = Tensor::empty({8}, DType::bf16);
  EXPECT_THROW(tessera::ops::round_inplace(low, DType::bf16), tessera::Error);
}

}  // namespace
