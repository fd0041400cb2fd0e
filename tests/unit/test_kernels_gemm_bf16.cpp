// Unit tests of the GEMMs with bf16 inputs (ops::MatmulInputs::bf16, kernels/cpu/gemm_bf16.cpp):
// against a double-precision product of the inputs rounded to bf16 here, for every transpose,
// alpha and beta, batched, k = 0; that the rounding happens only when the call asks for it; that
// an operand's given bf16 copy is read in place of its values (and only for that operand); that a
// rounded operand (ops::RoundedOperand) is rounded once for the products that read it, several may
// live at once, and it rounds nothing under fp32; that oneDNN's bf16 path and the emulated one
// give the same numbers; and that the path follows the CPU.
// CTest runs this file as is and, prefixed "blas.", with TESSERA_CPU_GEMM=blas (emulated path).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;
using tessera::ops::MatmulInputs;
using tessera::ops::Operand;
using tessera::ops::RoundedOperand;
constexpr MatmulInputs kBf16 = MatmulInputs::bf16;
namespace cpu = tessera::kernels::cpu;

using tessera::testing::rel_error;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream) {
  return tessera::testing::random_tensor(std::move(shape), 4321, stream, 0.0f, 1.0f);
}

// x rounded to the nearest bf16 (ties to even), written independently of the kernels' cast.
double bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t lower = bits & 0xffffu, upper = bits & 0xffff0000u;
  const bool up = lower > 0x8000u || (lower == 0x8000u && (upper & 0x10000u));
  return std::bit_cast<float>(up ? upper + 0x10000u : upper);
}

// c = alpha op(a) op(b) + beta c0 in double, the inputs first rounded to bf16 (or not).
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const float* a,
                              const float* b, double beta, const float* c0, bool round = true) {
  const auto in = [round](float x) { return round ? bf16(x) : static_cast<double>(x); };
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += in(ta ? a[p * m + i] : a[i * k + p]) * in(tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = alpha * s + (beta != 0.0 ? beta * c0[i * n + j] : 0.0);
    }
  return c;
}


struct Case {
  bool ta, tb;
};
const Case kAllFour[] = {{false, false}, {false, true}, {true, false}, {true, true}};

bool cpu_flag(const std::string& flag) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

}  // namespace

TEST(MatmulBf16, EveryTransposeMatchesTheRoundedInputsProduct) {
  const int64_t m = 37, n = 19, k = 53;
  for (const Case cs : kAllFour) {
    const Tensor a = random_tensor(cs.ta ? Shape{k, m} : Shape{m, k}, 1);
    const Tensor b = random_tensor(cs.tb ? Shape{n, k} : Shape{k, n}, 2);
    for (float beta : {0.0f, 1.0f, -0.5f}) {
      Tensor c = random_tensor({m, n}, 3);
      if (beta == 0.0f)  // beta = 0 overwrites, NaN included
        for (int64_t i = 0; i < c.numel(); ++i) c.data<float>()[i] = NAN;
      const Tensor c0 = c.clone();
      tessera::ops::matmul(a, cs.ta, b, cs.tb, c, 0.75f, beta, kBf16);
      const auto want = reference(cs.ta, cs.tb, m, n, k, 0.75, a.data<float>(), b.data<float>(), beta, c0.data<float>());
      EXPECT_LT(rel_error(c.data<float>(), want), 1e-6) << "ta=" << cs.ta << " tb=" << cs.tb << " beta=" << beta;
    }
  }
}

TEST(MatmulBf16, RoundsTheInputsOnlyWhenTheCallAsks) {
  const int64_t m = 16, n = 24, k = 64;
  const Tensor a = random_tensor({m, k}, 4), b = random_tensor({k, n}, 5);
  const auto exact = reference(false, false, m, n, k, 1.0, a.data<float>(), b.data<float>(), 0.0, nullptr, false);
  Tensor c = Tensor::empty({m, n});
  tessera::ops::matmul(a, false, b, false, c, 1.0f, 0.0f, kBf16);
  // bf16 keeps 8 significant bits: the product moves by about 2^-9 relative, far above fp32's.
  EXPECT_GT(rel_error(c.data<float>(), exact), 1e-4);
  EXPECT_LT(rel_error(c.data<float>(), reference(false, false, m, n, k, 1.0, a.data<float>(), b.data<float>(), 0.0,
                                                 nullptr)),
            1e-6);
  tessera::ops::matmul(a, false, b, false, c);  // the default: fp32 inputs, whatever ran before
  EXPECT_LT(rel_error(c.data<float>(), exact), 1e-6);
}

TEST(MatmulBf16, AGivenCopyIsReadInPlaceOfItsValues) {
  const int64_t m = 8, n = 12, k = 40;
  // Two weight matrices in one flat buffer, as a parameter store holds them; the copy covers both.
  const Tensor flat = random_tensor({2 * n * k}, 13), x = random_tensor({m, k}, 14);
  Tensor doubled = flat.clone();
  tessera::ops::scale_inplace(doubled, 2.0f);
  Tensor bits = Tensor::empty({2 * n * k}, tessera::DType::bf16);
  tessera::ops::cast(bits, doubled);  // deliberately not flat's values: reading it shows
  const Operand flat_with_copy(flat, bits);
  const Tensor second = flat.slice(n * k, {n, k});
  Tensor c = Tensor::empty({m, n});
  tessera::ops::matmul(x, false, flat_with_copy.slice(n * k, {n, k}), true, c, 1.0f, 0.0f, kBf16);
  const auto want = reference(false, true, m, n, k, 1.0, x.data<float>(), doubled.data<float>() + n * k, 0.0, nullptr);
  EXPECT_LT(rel_error(c.data<float>(), want), 1e-6) << "the copy of the second matrix was not read";
  // An operand given without a copy is rounded from its own values.
  const Tensor other = second.clone();
  tessera::ops::matmul(x, false, other, true, c, 1.0f, 0.0f, kBf16);
  EXPECT_LT(rel_error(c.data<float>(), reference(false, true, m, n, k, 1.0, x.data<float>(), other.data<float>(), 0.0,
                                                 nullptr)),
            1e-6);
  tessera::ops::matmul(x, false, second, true, c, 1.0f, 0.0f, kBf16);
  EXPECT_LT(rel_error(c.data<float>(), reference(false, true, m, n, k, 1.0, x.data<float>(), second.data<float>(), 0.0,
                                                 nullptr)),
            1e-6);
}

// A linear layer's backward: dW = dy^T x and dx = dy w both read dy. Rounded once, both products
// read that copy: the same numbers as rounding it for each product. To show the copy is what they
// read, dy's values are doubled while it lives (which the contract forbids): the products that
// read the rounded operand do not move, those given dy itself do.
TEST(MatmulBf16, ARoundedOperandIsRoundedOnceForEveryProductThatReadsIt) {
  const int64_t rows = 24, in = 40, out = 36;
  Tensor dy = random_tensor({rows, out}, 16);
  const Tensor x = random_tensor({rows, in}, 17), w = random_tensor({out, in}, 18);
  Tensor dw_each = Tensor::empty({out, in}), dx_each = Tensor::empty({rows, in});
  tessera::ops::matmul(dy, true, x, false, dw_each, 1.0f, 0.0f, kBf16);
  tessera::ops::matmul(dy, false, w, false, dx_each, 1.0f, 0.0f, kBf16);
  Tensor dw = Tensor::empty({out, in}), dx = Tensor::empty({rows, in});
  {
    const RoundedOperand rounded(dy, kBf16);
    tessera::ops::matmul(rounded, true, x, false, dw, 1.0f, 0.0f, kBf16);
    tessera::ops::scale_inplace(dy, 2.0f);
    tessera::ops::matmul(rounded, false, w, false, dx, 1.0f, 0.0f, kBf16);
    for (int64_t i = 0; i < dw.numel(); ++i) ASSERT_EQ(dw.data<float>()[i], dw_each.data<float>()[i]) << i;
    for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx.data<float>()[i], dx_each.data<float>()[i]) << i;
    // A slice of the rounded operand reads the copy's matching part.
    Tensor part = Tensor::empty({8, in});
    tessera::ops::matmul(rounded.operand().slice(4 * out, {8, out}), false, w, false, part, 1.0f, 0.0f, kBf16);
    for (int64_t i = 0; i < part.numel(); ++i) ASSERT_EQ(part.data<float>()[i], dx_each.data<float>()[4 * in + i]);
  }
  tessera::ops::matmul(dy, false, w, false, dx, 1.0f, 0.0f, kBf16);  // dy itself: its doubled values
  for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx.data<float>()[i], 2.0f * dx_each.data<float>()[i]) << i;
}

TEST(MatmulBf16, RoundedOperandsLiveTogetherAndEachIsReadWhereGiven) {
  const int64_t m = 10, n = 14, k = 22;
  Tensor a = random_tensor({m, k}, 19), b = random_tensor({k, n}, 20);
  Tensor before = Tensor::empty({m, n}), c = Tensor::empty({m, n});
  tessera::ops::matmul(a, false, b, false, before, 1.0f, 0.0f, kBf16);
  const auto product = [&](const Operand& x, const Operand& y) {
    tessera::ops::matmul(x, false, y, false, c, 1.0f, 0.0f, kBf16);
    return c.data<float>()[0] / before.data<float>()[0];  // 1, 2 or 4: which operands doubled
  };
  {
    const RoundedOperand rounded_a(a, kBf16);
    {
      const RoundedOperand rounded_b(b, kBf16);
      tessera::ops::scale_inplace(a, 2.0f);
      tessera::ops::scale_inplace(b, 2.0f);
      EXPECT_EQ(product(rounded_a, rounded_b), 1.0f);  // both copies read
    }
    EXPECT_EQ(product(rounded_a, b), 2.0f);  // b itself: its doubled values; a's copy still read
  }
  EXPECT_EQ(product(a, b), 4.0f);
}

TEST(MatmulBf16, ARoundedOperandRoundsNothingUnderFp32Inputs) {
  const int64_t m = 6, n = 5, k = 9;
  Tensor a = random_tensor({m, k}, 21);
  const Tensor b = random_tensor({k, n}, 22);
  Tensor c = Tensor::empty({m, n});
  const RoundedOperand rounded(a, MatmulInputs::f32);
  EXPECT_EQ(rounded.operand().bf16, nullptr);
  tessera::ops::scale_inplace(a, 3.0f);
  tessera::ops::matmul(rounded, false, b, false, c);
  EXPECT_LT(rel_error(c.data<float>(), reference(false, false, m, n, k, 1.0, a.data<float>(), b.data<float>(), 0.0,
                                                 nullptr, false)),
            1e-6);
}

TEST(MatmulBf16, RoundedOperandsRefuseOtherTypesAndNestDeeply) {
  EXPECT_THROW(RoundedOperand(Tensor::empty({4}, tessera::DType::bf16), kBf16), tessera::Error);
  const Tensor t = random_tensor({4}, 23);
  std::vector<std::unique_ptr<RoundedOperand>> scopes;  // no registry, so no limit on how many live
  for (int i = 0; i < 8; ++i) scopes.push_back(std::make_unique<RoundedOperand>(t, kBf16));
  for (const auto& s : scopes) EXPECT_EQ(s->operand().values.data<float>(), t.data<float>());
  while (!scopes.empty()) scopes.pop_back();  // innermost first: their buffers go back to the pool
  const RoundedOperand again(t, kBf16);
  EXPECT_NE(again.operand().bf16, nullptr);
}

TEST(MatmulBf16, BatchedMatchesPerMatrixReference) {
  const int64_t m = 9, n = 17, k = 33, batch = 3;
  for (int threads : {1, 3}) {
    tessera::testing::ScopedThreads scope(threads);
    for (const Case cs : kAllFour) {
      const Tensor a = random_tensor(cs.ta ? Shape{batch, k, m} : Shape{batch, m, k}, 6);
      const Tensor b = random_tensor(cs.tb ? Shape{batch, n, k} : Shape{batch, k, n}, 7);
      Tensor c = random_tensor({batch, m, n}, 8);
      const Tensor c0 = c.clone();
      tessera::ops::matmul_batched(batch, a, cs.ta, b, cs.tb, c, 1.5f, 1.0f, kBf16);
      for (int64_t i = 0; i < batch; ++i) {
        const auto want = reference(cs.ta, cs.tb, m, n, k, 1.5, a.data<float>() + i * m * k,
                                    b.data<float>() + i * k * n, 1.0, c0.data<float>() + i * m * n);
        EXPECT_LT(rel_error(c.data<float>() + i * m * n, want), 1e-6)
            << "threads=" << threads << " matrix " << i << " ta=" << cs.ta << " tb=" << cs.tb;
      }
    }
  }
}

TEST(MatmulBf16, ACopyOfTheWrongTypeOrSizeIsRefused) {
  const Tensor values = random_tensor({16}, 15);
  EXPECT_THROW(Operand(values, Tensor::empty({15}, tessera::DType::bf16)), tessera::Error);
  EXPECT_THROW(Operand(values, Tensor::empty({16}, tessera::DType::f16)), tessera::Error);
  EXPECT_THROW(Operand(values, values), tessera::Error);
}

TEST(MatmulBf16, EmptyInnerDimensionScalesC) {
  const Tensor a = Tensor::empty({0, 3}), b = Tensor::empty({0, 4});
  Tensor c = random_tensor({3, 4}, 9);
  const Tensor c0 = c.clone();
  tessera::ops::matmul(a, true, b, false, c, 1.0f, 0.5f, kBf16);
  for (int64_t i = 0; i < c.numel(); ++i) EXPECT_EQ(c.data<float>()[i], 0.5f * c0.data<float>()[i]);
}

TEST(MatmulBf16, OneDnnPathAndEmulatedPathAgreeOnBlockedShapes) {
  tessera::testing::ScopedThreads scope(2);
  for (const auto [m, n, k] : {std::array<int64_t, 3>{256, 300, 200}, {129, 67, 515}, {1, 777, 64}}) {
    for (const Case cs : kAllFour) {
      const Tensor a = random_tensor(cs.ta ? Shape{k, m} : Shape{m, k}, 10);
      const Tensor b = random_tensor(cs.tb ? Shape{n, k} : Shape{k, n}, 11);
      const Tensor c0 = random_tensor({m, n}, 12);
      Tensor fast = c0.clone(), emulated = c0.clone();
      cpu::gemm_bf16(cs.ta, cs.tb, m, n, k, 0.5f, a.data<float>(), nullptr, b.data<float>(), nullptr, 1.0f,
                     fast.data<float>());
      cpu::gemm_bf16_emulated(cs.ta, cs.tb, m, n, k, 0.5f, a.data<float>(), nullptr, b.data<float>(), nullptr, 1.0f,
                              emulated.data<float>());
      const auto want = reference(cs.ta, cs.tb, m, n, k, 0.5, a.data<float>(), b.data<float>(), 1.0, c0.data<float>());
      EXPECT_LT(rel_error(fast.data<float>(), want), 1e-5) << m << "x" << n << "x" << k << " " << cpu::gemm_bf16_path();
      EXPECT_LT(rel_error(emulated.data<float>(), want), 1e-5) << m << "x" << n << "x" << k << " emulated";
    }
  }
}

TEST(MatmulBf16, PathFollowsTheCpuAndTheLibrary) {
  const char* setting = std::getenv("TESSERA_CPU_GEMM");
  const bool onednn = std::string(cpu::gemm_library_name()) == "oneDNN";
  const bool native = onednn && (cpu_flag("avx512_bf16") || cpu_flag("amx_bf16"));
  EXPECT_EQ(std::string(cpu::gemm_bf16_path()).rfind(native ? "oneDNN bf16" : "fp32 GEMM", 0), 0u)
      << "path: " << cpu::gemm_bf16_path() << "; TESSERA_CPU_GEMM=" << (setting ? setting : "<unset>");
}
