// CUDA layernorm against the CPU twin: forward (out, mean, rstd within 1e-5 + 1e-5 |x|) and backward
// accumulating onto nonzero dinp, dweight, dbias (within 1e-4 + 1e-5 |x|; the weight and bias
// gradients, sums over rows, within an absolute part grown by sqrt(rows / 100)), on widths below, at and above a warp's multiple, for each width
// class of the one-pass backward (up to 128, 256, 512, 1024 columns), wider rows (the three-pass
// backward) and more rows than the one-pass grid has warps; its gradients bit for bit the same on a
// second run; the fused residual add + layernorm (the sum exactly, the rest as the forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

TEST(CudaLayerNorm, ForwardAndBackwardMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{67, 300}, {5, 1024}, {1000, 20}, {1, 1}, {9, 200},
                                   {3000, 96}, {300, 1000}, {3, 1500}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto x = normal(rows * cols, 41, 2.0f, 0.5f), w = normal(cols, 42, 0.5f, 1.0f), b = normal(cols, 43);
    const auto dy = normal(rows * cols, 44);
    std::vector<float> out(rows * cols), mean(rows), rstd(rows);
    DeviceBuffer<float> dx(x), dw(w), db(b), ddy(dy), dout(rows * cols), dmean(rows), drstd(rows);
    dout.fill_bytes(0xff);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols, 1e-5f);
    gpu::layernorm_forward(dout.get(), dmean.get(), drstd.get(), dx.get(), dw.get(), db.get(), rows, cols, 1e-5f);
    EXPECT_TRUE(all_close(dout.host(), out, 1e-5, 1e-5)) << "out";
    EXPECT_TRUE(all_close(dmean.host(), mean, 1e-6, 1e-5)) << "mean";
    EXPECT_TRUE(all_close(drstd.host(), rstd, 1e-6, 1e-5)) << "rstd";

    // Backward from the CPU's saved statistics on both sides, so only the backward is compared.
    auto dinp = normal(rows * cols, 45), dweight = normal(cols, 46), dbias = normal(cols, 47);
    DeviceBuffer<float> ddinp(dinp), ddweight(dweight), ddbias(dbias), cmean(mean), crstd(rstd);
    cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dy.data(), x.data(), w.data(), mean.data(),
                            rstd.data(), rows, cols);
    gpu::layernorm_backward(ddinp.get(), ddweight.get(), ddbias.get(), ddy.get(), dx.get(), dw.get(), cmean.get(),
                            crstd.get(), rows, cols);
    EXPECT_TRUE(all_close(ddinp.host(), dinp, 1e-4, 1e-5)) << "dinp";
    // Sums over rows in fp32, in different orders: their rounding grows as sqrt(rows).
    const double sum_atol = 1e-4 * std::max(1.0, std::sqrt(static_cast<double>(rows) / 100.0));
    EXPECT_TRUE(all_close(ddweight.host(), dweight, sum_atol, 1e-5)) << "dweight";
    EXPECT_TRUE(all_close(ddbias.host(), dbias, sum_atol, 1e-5)) << "dbias";
  }
}

TEST(CudaLayerNorm, BackwardIsTheSameEveryRun) {
  TESSERA_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{3000, 768}, {3, 1500}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto x = normal(rows * cols, 61, 2.0f, 0.5f), w = normal(cols, 62, 0.5f, 1.0f), dy = normal(rows * cols, 63);
    std::vector<float> out(rows * cols), mean(rows), rstd(rows);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), rows, cols, 1e-5f);
    DeviceBuffer<float> dx(x), dw(w), ddy(dy), dmean(mean), drstd(rstd);
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<float> dinp(rows * cols), dweight(cols), dbias(cols);
      dinp.fill_bytes(0);
      dweight.fill_bytes(0);
      dbias.fill_bytes(0);
      gpu::layernorm_backward(dinp.get(), dweight.get(), dbias.get(), ddy.get(), dx.get(), dw.get(), dmean.get(),
                              drstd.get(), rows, cols);
      const std::vector<float> got[3] = {dinp.host(), dweight.host(), dbias.host()};
      for (int i = 0; i < 3; ++i) {
        if (run == 0) first[i] = got[i];
        else EXPECT_EQ(got[i], first[i]) << "gradient " << i << " differs between runs";
      }
    }
  }
}

TEST(CudaLayerNorm, AddLayernormMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{67, 300}, {5, 1024}, {1000, 20}, {1, 1}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto a = normal(rows * cols, 51, 2.0f, 0.5f), b = normal(rows * cols, 52);
    const auto w = normal(cols, 53, 0.5f, 1.0f), bias = normal(cols, 54);
    std::vector<float> sum(rows * cols), out(rows * cols), mean(rows), rstd(rows);
    cpu::add(sum.data(), a.data(), b.data(), rows * cols);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), bias.data(), rows, cols, 1e-5f);
    DeviceBuffer<float> da(a), db(b), dw(w), dbias(bias), dsum(rows * cols), dout(rows * cols), dmean(rows),
        drstd(rows);
    dsum.fill_bytes(0xff);
    dout.fill_bytes(0xff);
    gpu::add_layernorm_forward(dsum.get(), dout.get(), dmean.get(), drstd.get(), da.get(), db.get(), dw.get(),
                               dbias.get(), rows, cols, 1e-5f);
    EXPECT_TRUE(bit_equal(dsum.host(), sum)) << "sum";
    EXPECT_TRUE(all_close(dout.host(), out, 1e-5, 1e-5)) << "out";
    EXPECT_TRUE(all_close(dmean.host(), mean, 1e-6, 1e-5)) << "mean";
    EXPECT_TRUE(all_close(drstd.host(), rstd, 1e-6, 1e-5)) << "rstd";
    // In place over a, then over b, as the residual stream may be.
    for (bool over_a : {true, false}) {
      SCOPED_TRACE(over_a ? "sum over a" : "sum over b");
      DeviceBuffer<float> ia(a), ib(b);
      dout.fill_bytes(0xff);
      float* in_place = over_a ? ia.get() : ib.get();
      gpu::add_layernorm_forward(in_place, dout.get(), dmean.get(), drstd.get(), ia.get(), ib.get(), dw.get(),
                                 dbias.get(), rows, cols, 1e-5f);
      EXPECT_TRUE(bit_equal((over_a ? ia : ib).host(), sum)) << "sum";
      EXPECT_TRUE(all_close(dout.host(), out, 1e-5, 1e-5)) << "out";
      EXPECT_TRUE(all_close(dmean.host(), mean, 1e-6, 1e-5)) << "mean";
      EXPECT_TRUE(all_close(drstd.host(), rstd, 1e-6, 1e-5)) << "rstd";
    }
  }
}
