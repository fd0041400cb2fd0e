// Unit tests of kernels/peak_flops.h: the GPU table gives the published peaks of the devices it
// knows (A100: 19.5 fp32 / 312 bf16 TFLOP/s at 108 SMs x 1.41 GHz; H100 SXM: 67 fp32 at 132 SMs x
// 1.98 GHz, and 4096 bf16 FLOPs per SM and clock), and nothing for the others; the CPU's peaks are
// measured rates.
#include <gtest/gtest.h>

#include "kernels/peak_flops.h"

using tessera::kernels::gpu_peak_tflops;

TEST(PeakFlops, A100FromItsArchitecture) {
  EXPECT_NEAR(*gpu_peak_tflops(8, 0, 108, 1.41, false), 19.5, 0.1);
  EXPECT_NEAR(*gpu_peak_tflops(8, 0, 108, 1.41, true), 312.0, 0.5);
}

TEST(PeakFlops, H100FromItsArchitecture) {
  EXPECT_NEAR(*gpu_peak_tflops(9, 0, 132, 1.98, false), 66.9, 0.1);
  EXPECT_NEAR(*gpu_peak_tflops(9, 0, 132, 1.83, true), 989.4, 0.5);  // the published figure's clock
}

TEST(PeakFlops, UnknownDevicesHaveNoPeak) {
  EXPECT_FALSE(gpu_peak_tflops(8, 6, 82, 1.7, false).has_value());   // sm_86: not in the table
  EXPECT_FALSE(gpu_peak_tflops(10, 0, 148, 1.9, true).has_value());  // sm_100: not in the table
  EXPECT_FALSE(gpu_peak_tflops(9, 0, 0, 1.98, false).has_value());   // no SMs reported
}

TEST(PeakFlops, CpuPeaksAreMeasuredForEachPrecision) {
  const auto fp32 = tessera::kernels::peak_tflops(tessera::Device::cpu, false);
  const auto bf16 = tessera::kernels::peak_tflops(tessera::Device::cpu, true);
  ASSERT_TRUE(fp32 && bf16);
  EXPECT_GT(*fp32, 0.0);
  EXPECT_GT(*bf16, 0.0);
}
