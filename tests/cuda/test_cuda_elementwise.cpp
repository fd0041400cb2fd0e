// CUDA elementwise ops and reductions against the CPU twins, on sizes that do not fill the last
// block: add, add_inplace, scale_inplace, broadcast_rows bit for bit; gelu forward/backward (also
// with dinp aliasing dout) and bias + gelu within 1e-6 + 1e-5 |x| (its biased input bit for
// bit); bias_backward (accumulating, deterministic) within 1e-4 + 1e-7 rows + 1e-5 |x|;
// sum_squares within 1e-10 relative, deterministic.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {
constexpr int64_t kN = 100003;  // not a multiple of any block size
}

TEST(CudaElementwise, AddAddInplaceScaleMatchCpuExactly) {
  TESSERA_REQUIRE_CUDA();
  const auto a = normal(kN, 1), b = normal(kN, 2);
  DeviceBuffer<float> da(a), db(b), dout(kN);
  dout.fill_bytes(0xff);

  std::vector<float> want(kN);
  cpu::add(want.data(), a.data(), b.data(), kN);
  gpu::add(dout.get(), da.get(), db.get(), kN);
  EXPECT_TRUE(bit_equal(dout.host(), want)) << "add";

  std::vector<float> acc = a;
  cpu::add_inplace(acc.data(), b.data(), kN);
  gpu::add_inplace(da.get(), db.get(), kN);
  EXPECT_TRUE(bit_equal(da.host(), acc)) << "add_inplace";

  cpu::scale_inplace(acc.data(), -0.37f, kN);
  gpu::scale_inplace(da.get(), -0.37f, kN);
  EXPECT_TRUE(bit_equal(da.host(), acc)) << "scale_inplace";
}

TEST(CudaElementwise, BroadcastRowsMatchesCpuExactly) {
  TESSERA_REQUIRE_CUDA();
  const int64_t rows = 129, cols = 77;
  const auto bias = normal(cols, 3);
  std::vector<float> want(rows * cols);
  DeviceBuffer<float> dbias(bias), dout(rows * cols);
  dout.fill_bytes(0xff);
  cpu::broadcast_rows(want.data(), bias.data(), rows, cols);
  gpu::broadcast_rows(dout.get(), dbias.get(), rows, cols);
  EXPECT_TRUE(bit_equal(dout.host(), want));
}

TEST(CudaElementwise, GeluForwardBackwardMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  const auto x = normal(kN, 4, 3.0f), dy = normal(kN, 5);
  DeviceBuffer<float> dx(x), ddy(dy), dout(kN), dgrad(kN);

  std::vector<float> want(kN), want_grad(kN);
  cpu::gelu_forward(want.data(), x.data(), kN);
  gpu::gelu_forward(dout.get(), dx.get(), kN);
  EXPECT_TRUE(all_close(dout.host(), want, 1e-6, 1e-5)) << "gelu_forward";

  cpu::gelu_backward(want_grad.data(), x.data(), dy.data(), kN);
  gpu::gelu_backward(dgrad.get(), dx.get(), ddy.get(), kN);
  EXPECT_TRUE(all_close(dgrad.host(), want_grad, 1e-6, 1e-5)) << "gelu_backward";

  gpu::gelu_backward(ddy.get(), dx.get(), ddy.get(), kN);  // dinp aliasing dout
  EXPECT_TRUE(all_close(ddy.host(), want_grad, 1e-6, 1e-5)) << "gelu_backward in place";
}

TEST(CudaElementwise, BiasGeluForwardMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  const int64_t rows = 129, cols = 775;
  const auto x = normal(rows * cols, 8, 3.0f), bias = normal(cols, 9);
  DeviceBuffer<float> dpre(x), dbias(bias), dout(rows * cols);
  std::vector<float> pre = x, want(rows * cols);
  cpu::bias_gelu_forward(want.data(), pre.data(), bias.data(), rows, cols);
  gpu::bias_gelu_forward(dout.get(), dpre.get(), dbias.get(), rows, cols);
  EXPECT_TRUE(bit_equal(dpre.host(), pre)) << "pre + bias";
  EXPECT_TRUE(all_close(dout.host(), want, 1e-6, 1e-5)) << "gelu";
}

TEST(CudaElementwise, BiasBackwardAccumulatesLikeCpu) {
  TESSERA_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1000, 77}, {3, 1030}, {70000, 5}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto dy = normal(rows * cols, 6);
    auto want = normal(cols, 7);
    DeviceBuffer<float> ddy(dy), dbias(want);
    cpu::bias_backward(want.data(), dy.data(), rows, cols);
    gpu::bias_backward(dbias.get(), ddy.get(), rows, cols);
    const auto got = dbias.host();
    EXPECT_TRUE(all_close(got, want, 1e-4 + 1e-7 * static_cast<double>(rows), 1e-5));  // fp32 sums of rows terms
    DeviceBuffer<float> again(normal(cols, 7));  // deterministic: the same sums give the same bits
    gpu::bias_backward(again.get(), ddy.get(), rows, cols);
    EXPECT_TRUE(bit_equal(again.host(), got));
  }
}

// The fused rounding: the CPU twin's rounded values bit for bit, its sum to summation order, and
// the same sum on a second run (of the rounded values: rounding twice changes nothing).
TEST(CudaElementwise, RoundBf16InPlaceSumSquaresMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  for (int64_t n : {int64_t{1}, int64_t{1000}, kN, int64_t{3000017}}) {
    auto x = normal(n, 9, 2.0f);
    DeviceBuffer<float> dx(x);
    const double want = cpu::round_bf16_inplace_sum_squares(x.data(), n);
    const double got = gpu::round_bf16_inplace_sum_squares(dx.get(), n);
    EXPECT_TRUE(bit_equal(dx.host(), x)) << "n = " << n;
    EXPECT_NEAR(got, want, 1e-10 * want) << "n = " << n;
    EXPECT_EQ(got, gpu::round_bf16_inplace_sum_squares(dx.get(), n)) << "n = " << n << ": not deterministic";
  }
  EXPECT_EQ(gpu::round_bf16_inplace_sum_squares(nullptr, 0), 0.0);
}

TEST(CudaElementwise, SumSquaresMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  for (int64_t n : {int64_t{1}, int64_t{1000}, kN, int64_t{3000017}}) {
    const auto x = normal(n, 8, 2.0f);
    DeviceBuffer<float> dx(x);
    const double want = cpu::sum_squares(x.data(), n), got = gpu::sum_squares(dx.get(), n);
    EXPECT_NEAR(got, want, 1e-10 * want) << "n = " << n;
    EXPECT_EQ(got, gpu::sum_squares(dx.get(), n)) << "n = " << n << ": not deterministic";
  }
  EXPECT_EQ(gpu::sum_squares(nullptr, 0), 0.0);
}
