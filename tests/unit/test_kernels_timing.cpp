// The per-step time split (kernels/kernel_timing.h): kernels are sorted into their kinds by name,
// every CPU kernel call through kernels/ops.h adds to its kind on the calling thread, and
// take_kernel_times() hands the sums over and starts again.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/tensor.h"
#include "kernels/kernel_timing.h"
#include "kernels/ops.h"

using tessera::Tensor;
using tessera::kernels::kernel_kind;
using tessera::kernels::KernelKind;
using tessera::kernels::take_kernel_times;

TEST(KernelTiming, KindsFollowTheKernelNames) {
  EXPECT_EQ(kernel_kind("gemm"), KernelKind::gemm);
  EXPECT_EQ(kernel_kind("gemm_batched"), KernelKind::gemm);
  EXPECT_EQ(kernel_kind("attention_forward"), KernelKind::attention);
  EXPECT_EQ(kernel_kind("attention_block_backward"), KernelKind::attention);
  EXPECT_EQ(kernel_kind("adamw"), KernelKind::optimizer);
  EXPECT_EQ(kernel_kind("sum_squares"), KernelKind::optimizer);  // the gradient norm, for clipping
  EXPECT_EQ(kernel_kind("layernorm_forward"), KernelKind::other);
  EXPECT_EQ(kernel_kind("embedding_backward"), KernelKind::other);
}

TEST(KernelTiming, CallsAddToTheirKindUntilTaken) {
  take_kernel_times();
  const auto nothing = take_kernel_times();  // no kernel ran since the last take
  for (double ms : nothing.ms) EXPECT_EQ(ms, 0.0);

  Tensor a = Tensor::zeros({64, 64}), b = Tensor::zeros({64, 64}), c = Tensor::zeros({64, 64});
  tessera::ops::matmul(a, false, b, true, c);
  const auto after_gemm = take_kernel_times();
  EXPECT_GT(after_gemm.of(KernelKind::gemm), 0.0);
  EXPECT_EQ(after_gemm.of(KernelKind::attention), 0.0);
  EXPECT_EQ(after_gemm.of(KernelKind::optimizer), 0.0);
  EXPECT_EQ(after_gemm.of(KernelKind::other), 0.0);

  tessera::ops::add_inplace(c, a);
  const auto after_add = take_kernel_times();
  EXPECT_EQ(after_add.of(KernelKind::gemm), 0.0) << "taking must reset the sums";
  EXPECT_GT(after_add.of(KernelKind::other), 0.0);

  (void)tessera::ops::sum_squares(c);
  const auto after_norm = take_kernel_times();
  EXPECT_GT(after_norm.of(KernelKind::optimizer), 0.0);
  EXPECT_EQ(after_norm.of(KernelKind::other), 0.0);
}

TEST(KernelTiming, ATimerAddsToTheKindItNames) {
  take_kernel_times();
  {
    const tessera::kernels::KernelTimer waiting_for_data(KernelKind::data);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // sleeps at least that long
  }
  const auto taken = take_kernel_times();
  EXPECT_GE(taken.of(KernelKind::data), 2.0);
  EXPECT_EQ(taken.of(KernelKind::gemm), 0.0);
}
