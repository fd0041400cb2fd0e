// Unit tests of the weight-only quantisation kernels (kernels/cpu/quant_*.cpp): quantise then
// dequantise lands every element within half its group's step (int8 and int4, f32 and bf16 scales);
// quant_gemv / quant_gemm on every path this CPU runs (portable, AVX-512) equal the dequantised
// weights multiplied in double within the bound of f32 accumulation alone, for odd shapes, M = 1 and
// M > 1, several group sizes, on 1 and 3 threads; bad descriptions are refused naming the problem.
//
// The bound: a kernel computes with exactly dequantize_weights' W (each weight (q [- zero]) * scale
// rounded once to f32, as the reference; the panels of the batched path are those values, checked
// bit for bit), so its only error is the rounding of the f32 sums of K products (with or without
// fused multiply-adds, in any order). The AVX-512 int8 GEMV sums x_k q_k per group and applies the
// scale in a fused multiply-add, fewer roundings per term than K, so the same bound holds for it:
//   |y - sum_k x_k w_k| <= gamma_K * sum_k |x_k w_k|,  gamma_K = K u / (1 - K u), u = 2^-24
// (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), and the products once more (+ u).
// On CPUs with AVX-512 VNNI the AVX-512 int4 GEMV is the integer product of quant_int4_gemv_vnni.cpp,
// whose own bound is wider (test_kernels_quant_int4_vnni.cpp); here it is held to this one too,
// which its error on these normal activations stays well inside.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant_paths.h"

namespace {

namespace cpu = tessera::kernels::cpu;
using cpu::QuantPath;
using tessera::kernels::QuantMatrixView;
using Threads = tessera::testing::ScopedThreads;

// A quantised matrix and the storage behind its view.
struct Quantised {
  std::vector<uint8_t> q, zeros;
  std::vector<float> scales;
  QuantMatrixView view;
};

Quantised quantise(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t group, int bits, bool bf16) {
  Quantised r;
  r.q.resize(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2));
  r.scales.resize(static_cast<size_t>(rows * cols / group));
  r.zeros.resize(bits == 4 ? r.scales.size() : 0);
  cpu::quantize_weights(r.q.data(), r.scales.data(), bits == 4 ? r.zeros.data() : nullptr, w.data(), rows, cols,
                        group, bits, bf16);
  r.view = QuantMatrixView{r.q.data(), r.scales.data(), bits == 4 ? r.zeros.data() : nullptr, rows, cols, group, bits};
  return r;
}

std::vector<float> random(int64_t n, uint64_t stream, float std = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  tessera::philox_fill_normal(v.data(), n, 34, stream, 0, 0.0f, std);
  return v;
}

std::vector<QuantPath> paths() {
  std::vector<QuantPath> p{QuantPath::scalar};
  if (cpu::quant_path_supported(QuantPath::avx512)) p.push_back(QuantPath::avx512);
  return p;
}

struct Case {
  int64_t m, rows, cols, group;
};
// Odd row counts (tile tails), groups narrower than, equal to and wider than a 16-lane step, and
// group ends inside a step (6, 10, 24, 40).
const Case kCases[] = {{1, 7, 96, 32},  {1, 13, 40, 10},  {1, 64, 256, 64}, {1, 5, 48, 6},    {2, 9, 120, 24},
                       {3, 17, 64, 16}, {4, 12, 160, 40}, {5, 33, 96, 96},  {7, 6, 256, 128}, {11, 19, 80, 8},
                       // several panels of the batched path (128 rows each at 1024 columns) and a tail
                       {6, 150, 1024, 64}, {1, 9, 1024, 32},
                       // GEMVs at GPT-2-like widths (tile tails, several 64-row blocks), groups of 64 to 192
                       {1, 70, 768, 64}, {1, 6, 384, 128}, {1, 5, 3072, 192}};

TEST(QuantKernels, RoundTripWithinHalfAStep) {
  for (int bits : {8, 4})
    for (bool bf16 : {false, true})
      for (int64_t group : {2, 8, 32, 64}) {
        const int64_t rows = 9, cols = 192;
        std::vector<float> w = random(rows * cols, 1 + group);
        w[5] = 0.0f;                                           // an exact zero
        for (int64_t k = 0; k < group; ++k) w[2 * cols + k] = 0;  // an all-zero group: scale 0
        for (int64_t k = 0; k < group; ++k) w[3 * cols + k] = 1.0f + k;  // all positive
        const Quantised q = quantise(w, rows, cols, group, bits, bf16);
        std::vector<float> back(w.size());
        cpu::dequantize_weights(back.data(), q.view);
        for (int64_t n = 0; n < rows; ++n)
          for (int64_t k = 0; k < cols; ++k) {
            const float s = q.scales[n * (cols / group) + k / group];
            const float x = w[n * cols + k], y = back[n * cols + k];
            // half a step, and the f32 roundings of w / s and of (q - z) * s
            ASSERT_LE(std::fabs(x - y), 0.5f * s + 4e-7f * (std::fabs(x) + 16 * s))
                << bits << "-bit, group " << group << (bf16 ? ", bf16" : "") << " scales, [" << n << ", " << k << "]";
            if (bf16) {
              uint32_t b;
              std::memcpy(&b, &s, 4);
              ASSERT_EQ(b & 0xFFFFu, 0u) << "a scale that is not a bf16 value";
            }
          }
        EXPECT_EQ(back[2 * cols], 0.0f);
        if (bits == 8) {
          EXPECT_EQ(back[5], 0.0f);  // symmetric: zero is a level
        }
      }
}

TEST(QuantKernels, Int4PacksLowNibbleFirst) {
  // One group [0, 1, ..., 15] * 0.5 / 1.0: scale 0.5, zero 0, levels k in column k.
  std::vector<float> w(16);
  for (int k = 0; k < 16; ++k) w[k] = 0.5f * k;
  const Quantised q = quantise(w, 1, 16, 16, 4, false);
  EXPECT_EQ(q.scales[0], 0.5f);
  EXPECT_EQ(q.zeros[0], 0);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(q.q[j], (2 * j) | ((2 * j + 1) << 4)) << "byte " << j;
}

// y against the double product of x and the dequantised W, within the bound above.
void expect_within_rounding(const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& w,
                            const Case& c, const std::string& what) {
  const double u = std::ldexp(1.0, -24), gamma = c.cols * u / (1 - c.cols * u) + u;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t n = 0; n < c.rows; ++n) {
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double p = double(x[i * c.cols + k]) * w[n * c.cols + k];
        exact += p;
        magnitude += std::fabs(p);
      }
      ASSERT_LE(std::fabs(y[i * c.rows + n] - exact), gamma * magnitude + 1e-30)
          << what << " [" << i << ", " << n << "]: " << y[i * c.rows + n] << " vs " << exact;
    }
}

TEST(QuantKernels, MatmulsEqualDequantisedProductWithinRounding) {
  int checked = 0;
  for (QuantPath path : paths())
    for (int bits : {8, 4})
      for (const Case& c : kCases)
        for (int threads : {1, 3}) {
          Threads scoped(threads);
          const std::vector<float> w = random(c.rows * c.cols, 2 + c.cols, 0.05f);
          const std::vector<float> x = random(c.m * c.cols, 3 + c.rows);
          const Quantised q = quantise(w, c.rows, c.cols, c.group, bits, bits == 4);
          std::vector<float> deq(w.size());
          cpu::dequantize_weights(deq.data(), q.view);
          const std::string what = std::string(cpu::quant_path_name(path)) + " int" + std::to_string(bits) + " M=" +
                                   std::to_string(c.m) + " [" + std::to_string(c.rows) + ", " +
                                   std::to_string(c.cols) + "] G=" + std::to_string(c.group);
          // One more element than y needs, to see nothing is written past it.
          std::vector<float> y(static_cast<size_t>(c.m * c.rows + 1), -7.0f);
          if (c.m == 1) {
            cpu::quant_gemv_on_path(path, y.data(), x.data(), q.view);
            expect_within_rounding(y, x, deq, c, "gemv " + what);
          }
          std::fill(y.begin(), y.end(), -7.0f);
          cpu::quant_gemm_on_path(path, y.data(), x.data(), c.m, q.view);
          expect_within_rounding(y, x, deq, c, "gemm " + what);
          EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
          ++checked;
        }
  EXPECT_EQ(checked, static_cast<int>(paths().size() * 2 * std::size(kCases) * 2));
}

// The batched path's panels hold exactly dequantize_weights' values, on every path.
TEST(QuantKernels, PanelsEqualDequantisedWeightsBitForBit) {
  int checked = 0;
  for (QuantPath path : paths())
    for (int bits : {8, 4})
      for (int64_t group : {6, 16, 40, 64}) {
        const int64_t rows = 11, cols = 960;
        const Quantised q = quantise(random(rows * cols, 40 + group, 0.2f), rows, cols, group, bits, bits == 8);
        std::vector<float> deq(static_cast<size_t>(rows * cols));
        cpu::dequantize_weights(deq.data(), q.view);
        // Rows [3, 10) into a panel one element longer, to see nothing is written past it.
        std::vector<float> panel(static_cast<size_t>(7 * cols + 1), -7.0f);
        if (path == QuantPath::avx512)
          cpu::quant_dequantize_rows_avx512(panel.data(), q.view, 3, 10);
        else
          cpu::quant_dequantize_rows_scalar(panel.data(), q.view, 3, 10);
        for (int64_t i = 0; i < 7 * cols; ++i)
          ASSERT_EQ(panel[i], deq[3 * cols + i]) << cpu::quant_path_name(path) << " int" << bits << " G" << group
                                                 << " element " << i;
        EXPECT_EQ(panel.back(), -7.0f);
        ++checked;
      }
  EXPECT_EQ(checked, static_cast<int>(paths().size() * 2 * 4));
}

TEST(QuantKernels, PublicOpsRunTheBestPath) {
  const Case c{3, 10, 64, 32};
  const std::vector<float> w = random(c.rows * c.cols, 9, 0.1f), x = random(c.m * c.cols, 10);
  const Quantised q = quantise(w, c.rows, c.cols, c.group, 8, false);
  std::vector<float> a(static_cast<size_t>(c.m * c.rows)), b(a.size());
  tessera::kernels::cpu::quant_gemm(a.data(), x.data(), c.m, q.view);
  cpu::quant_gemm_on_path(cpu::quant_best_path(), b.data(), x.data(), c.m, q.view);
  EXPECT_EQ(a, b);
  std::vector<float> v(static_cast<size_t>(c.rows)), v1(v.size());
  tessera::kernels::cpu::quant_gemv(v.data(), x.data(), q.view);
  cpu::quant_gemv_on_path(cpu::quant_best_path(), v1.data(), x.data(), q.view);
  EXPECT_EQ(v, v1);
  // The path follows the kernel copies' instruction set (TESSERA_CPU_ISA=base runs the portable one).
  if (tessera::kernels::cpu::kernel_isa() != tessera::kernels::cpu::Isa::avx512 && tessera::kernels::cpu::isa_copies()) {
    EXPECT_EQ(cpu::quant_best_path(), QuantPath::scalar);
  }
}

TEST(QuantKernels, BadDescriptionsAreRefused) {
  std::vector<float> w(64, 1.0f), x(16, 1.0f), y(4);
  std::vector<uint8_t> q(64), zeros(8);
  std::vector<float> scales(8);
  auto expect_refused = [&](QuantMatrixView v, const std::string& needle) {
    try {
      cpu::quant_gemv(y.data(), x.data(), v);
      ADD_FAILURE() << "accepted, expected: " << needle;
    } catch (const tessera::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused({q.data(), scales.data(), nullptr, 4, 16, 6, 8}, "group size 6 does not divide the 16 columns");
  expect_refused({q.data(), scales.data(), zeros.data(), 4, 16, 16, 3}, "bits must be 8 or 4, not 3");
  expect_refused({q.data(), scales.data(), zeros.data(), 4, 15, 5, 4}, "must be even");
  expect_refused({q.data(), scales.data(), nullptr, 4, 16, 8, 4}, "a null zeros pointer");
}

}  // namespace
