// CUDA casts f32 <-> bf16 / f16 against the CPU twins, bit for bit: random values over many
// magnitudes plus the edge cases (ties, overflow to inf, half subnormals, signed zeros, inf);
// NaN must stay NaN. Widening every 16-bit pattern must match too, and so must the in-place
// rounding (values and bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Normal values scaled over 2^-30 .. 2^20, and the edge cases of both formats.
std::vector<float> narrowing_inputs() {
  auto v = normal(50000, 11);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>(i % 51) - 30);
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f, -0.0f, inf, -inf, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f,
                         5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 6.0e-5f, 1e-40f, 3.4e38f, -3.4e38f,
                         from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0x3f80c000u),  // bf16 ties
                         from_bits(0x3f801000u), from_bits(0x3f803000u),                          // f16 ties
                         1.0f, -1.0f, 0.1f, 1.0f / 3.0f};
  v.insert(v.end(), std::begin(edges), std::end(edges));
  return v;
}

std::vector<uint16_t> all_patterns() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

// Equal bits, except that a NaN only has to be a NaN.
void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
    } else if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
      return;
    }
  }
}

// Narrowed patterns: equal, except NaNs compared as NaNs (exponent all ones, mantissa nonzero).
void expect_same_halves(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, int mantissa_bits,
                        const std::vector<float>& inputs, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const uint16_t exp_mask = static_cast<uint16_t>(0x7fffu & ~((1u << mantissa_bits) - 1));
  const uint16_t man_mask = static_cast<uint16_t>((1u << mantissa_bits) - 1);
  auto is_nan = [&](uint16_t h) { return (h & exp_mask) == exp_mask && (h & man_mask) != 0; };
  for (size_t i = 0; i < got.size(); ++i) {
    if (is_nan(want[i])) {
      EXPECT_TRUE(is_nan(got[i])) << what << " element " << i;
    } else if (got[i] != want[i]) {
      ADD_FAILURE() << what << " element " << i << " (" << inputs[i] << "): got 0x" << std::hex << got[i]
                    << ", want 0x" << want[i];
      return;
    }
  }
}

}  // namespace

TEST(CudaCast, F32ToBf16AndBackMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  auto x = narrowing_inputs();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> want(n);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> dh(n);
  cpu::f32_to_bf16(want.data(), x.data(), n);
  gpu::f32_to_bf16(dh.get(), dx.get(), n);
  expect_same_halves(dh.host(), want, 7, x, "f32_to_bf16");

  const auto patterns = all_patterns();
  std::vector<float> wide(patterns.size());
  DeviceBuffer<uint16_t> dp(patterns);
  DeviceBuffer<float> dw(patterns.size());
  cpu::bf16_to_f32(wide.data(), patterns.data(), static_cast<int64_t>(patterns.size()));
  gpu::bf16_to_f32(dw.get(), dp.get(), static_cast<int64_t>(patterns.size()));
  expect_same_floats(dw.host(), wide, "bf16_to_f32");
}

TEST(CudaCast, F32ToF16AndBackMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  auto x = narrowing_inputs();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> want(n);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> dh(n);
  cpu::f32_to_f16(want.data(), x.data(), n);
  gpu::f32_to_f16(dh.get(), dx.get(), n);
  expect_same_halves(dh.host(), want, 10, x, "f32_to_f16");

  const auto patterns = all_patterns();
  std::vector<float> wide(patterns.size());
  DeviceBuffer<uint16_t> dp(patterns);
  DeviceBuffer<float> dw(patterns.size());
  cpu::f16_to_f32(wide.data(), patterns.data(), static_cast<int64_t>(patterns.size()));
  gpu::f16_to_f32(dw.get(), dp.get(), static_cast<int64_t>(patterns.size()));
  expect_same_floats(dw.host(), wide, "f16_to_f32");
}

TEST(CudaCast, RoundInplaceMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  auto x = narrowing_inputs();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(x.size());
  for (int mantissa : {7, 10}) {
    const bool bf16 = mantissa == 7;
    std::vector<float> want = x;
    std::vector<uint16_t> want_bits(n);
    (bf16 ? cpu::round_bf16_inplace : cpu::round_f16_inplace)(want.data(), want_bits.data(), n);
    DeviceBuffer<float> dx(x), dy(x);
    DeviceBuffer<uint16_t> dh(n);
    (bf16 ? gpu::round_bf16_inplace : gpu::round_f16_inplace)(dx.get(), dh.get(), n);
    (bf16 ? gpu::round_bf16_inplace : gpu::round_f16_inplace)(dy.get(), nullptr, n);
    expect_same_floats(dx.host(), want, bf16 ? "round_bf16_inplace" : "round_f16_inplace");
    expect_same_floats(dy.host(), want, "without bits");
    expect_same_halves(dh.host(), want_bits, mantissa, x, "its bits");
  }
}
