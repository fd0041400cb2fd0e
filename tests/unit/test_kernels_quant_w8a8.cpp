// Unit tests of the int8-activation products (kernels/cpu/quant_w8a8*.cpp): the activations'
// quantisation lands each element within half its group's step; quant_w8a8_gemm on every path this
// CPU runs (portable, AVX-512 VNNI) and quant_w8a8_matmul (under 4 rows: the weight-only kernels on
// the dequantised int8 activations) equal the reference "quantise the activations
// (quantize_activations_int8), dequantise the weights (dequantize_weights), multiply in double"
// within the rounding of f32 sums, int8 and int4, odd shapes (block tails, row tiles of 1-3),
// groups not a multiple of 4, 1 and 3 threads; bad descriptions are refused naming the problem.
//
// The bound: each (row, weight row, group) integer sum is exact; the kernel rounds the two scales'
// product, the sum's conversion and the product (3 u a term, + u for the reference's own rounding
// of each dequantised weight), then sums the groups in f32: |y - exact| <= (gamma_K + 4u) sum_k
// |xdq_k w_k| (Higham 3.1; gamma_K bounds gamma_groups).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"
#include "kernels/cpu/quant_w8a8_paths.h"

namespace {

namespace cpu = tessera::kernels::cpu;
using cpu::W8A8Path;
using tessera::kernels::QuantMatrixView;

std::vector<float> random(int64_t n, uint64_t stream, float std) {
  std::vector<float> v(static_cast<size_t>(n));
  tessera::philox_fill_normal(v.data(), n, 36, stream, 0, 0.0f, std);
  return v;
}

std::vector<W8A8Path> paths() {
  std::vector<W8A8Path> p{W8A8Path::scalar};
  if (cpu::w8a8_path_supported(W8A8Path::avx512_vnni)) p.push_back(W8A8Path::avx512_vnni);
  return p;
}

struct Case {
  int64_t m, rows, cols, group;
};
// Rows in tiles of 4 and tails of 1-3, blocks of 32 weight rows and their tails, groups of 2, 6 and
// 10 (padded to 4), a group as wide as the row.
const Case kCases[] = {{4, 32, 64, 64}, {5, 33, 96, 32},  {7, 70, 120, 24}, {1, 9, 40, 10},    {2, 17, 48, 6},
                       {3, 5, 64, 2},   {8, 65, 256, 64}, {6, 40, 80, 80},  {32, 100, 768, 64}};

TEST(QuantW8A8, ActivationsWithinHalfAStep) {
  const int64_t m = 3, cols = 96, group = 24, groups = cols / group, padded = cpu::w8a8_padded_group(group);
  std::vector<float> x = random(m * cols, 1, 2.0f);
  for (int64_t k = 0; k < group; ++k) x[cols + k] = 0.0f;  // an all-zero group: scale 0
  std::vector<int8_t> xq(static_cast<size_t>(m * groups * padded), 99);
  std::vector<float> scales(static_cast<size_t>(m * groups));
  std::vector<int32_t> sums(scales.size());
  cpu::quantize_activations_int8(xq.data(), scales.data(), sums.data(), x.data(), m, cols, group);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scales[i * groups + g];
      int32_t sum = 0, top = 0;
      for (int64_t k = 0; k < padded; ++k) {
        const int8_t q = xq[(i * groups + g) * padded + k];
        sum += q;
        if (k >= group) {
          EXPECT_EQ(q, 0) << "padding";
          continue;
        }
        top = std::max(top, std::abs(int32_t(q)));
        const float v = x[i * cols + g * group + k];
        ASSERT_LE(std::fabs(v - q * s), 0.5f * s + 1e-6f * std::fabs(v)) << "[" << i << ", " << g * group + k << "]";
      }
      EXPECT_EQ(sum, sums[i * groups + g]);
      if (s > 0) {
        EXPECT_EQ(top, 127) << "the group's largest element is a whole step count";
      }
    }
  EXPECT_EQ(scales[1 * groups + 0], 0.0f);
}

TEST(QuantW8A8, GemmEqualsQuantisedActivationsTimesDequantisedWeights) {
  int checked = 0;
  // Each path, then quant_w8a8_matmul (generate's entry: under 4 rows the weight-only kernels on
  // the dequantised int8 activations, from 4 the best path).
  const size_t variants = paths().size() + 1;
  for (size_t variant = 0; variant < variants; ++variant)
    for (int bits : {8, 4})
      for (const Case& c : kCases)
        for (int threads : {1, 3}) {
          tessera::testing::ScopedThreads scoped(threads);
          const std::vector<float> w = random(c.rows * c.cols, 2 + c.cols, 0.05f);
          const std::vector<float> x = random(c.m * c.cols, 3 + c.rows, 1.0f);
          std::vector<uint8_t> q(static_cast<size_t>(bits == 8 ? c.rows * c.cols : c.rows * c.cols / 2));
          std::vector<float> ws(static_cast<size_t>(c.rows * c.cols / c.group));
          std::vector<uint8_t> zeros(bits == 4 ? ws.size() : 0);
          cpu::quantize_weights(q.data(), ws.data(), bits == 4 ? zeros.data() : nullptr, w.data(), c.rows, c.cols,
                                c.group, bits, false);
          const QuantMatrixView view{q.data(), ws.data(), bits == 4 ? zeros.data() : nullptr,
                                     c.rows, c.cols,   c.group,   bits};
          std::vector<float> deq(w.size());
          cpu::dequantize_weights(deq.data(), view);
          const int64_t groups = c.cols / c.group, padded = cpu::w8a8_padded_group(c.group);
          std::vector<int8_t> xq(static_cast<size_t>(c.m * groups * padded));
          std::vector<float> xs(static_cast<size_t>(c.m * groups));
          std::vector<int32_t> sums(xs.size());
          cpu::quantize_activations_int8(xq.data(), xs.data(), sums.data(), x.data(), c.m, c.cols, c.group);
          // One more element than y needs, to see nothing is written past it.
          const bool entry = variant == paths().size();
          const W8A8Path path = entry ? cpu::w8a8_best_path() : paths()[variant];
          std::vector<float> y(static_cast<size_t>(c.m * c.rows + 1), -7.0f);
          if (entry)
            cpu::quant_w8a8_matmul(y.data(), x.data(), c.m, view);
          else
            cpu::quant_w8a8_gemm_on_path(path, y.data(), x.data(), c.m, view);
          const std::string what = std::string(entry ? "quant_w8a8_matmul" : cpu::w8a8_path_name(path)) + " int" +
                                   std::to_string(bits) +
                                   " M=" + std::to_string(c.m) + " [" + std::to_string(c.rows) + ", " +
                                   std::to_string(c.cols) + "] G=" + std::to_string(c.group) + " on " +
                                   std::to_string(threads) + " thread(s)";
          const double u = std::ldexp(1.0, -24), gamma = c.cols * u / (1 - c.cols * u) + 4 * u;
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t n = 0; n < c.rows; ++n) {
              double exact = 0, magnitude = 0;
              for (int64_t k = 0; k < c.cols; ++k) {
                const int64_t g = k / c.group;
                const double a = double(xq[(i * groups + g) * padded + k % c.group]) * xs[i * groups + g];
                exact += a * deq[n * c.cols + k];
                magnitude += std::fabs(a * deq[n * c.cols + k]);
              }
              ASSERT_LE(std::fabs(y[i * c.rows + n] - exact), gamma * magnitude + 1e-30)
                  << what << " [" << i << ", " << n << "]: " << y[i * c.rows + n] << " vs " << exact;
            }
          EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
          ++checked;
        }
  EXPECT_EQ(checked, static_cast<int>(variants * 2 * std::size(kCases) * 2));
}

// The quantised activations stay close to f32 activations: the int8 product against the weight-only
// product (f32 activations) on the same weights, relative to the row's magnitude, under a step's
// worth (1/254 of the group's largest activation a term).
TEST(QuantW8A8, CloseToTheWeightOnlyProduct) {
  const int64_t m = 6, rows = 40, cols = 256, group = 64;
  const std::vector<float> w = random(rows * cols, 7, 0.05f), x = random(m * cols, 8, 1.0f);
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  std::vector<float> ws(static_cast<size_t>(rows * cols / group));
  cpu::quantize_weights(q.data(), ws.data(), nullptr, w.data(), rows, cols, group, 8, false);
  const QuantMatrixView view{q.data(), ws.data(), nullptr, rows, cols, group, 8};
  std::vector<float> a(static_cast<size_t>(m * rows)), b(a.size());
  cpu::quant_w8a8_gemm(a.data(), x.data(), m, view);
  cpu::quant_gemm(b.data(), x.data(), m, view);
  double err = 0, ref = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    err += (a[e] - b[e]) * double(a[e] - b[e]);
    ref += double(b[e]) * b[e];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.02) << "relative RMS difference";
  EXPECT_GT(std::sqrt(err / ref), 0.0) << "int8 activations changed nothing: the path did not run";
}

TEST(QuantW8A8, BestPathFollowsTheQuantisedKernels) {
  if (cpu::quant_best_path() != cpu::QuantPath::avx512) {
    EXPECT_EQ(cpu::w8a8_best_path(), W8A8Path::scalar);
  }
  EXPECT_TRUE(cpu::w8a8_path_supported(cpu::w8a8_best_path()));
}

TEST(QuantW8A8, BadDescriptionsAreRefused) {
  std::vector<float> x(64, 1.0f), y(16);
  std::vector<uint8_t> q(64), zeros(8);
  std::vector<float> scales(8);
  auto expect_refused = [&](QuantMatrixView v, int64_t m, const std::string& needle) {
    try {
      cpu::quant_w8a8_gemm(y.data(), x.data(), m, v);
      ADD_FAILURE() << "accepted, expected: " << needle;
    } catch (const tessera::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused({q.data(), scales.data(), nullptr, 4, 16, 6, 8}, 4, "group size 6 does not divide the 16 columns");
  expect_refused({q.data(), scales.data(), zeros.data(), 4, 16, 16, 3}, 4, "bits must be 8 or 4, not 3");
  expect_refused({q.data(), scales.data(), nullptr, 4, 16, 8, 4}, 4, "a null zeros pointer");
  expect_refused({q.data(), scales.data(), nullptr, 4, 16, 8, 8}, -1, "a negative row count -1");
}

}  // namespace
