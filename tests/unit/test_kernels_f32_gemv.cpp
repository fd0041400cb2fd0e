// Unit tests of the f32 GEMV (kernels/cpu/f32_gemv*.cpp, generate's f32 weights at batch 1): on every
// path this CPU runs (the GEMM library, AVX-512), for odd shapes (column tails inside a 16-lane
// step, tile tails of 4 rows, several 64-row blocks, GPT-2's widths), on 1 and 3 threads, y equals
// the double product within the rounding of K f32 sums, |y - sum_k x_k w_k| <= gamma_K sum_k |x_k w_k|,
// nothing is written past y, and a negative extent is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/f32_gemv_paths.h"

namespace {

namespace cpu = tessera::kernels::cpu;
using cpu::F32GemvPath;
using Threads = tessera::testing::ScopedThreads;

std::vector<float> random(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  tessera::philox_fill_normal(v.data(), n, 35, stream, 0, 0.0f, 1.0f);
  return v;
}

std::vector<F32GemvPath> paths() {
  std::vector<F32GemvPath> p{F32GemvPath::library};
  if (cpu::f32_gemv_path_supported(F32GemvPath::avx512)) p.push_back(F32GemvPath::avx512);
  return p;
}

TEST(F32Gemv, EqualsTheProductWithinRounding) {
  struct Case {
    int64_t rows, cols;
  };
  const Case cases[] = {{7, 96}, {13, 40}, {5, 33}, {1, 1}, {4, 15}, {67, 17}, {130, 768}, {9, 1025}, {70, 3072}};
  int checked = 0;
  for (F32GemvPath path : paths())
    for (const Case& c : cases)
      for (int threads : {1, 3}) {
        Threads scoped(threads);
        const std::vector<float> w = random(c.rows * c.cols, 1 + c.cols), x = random(c.cols, 2 + c.rows);
        std::vector<float> y(static_cast<size_t>(c.rows + 1), -7.0f);
        cpu::f32_gemv_on_path(path, y.data(), x.data(), w.data(), c.rows, c.cols);
        const double u = std::ldexp(1.0, -24), gamma = c.cols * u / (1 - c.cols * u);
        const std::string what = std::string(cpu::f32_gemv_path_name(path)) + " [" + std::to_string(c.rows) + ", " +
                                 std::to_string(c.cols) + "] on " + std::to_string(threads) + " thread(s)";
        for (int64_t n = 0; n < c.rows; ++n) {
          double exact = 0, magnitude = 0;
          for (int64_t k = 0; k < c.cols; ++k) {
            const double p = double(x[k]) * w[n * c.cols + k];
            exact += p;
            magnitude += std::fabs(p);
          }
          ASSERT_LE(std::fabs(y[n] - exact), gamma * magnitude + 1e-30) << what << ", output " << n;
        }
        EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
        ++checked;
      }
  EXPECT_EQ(checked, static_cast<int>(paths().size() * std::size(cases) * 2));
}

TEST(F32Gemv, PublicOpRunsTheBestPath) {
  const std::vector<float> w = random(33 * 100, 5), x = random(100, 6);
  std::vector<float> a(33), b(33);
  cpu::f32_gemv(a.data(), x.data(), w.data(), 33, 100);
  cpu::f32_gemv_on_path(cpu::f32_gemv_best_path(), b.data(), x.data(), w.data(), 33, 100);
  EXPECT_EQ(a, b);
}

TEST(F32Gemv, NegativeExtentIsRefused) {
  std::vector<float> x(4), w(16), y(4);
  try {
    cpu::f32_gemv(y.data(), x.data(), w.data(), -1, 4);
    ADD_FAILURE() << "a negative row count was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a negative extent"), std::string::npos) << e.what();
  }
}

}  // namespace
