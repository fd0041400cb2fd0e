// Stress test of the batched quantised products on several threads of ours (quant_gemm's panels
// through the GEMM library, quant_gemm_w8a8): many repetitions of a product of several panels on 4
// threads, each result against the dequantised product in double within the bound of f32 sums.
// Concurrent library sgemm calls from our own threads gave wrong blocks now and then elsewhere
// (quant_bf16_matmul.cpp); a wrong block here lands far outside the bound. Registered once more
// under TESSERA_CPU_GEMM=blas (tests/CMakeLists.txt), so both libraries are stressed.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"
#include "kernels/cpu/quant_w8a8_paths.h"

namespace {

namespace cpu = tessera::kernels::cpu;
using cpu::QuantPath;
using tessera::kernels::QuantMatrixView;

std::vector<float> random(int64_t n, uint64_t stream, float std) {
  std::vector<float> v(static_cast<size_t>(n));
  tessera::philox_fill_normal(v.data(), n, 35, stream, 0, 0.0f, std);
  return v;
}

TEST(QuantGemmThreads, ManyRepetitionsOnFourThreadsStayWithinRounding) {
  // 8 activation rows (the panel path), 640 weight rows of 768 columns: 4 panels of 160 rows.
  const int64_t m = 8, rows = 640, cols = 768, group = 64;
  constexpr int kRepetitions = 150;
  tessera::testing::ScopedThreads threads(4);
  const std::vector<float> w = random(rows * cols, 1, 0.05f), x = random(m * cols, 2, 1.0f);
  int checked = 0;
  for (QuantPath path : {QuantPath::scalar, QuantPath::avx512}) {
    if (!cpu::quant_path_supported(path)) continue;
    for (int bits : {8, 4}) {
      std::vector<uint8_t> q(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2));
      std::vector<float> scales(static_cast<size_t>(rows * cols / group));
      std::vector<uint8_t> zeros(bits == 4 ? scales.size() : 0);
      cpu::quantize_weights(q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, w.data(), rows, cols, group,
                            bits, false);
      const QuantMatrixView view{q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, rows, cols, group, bits};
      std::vector<float> deq(static_cast<size_t>(rows * cols));
      cpu::dequantize_weights(deq.data(), view);
      // The exact product and its bound, once: |y - exact| <= (gamma_K + u) sum |x_k w_k|.
      const double u = std::ldexp(1.0, -24), gamma = cols * u / (1 - cols * u) + u;
      std::vector<double> exact(static_cast<size_t>(m * rows)), bound(exact.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t n = 0; n < rows; ++n) {
          double sum = 0, magnitude = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const double p = double(x[i * cols + k]) * deq[n * cols + k];
            sum += p;
            magnitude += std::fabs(p);
          }
          exact[i * rows + n] = sum;
          bound[i * rows + n] = gamma * magnitude + 1e-30;
        }
      std::vector<float> y(static_cast<size_t>(m * rows));
      for (int rep = 0; rep < kRepetitions; ++rep) {
        std::fill(y.begin(), y.end(), -7.0f);
        cpu::quant_gemm_on_path(path, y.data(), x.data(), m, view);
        for (int64_t e = 0; e < m * rows; ++e)
          ASSERT_LE(std::fabs(y[e] - exact[e]), bound[e])
              << cpu::quant_path_name(path) << " int" << bits << " repetition " << rep << " [" << e / rows << ", "
              << e % rows << "] (panel " << (e % rows) / 160 << "): " << y[e] << " vs " << exact[e];
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2 * kRepetitions);
}

TEST(QuantGemmThreads, W8A8ManyRepetitionsOnFourThreadsEqualOneThread) {
  const int64_t m = 8, rows = 640, cols = 768, group = 64;
  constexpr int kRepetitions = 150;
  const std::vector<float> w = random(rows * cols, 3, 0.05f), x = random(m * cols, 4, 1.0f);
  int checked = 0;
  for (cpu::W8A8Path path : {cpu::W8A8Path::scalar, cpu::W8A8Path::avx512_vnni}) {
    if (!cpu::w8a8_path_supported(path)) continue;
    for (int bits : {8, 4}) {
      std::vector<uint8_t> q(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2));
      std::vector<float> scales(static_cast<size_t>(rows * cols / group));
      std::vector<uint8_t> zeros(bits == 4 ? scales.size() : 0);
      cpu::quantize_weights(q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, w.data(), rows, cols, group,
                            bits, false);
      const QuantMatrixView view{q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, rows, cols, group, bits};
      std::vector<float> one(static_cast<size_t>(m * rows)), y(one.size());
      {
        tessera::testing::ScopedThreads threads(1);
        cpu::quant_w8a8_gemm_on_path(path, one.data(), x.data(), m, view);
      }
      tessera::testing::ScopedThreads threads(4);
      for (int rep = 0; rep < (path == cpu::W8A8Path::scalar ? kRepetitions / 10 : kRepetitions); ++rep) {
        std::fill(y.begin(), y.end(), -7.0f);
        cpu::quant_w8a8_gemm_on_path(path, y.data(), x.data(), m, view);
        ASSERT_EQ(y, one) << cpu::w8a8_path_name(path) << " int" << bits << " repetition " << rep;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2 * kRepetitions / 10);
}

}  // namespace
