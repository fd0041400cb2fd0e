// Unit tests of the CPU elementwise kernels through ops::: add, add_inplace, scale_inplace,
// broadcast_rows, bias_backward (both of its strategies, accumulating), GELU forward against the
// tanh formula in double, GELU backward against finite differences of that formula, sum_squares
// and its fused twin that rounds to bf16 as it sums.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 99, stream, 0.0f, std);
}

using Threads = tessera::testing::ScopedThreads;

double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

// Inputs for GELU: random normals (scaled so that the tails are reached) and fixed hard cases.
Tensor gelu_inputs() {
  Tensor x = random_tensor({5003}, 1, 3.0f);
  const float fixed[] = {0.0f, -0.0f, 1e-6f, -1e-6f, 0.5f, -0.5f, 1.0f, -1.0f, 3.0f, -3.0f, 10.0f, -10.0f, 50.0f, -50.0f};
  for (size_t i = 0; i < std::size(fixed); ++i) x.data<float>()[i] = fixed[i];
  return x;
}

TEST(Elementwise, AddAddInplaceScale) {
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{70001}}) {
      const Tensor a = random_tensor({n}, 2), b = random_tensor({n}, 3);
      Tensor out = Tensor::empty({n});
      tessera::ops::add(out, a, b);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.data<float>()[i], a.data<float>()[i] + b.data<float>()[i]);
      Tensor acc = a.clone();
      tessera::ops::add_inplace(acc, b);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(acc.data<float>()[i], a.data<float>()[i] + b.data<float>()[i]);
      tessera::ops::scale_inplace(acc, -0.25f);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(acc.data<float>()[i], (a.data<float>()[i] + b.data<float>()[i]) * -0.25f);
    }
  }
}

TEST(Elementwise, BroadcastRows) {
  const Tensor bias = random_tensor({13}, 4);
  Tensor out = random_tensor({3, 7, 13}, 5);
  tessera::ops::broadcast_rows(out, bias);
  for (int64_t r = 0; r < 21; ++r)
    for (int64_t c = 0; c < 13; ++c) ASSERT_EQ(out.data<float>()[r * 13 + c], bias.data<float>()[c]);
}

// Both paths: wide rows (threads own column blocks) and narrow rows (per-thread partial sums).
TEST(Elementwise, BiasBackwardAccumulatesColumnSums) {
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 5}, {7, 13}, {3001, 11}, {45, 1000}, {64, 2050}}) {
      const Tensor dout = random_tensor({rows, cols}, 6);
      Tensor dbias = random_tensor({cols}, 7);
      const Tensor before = dbias.clone();
      tessera::ops::bias_backward(dbias, dout);
      double worst = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        double s = before.data<float>()[c];
        for (int64_t r = 0; r < rows; ++r) s += dout.data<float>()[r * cols + c];
        worst = std::max(worst, std::fabs(dbias.data<float>()[c] - s) / (1.0 + std::sqrt(double(rows))));
      }
      EXPECT_LT(worst, 2e-6) << "threads=" << threads << " rows=" << rows << " cols=" << cols;
    }
  }
}

TEST(Elementwise, GeluForwardMatchesTanhFormula) {
  for (int threads : {1, 3}) {
    Threads scope(threads);
    const Tensor x = gelu_inputs();
    Tensor y = Tensor::empty(x.shape());
    tessera::ops::gelu_forward(y, x);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double want = gelu_ref(x.data<float>()[i]);
      // In the negative tail the float rounding of u grows into exp(-2u): relative 1e-6, plus 1e-9.
      ASSERT_NEAR(y.data<float>()[i], want, 1e-6 * std::fabs(want) + 1e-9) << "x=" << x.data<float>()[i];
    }
  }
}

// The fused bias + GELU: pre ends as pre + bias (row-broadcast) and out as gelu of that, bit for bit
// what the separate kernels give; rows of a width that is not a multiple of the SIMD lanes.
TEST(Elementwise, BiasGeluForwardEqualsBiasThenGelu) {
  for (int threads : {1, 3}) {
    Threads scope(threads);
    const int64_t rows = 70, cols = 1031;
    const Tensor x = random_tensor({rows, cols}, 21, 3.0f), bias = random_tensor({cols}, 22);
    Tensor biased = Tensor::empty({rows, cols}), want = Tensor::empty({rows, cols});
    tessera::ops::broadcast_rows(biased, bias);
    tessera::ops::add_inplace(biased, x);
    tessera::ops::gelu_forward(want, biased);
    Tensor pre = x.clone(), out = Tensor::empty({rows, cols});
    tessera::ops::bias_gelu_forward(out, pre, bias);
    for (int64_t i = 0; i < rows * cols; ++i) {
      ASSERT_EQ(pre.data<float>()[i], biased.data<float>()[i]) << i;
      ASSERT_EQ(out.data<float>()[i], want.data<float>()[i]) << i;
    }
  }
  Tensor pre = Tensor::zeros({4, 5}), out = Tensor::empty({4, 5});
  const Tensor wrong_bias = Tensor::zeros({4});
  EXPECT_THROW(tessera::ops::bias_gelu_forward(out, pre, wrong_bias), std::exception);
}

// The kernel's derivative against central differences of the formula in double (h = 1e-5: the
// difference error is ~1e-10, far below the float tolerance); dinp aliases dout here.
TEST(Elementwise, GeluBackwardMatchesFiniteDifferences) {
  const Tensor x = gelu_inputs();
  const Tensor dout = random_tensor(x.shape(), 8);
  Tensor grad = dout.clone();
  tessera::ops::gelu_backward(grad, x, grad);
  const double h = 1e-5;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double xi = x.data<float>()[i];
    const double fd = (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h) * dout.data<float>()[i];
    ASSERT_NEAR(grad.data<float>()[i], fd, 1e-6 * std::fabs(fd) + 1e-7) << "x=" << xi;
  }
}

TEST(Elementwise, SumSquaresInDouble) {
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{19}, int64_t{100003}}) {
      const Tensor x = random_tensor({n}, 9);
      double want = 0.0;
      for (int64_t i = 0; i < n; ++i) want += double(x.data<float>()[i]) * x.data<float>()[i];
      EXPECT_NEAR(tessera::ops::sum_squares(x), want, 1e-12 * want) << "n=" << n;
    }
  }
  // Beyond float's exact integers: 2^25 ones must sum to exactly 2^25 in double.
  const int64_t big = int64_t{1} << 25;
  std::vector<float> ones(big, 1.0f);
  EXPECT_EQ(tessera::kernels::cpu::sum_squares(ones.data(), big), double(big));
}

// Rounding to bf16 in place while summing squares: the values as round_inplace leaves them (bit
// for bit, NaN and inf included) and the sum sum_squares gives of them, on one thread and three,
// below and above the size that goes parallel.
TEST(Elementwise, RoundBf16InPlaceSumSquaresIsRoundThenSumSquares) {
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (int64_t n : {int64_t{1}, int64_t{19}, int64_t{100003}}) {
      Tensor x = random_tensor({n}, 10, 3.0f);
      x.data<float>()[0] = 1.0f + 0x1p-8f;  // halfway between the bf16 values 1 and 1 + 2^-7: to even, 1
      Tensor want = x.clone();
      tessera::ops::round_inplace(want, tessera::DType::bf16);
      const double want_sum = tessera::ops::sum_squares(want);
      const double got_sum = tessera::ops::round_bf16_inplace_sum_squares(x);
      EXPECT_EQ(0, std::memcmp(x.raw(), want.raw(), want.nbytes())) << "n=" << n << " threads=" << threads;
      EXPECT_NEAR(got_sum, want_sum, 1e-12 * want_sum) << "n=" << n << " threads=" << threads;
      EXPECT_EQ(x.data<float>()[0], 1.0f) << "a tie rounds to even";
    }
  }
  Tensor special = Tensor::empty({3});
  special.data<float>()[0] = std::numeric_limits<float>::infinity();
  special.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  special.data<float>()[2] = 0.5f;
  EXPECT_TRUE(std::isnan(tessera::ops::round_bf16_inplace_sum_squares(special)));
  EXPECT_TRUE(std::isinf(special.data<float>()[0]));
  EXPECT_TRUE(std::isnan(special.data<float>()[1]));
  EXPECT_EQ(special.data<float>()[2], 0.5f);
}

}  // namespace
