// Unit tests of the CPU GEMM kernels through ops::matmul / matmul_batched: all four transpose
// combinations, alpha and beta (accumulate), the empty inner dimension, batched on 1 and 3 threads,
// blocked shapes on 2 threads; and the choice of library (CTest runs this file on oneDNN and,
// prefixed "blas.", on the BLAS).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;

using tessera::testing::rel_error;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream) {
  return tessera::testing::random_tensor(std::move(shape), 1234, stream, 0.0f, 1.0f);
}

// OpenMP thread count for one scope (tests run under OMP_NUM_THREADS=1; races need more).
using Threads = tessera::testing::ScopedThreads;

// c = alpha op(a) op(b) + beta c0 in double; x(i, j) of a stored [rows, cols] matrix, transposed or not.
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const float* a,
                              const float* b, double beta, const float* c0) {
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        s += av * bv;
      }
      c[i * n + j] = alpha * s + (beta != 0.0 ? beta * c0[i * n + j] : 0.0);
    }
  return c;
}


struct Case {
  bool ta, tb;
};

class GemmTranspose : public ::testing::TestWithParam<Case> {};

TEST_P(GemmTranspose, MatchesDoubleReferenceWithAlphaAndBeta) {
  const auto [ta, tb] = GetParam();
  const int64_t m = 37, n = 19, k = 53;
  const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
  const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
  for (float beta : {0.0f, 1.0f, -0.5f}) {
    Tensor c = random_tensor({m, n}, 3);
    const Tensor c0 = c.clone();
    tessera::ops::matmul(a, ta, b, tb, c, 0.75f, beta);
    const auto want = reference(ta, tb, m, n, k, 0.75, a.data<float>(), b.data<float>(), beta, c0.data<float>());
    EXPECT_LT(rel_error(c.data<float>(), want), 1e-6) << "ta=" << ta << " tb=" << tb << " beta=" << beta;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFour, GemmTranspose,
                         ::testing::Values(Case{false, false}, Case{false, true}, Case{true, false}, Case{true, true}));

TEST(Gemm, BetaZeroIgnoresNanInOutput) {
  const Tensor a = random_tensor({4, 6}, 4), b = random_tensor({6, 5}, 5);
  Tensor c = Tensor::empty({4, 5});
  for (int64_t i = 0; i < c.numel(); ++i) c.data<float>()[i] = NAN;
  tessera::ops::matmul(a, false, b, false, c);
  const auto want = reference(false, false, 4, 5, 6, 1.0, a.data<float>(), b.data<float>(), 0.0, nullptr);
  EXPECT_LT(rel_error(c.data<float>(), want), 1e-6);
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  // a^T with a [0, 3], b [0, 4]: m = 3, k = 0, n = 4.
  const Tensor a = Tensor::empty({0, 3}), b = Tensor::empty({0, 4});
  Tensor c = random_tensor({3, 4}, 6);
  const Tensor c0 = c.clone();
  tessera::ops::matmul(a, true, b, false, c, 1.0f, 0.5f);
  for (int64_t i = 0; i < c.numel(); ++i) EXPECT_EQ(c.data<float>()[i], 0.5f * c0.data<float>()[i]);
  tessera::ops::matmul(a, true, b, false, c, 1.0f, 0.0f);
  for (int64_t i = 0; i < c.numel(); ++i) EXPECT_EQ(c.data<float>()[i], 0.0f);
}

TEST(Gemm, BatchedMatchesPerMatrixReference) {
  const int64_t m = 9, n = 17, k = 33;
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (int64_t batch : {1, 2, 7}) {
      for (Case cs : {Case{false, false}, Case{false, true}, Case{true, false}, Case{true, true}}) {
        const Tensor a = random_tensor(cs.ta ? Shape{batch, k, m} : Shape{batch, m, k}, 7);
        const Tensor b = random_tensor(cs.tb ? Shape{batch, n, k} : Shape{batch, k, n}, 8);
        Tensor c = random_tensor({batch, m, n}, 9);
        const Tensor c0 = c.clone();
        tessera::ops::matmul_batched(batch, a, cs.ta, b, cs.tb, c, 1.5f, 1.0f);
        for (int64_t i = 0; i < batch; ++i) {
          const auto want = reference(cs.ta, cs.tb, m, n, k, 1.5, a.data<float>() + i * m * k,
                                      b.data<float>() + i * k * n, 1.0, c0.data<float>() + i * m * n);
          EXPECT_LT(rel_error(c.data<float>() + i * m * n, want), 1e-6)
              << "threads=" << threads << " batch=" << batch << " matrix " << i << " ta=" << cs.ta << " tb=" << cs.tb;
        }
      }
    }
  }
}

TEST(Gemm, BlockedShapesOnTwoThreadsMatchTheReference) {
  Threads scope(2);
  for (const auto [m, n, k] : {std::array<int64_t, 3>{256, 300, 200}, {129, 67, 515}, {1, 777, 64}}) {
    for (Case cs : {Case{false, false}, Case{false, true}, Case{true, false}}) {
      const Tensor a = random_tensor(cs.ta ? Shape{k, m} : Shape{m, k}, 12);
      const Tensor b = random_tensor(cs.tb ? Shape{n, k} : Shape{k, n}, 13);
      Tensor c = random_tensor({m, n}, 14);
      const Tensor c0 = c.clone();
      tessera::ops::matmul(a, cs.ta, b, cs.tb, c, 1.0f, 1.0f);
      const auto want = reference(cs.ta, cs.tb, m, n, k, 1.0, a.data<float>(), b.data<float>(), 1.0, c0.data<float>());
      EXPECT_LT(rel_error(c.data<float>(), want), 1e-5) << m << "x" << n << "x" << k << " ta=" << cs.ta << " tb=" << cs.tb;
    }
  }
}

TEST(Gemm, LibraryFollowsTessera_CPU_GEMM) {
  const char* setting = std::getenv("TESSERA_CPU_GEMM");
#ifdef TESSERA_HAVE_ONEDNN
  const std::string by_default = "oneDNN";
#else
  const std::string by_default = "BLAS";
#endif
  const std::string expected = setting && std::string(setting) == "blas" ? "BLAS" : by_default;
  EXPECT_EQ(tessera::kernels::cpu::gemm_library_name(), expected);
  EXPECT_EQ(std::string(tessera::kernels::cpu::gemm_library_for("blas")), "BLAS");
  EXPECT_EQ(std::string(tessera::kernels::cpu::gemm_library_for(nullptr)), by_default);
  try {
    tessera::kernels::cpu::gemm_library_for("mkl");
    ADD_FAILURE() << "TESSERA_CPU_GEMM=mkl was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_CPU_GEMM must be onednn or blas, not 'mkl'"), std::string::npos)
        << e.what();
  }
}

TEST(Gemm, RejectsShapesThatDoNotFit) {
  const Tensor a = random_tensor({4, 6}, 10), b = random_tensor({5, 5}, 11);
  Tensor c = Tensor::empty({4, 5});
  EXPECT_THROW(tessera::ops::matmul(a, false, b, false, c), tessera::Error);
}

// ops::linear_forward on the CPU (cpu::gemm_bias): on oneDNN the bias is added in the matmul
// primitive's epilogue, so it matches the unfused ops it replaces (broadcast_rows + matmul, or
// matmul + bias_gelu_forward) to fp32 rounding; on the BLAS it is those ops, bit for bit. fp32
// and bf16 inputs, odd and blocked shapes; the empty product (the bias alone) on the kernel. The
// CUDA twin is tested against cpu::gemm_bias in tests/cuda/test_cuda_gemm_bias.cpp.
void expect_linear_matches_unfused(int64_t m, int64_t n, int64_t k, bool gelu, bool bf16) {
  SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << (gelu ? " +gelu" : "") << (bf16 ? " bf16" : " fp32")
                                  << " on " << tessera::kernels::cpu::gemm_library_name());
  const tessera::ops::MatmulInputs inputs = bf16 ? tessera::ops::MatmulInputs::bf16 : tessera::ops::MatmulInputs::f32;
  const Tensor x = random_tensor({m, k}, 20), w = random_tensor({n, k}, 21), bias = random_tensor({n}, 22);
  Tensor y = Tensor::empty({m, n}), pre = Tensor::empty({m, n});
  Tensor want = Tensor::empty({m, n}), want_pre = Tensor::empty({m, n});
  tessera::ops::linear_forward(y, x, w, bias, gelu ? &pre : nullptr, inputs);
  if (gelu) {
    tessera::ops::matmul(x, false, w, true, want_pre, 1.0f, 0.0f, inputs);
    tessera::ops::bias_gelu_forward(want, want_pre, bias);
  } else {
    tessera::ops::broadcast_rows(want, bias);
    tessera::ops::matmul(x, false, w, true, want, 1.0f, 1.0f, inputs);
  }
  if (std::string(tessera::kernels::cpu::gemm_library_name()) == "BLAS") {
    EXPECT_EQ(0, std::memcmp(y.raw(), want.raw(), want.nbytes()));
    if (gelu) {
      EXPECT_EQ(0, std::memcmp(pre.raw(), want_pre.raw(), want_pre.nbytes()));
    }
  } else {
    // The same products summed in another order; each output is O(sqrt(k)) with terms O(1).
    EXPECT_LT(tessera::testing::max_rel_error(y, want), 1e-6 * std::sqrt(static_cast<double>(k + 1)));
    if (gelu) {
      EXPECT_LT(tessera::testing::max_rel_error(pre, want_pre), 1e-6 * std::sqrt(static_cast<double>(k + 1)));
    }
  }
}

TEST(LinearForward, MatchesBroadcastThenMatmul) {
  Threads threads(2);
  for (const bool bf16 : {false, true}) {
    expect_linear_matches_unfused(9, 7, 13, false, bf16);
    expect_linear_matches_unfused(256, 768, 384, false, bf16);
  }
}

TEST(LinearForward, WithPreMatchesMatmulThenBiasGelu) {
  Threads threads(2);
  for (const bool bf16 : {false, true}) {
    expect_linear_matches_unfused(9, 8, 13, true, bf16);
    expect_linear_matches_unfused(128, 1536, 384, true, bf16);
  }
}

TEST(LinearForward, EmptyProductLeavesTheBias) {
  for (const bool bf16 : {false, true}) {
    const float bias[3] = {0.5f, -1.0f, 2.0f};
    float out[6], pre[6], gelu[3];
    tessera::kernels::cpu::gemm_bias(2, 3, 0, nullptr, nullptr, nullptr, nullptr, bias, bf16, nullptr, out);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], bias[i % 3]);
    tessera::kernels::cpu::gelu_forward(gelu, bias, 3);
    tessera::kernels::cpu::gemm_bias(2, 3, 0, nullptr, nullptr, nullptr, nullptr, bias, bf16, pre, out);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(pre[i], bias[i % 3]);
      EXPECT_FLOAT_EQ(out[i], gelu[i % 3]);
    }
  }
}

TEST(LinearForward, RejectsShapesThatDoNotFit) {
  const Tensor x = random_tensor({4, 6}, 26), w = random_tensor({5, 6}, 27), bias = random_tensor({4}, 28);
  Tensor y = Tensor::empty({4, 5}), pre = Tensor::empty({4, 4});
  EXPECT_THROW(tessera::ops::linear_forward(y, x, w, bias), tessera::Error);  // bias of 4, not 5
  const Tensor good_bias = random_tensor({5}, 29);
  EXPECT_THROW(tessera::ops::linear_forward(y, x, w, good_bias, &pre), tessera::Error);  // pre of 16, not 20
  const Tensor short_w = random_tensor({5, 4}, 30);
  EXPECT_THROW(tessera::ops::linear_forward(y, x, short_w, good_bias), tessera::Error);  // k 4, not 6
}

}  // namespace
