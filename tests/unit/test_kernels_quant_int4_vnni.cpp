// Unit tests of the int4 GEMV's integer product on AVX-512 VNNI (kernels/cpu/quant_int4_gemv_vnni.cpp),
// which quant_gemv runs for int4 matrices on the AVX-512 path where the CPU has VNNI: against the
// dequantised weights multiplied in double within its stated bound (quant_paths.h), for odd shapes,
// chunk tails, groups of 8 to 192 and activations of wide range; the same bits on 1 and 3 threads;
// the f32 kernel's bits where it does not apply (groups not a multiple of 8, x not finite, x tiny).
//
// The bound, for w_k = dequantize_weights' value, x~_k = x_k's three int8 terms (|x_k - x~_k| <=
// max|x| 2^-21), s_k, q_k, z_k the weight's scale, level and zero point:
//   |y - sum_k x_k w_k| <= (gamma_K + u) sum_k |x_k w_k|            (w_k rounded once, as the f32 kernels)
//                        + 2^-20 max|x| sum_k |w_k|                  (the activations' remainder, with room)
//                        + gamma_L sum_k s_k (q_k + z_k) |x~_k|      (the f32 sums of the exact integer sums)
// where L = chunks + groups / 16 + 8: each lane's chunk sums, the zero-point steps, the conversions
// and the lane sums.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"

namespace {

namespace cpu = tessera::kernels::cpu;
using cpu::QuantPath;
using tessera::kernels::QuantMatrixView;
using Threads = tessera::testing::ScopedThreads;

struct Int4Matrix {
  std::vector<uint8_t> q, zeros;
  std::vector<float> scales, deq;
  QuantMatrixView view;
};

Int4Matrix int4_matrix(int64_t rows, int64_t cols, int64_t group, uint64_t stream) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  tessera::philox_fill_normal(w.data(), rows * cols, 41, stream, 0, 0.0f, 0.05f);
  Int4Matrix m;
  m.q.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * cols / group));
  m.zeros.resize(m.scales.size());
  cpu::quantize_weights(m.q.data(), m.scales.data(), m.zeros.data(), w.data(), rows, cols, group, 4, false);
  m.view = QuantMatrixView{m.q.data(), m.scales.data(), m.zeros.data(), rows, cols, group, 4};
  m.deq.resize(w.size());
  cpu::dequantize_weights(m.deq.data(), m.view);
  return m;
}

// Activations: 0 plain normal, 1 one element 1000 times the rest, 2 magnitudes spread over 2^-10 .. 2^10.
std::vector<float> activations(int64_t cols, int kind, uint64_t stream) {
  std::vector<float> x(static_cast<size_t>(cols));
  tessera::philox_fill_normal(x.data(), cols, 42, stream, 0, 0.0f, 1.0f);
  if (kind == 1) x[static_cast<size_t>(cols / 3)] = 1000.0f;
  if (kind == 2)
    for (int64_t k = 0; k < cols; ++k) {
      float& e = x[static_cast<size_t>(k)];
      e = std::ldexp(e, int(k % 21) - 10);
    }
  return x;
}

void expect_within_bound(const std::vector<float>& y, const std::vector<float>& x, const Int4Matrix& m,
                         const std::string& what) {
  const QuantMatrixView& v = m.view;
  const int64_t groups = v.cols / v.group, chunks = (v.cols + 127) / 128;
  const double u = std::ldexp(1.0, -24), gamma_k = v.cols * u / (1 - v.cols * u) + u;
  const double big_l = double(chunks + groups / 16 + 8), gamma_l = big_l * u / (1 - big_l * u);
  double top = 0;
  for (float e : x) top = std::max(top, double(std::fabs(e)));
  for (int64_t n = 0; n < v.rows; ++n) {
    double exact = 0, magnitude = 0, weights = 0, levels = 0;
    for (int64_t k = 0; k < v.cols; ++k) {
      const double wk = m.deq[static_cast<size_t>(n * v.cols + k)], xk = x[static_cast<size_t>(k)];
      exact += xk * wk;
      magnitude += std::fabs(xk * wk);
      weights += std::fabs(wk);
      const int64_t g = n * groups + k / v.group;
      const uint8_t pair = m.q[static_cast<size_t>((n * v.cols + k) / 2)];
      const int level = k % 2 == 0 ? pair & 0x0F : pair >> 4;
      levels += double(m.scales[static_cast<size_t>(g)]) * (level + m.zeros[static_cast<size_t>(g)]) *
                (std::fabs(xk) + top * std::ldexp(1.0, -20));
    }
    const double bound = gamma_k * magnitude + std::ldexp(1.0, -20) * top * weights + gamma_l * levels + 1e-30;
    ASSERT_LE(std::fabs(y[static_cast<size_t>(n)] - exact), bound)
        << what << " row " << n << ": " << y[static_cast<size_t>(n)] << " vs " << exact;
  }
}

bool vnni() { return cpu::quant_int4_vnni_supported() && cpu::quant_path_supported(QuantPath::avx512); }

TEST(QuantInt4Vnni, GemvWithinItsBound) {
  if (!vnni()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: the integer int4 GEMV is never chosen here";
  struct Shape {
    int64_t rows, cols, group;
  };
  // Row tails (tiles of 4), chunk tails (columns not a multiple of 128), groups of 8 to 192, groups
  // that end inside a chunk's lane span (24, 40, 96, 192), one chunk and many.
  const Shape shapes[] = {{7, 96, 32},   {13, 40, 8},   {5, 48, 16},   {9, 120, 24},  {17, 64, 16},
                          {12, 160, 40}, {33, 96, 96},  {6, 256, 128}, {19, 80, 8},   {4, 8, 8},
                          {6, 136, 8},   {70, 768, 64}, {5, 3072, 192}, {3, 1000, 40}, {66, 384, 128}};
  int checked = 0;
  for (const Shape& s : shapes) {
    const Int4Matrix m = int4_matrix(s.rows, s.cols, s.group, uint64_t(s.cols + s.rows));
    ASSERT_TRUE(cpu::quant_int4_vnni_fits(m.view));
    for (int kind : {0, 1, 2}) {
      const std::vector<float> x = activations(s.cols, kind, uint64_t(s.rows));
      const std::string what = "[" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "] G=" +
                               std::to_string(s.group) + " activations " + std::to_string(kind);
      // The kernel itself, then through quant_gemv on 1 and 3 threads: the same bits.
      std::vector<uint8_t> scratch(static_cast<size_t>(cpu::quant_int4_vnni_scratch_bytes(m.view)));
      cpu::Int4VnniActivations a;
      ASSERT_TRUE(cpu::quant_int4_vnni_prepare(a, scratch.data(), x.data(), m.view)) << what;
      std::vector<float> direct(static_cast<size_t>(s.rows + 1), -7.0f);
      cpu::quant_int4_gemv_rows_vnni(direct.data(), a, m.view, 0, s.rows);
      EXPECT_EQ(direct.back(), -7.0f) << what << ": written past the output";
      direct.pop_back();
      expect_within_bound(direct, x, m, what);
      for (int threads : {1, 3}) {
        Threads scoped(threads);
        std::vector<float> y(static_cast<size_t>(s.rows));
        cpu::quant_gemv_on_path(QuantPath::avx512, y.data(), x.data(), m.view);
        ASSERT_EQ(y, direct) << what << " on " << threads << " threads";
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(std::size(shapes) * 3));
}

// Zero activations give zeros exactly; groups not a multiple of 8, activations not finite or under
// 2^-100 everywhere take the f32 AVX-512 kernel (the same bits as calling it).
TEST(QuantInt4Vnni, ZerosAndTheCasesItLeavesToTheF32Kernel) {
  if (!vnni()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: the integer int4 GEMV is never chosen here";
  {
    const Int4Matrix m = int4_matrix(9, 256, 64, 5);
    std::vector<float> y(9, -7.0f);
    const std::vector<float> x(256, 0.0f);
    cpu::quant_gemv_on_path(QuantPath::avx512, y.data(), x.data(), m.view);
    for (float e : y) EXPECT_EQ(e, 0.0f);
  }
  auto expect_f32_kernel = [](const Int4Matrix& m, const std::vector<float>& x, const std::string& what) {
    std::vector<float> y(static_cast<size_t>(m.view.rows)), f32(y.size());
    cpu::quant_gemv_on_path(QuantPath::avx512, y.data(), x.data(), m.view);
    cpu::quant_gemv_rows_avx512(f32.data(), x.data(), m.view, 0, m.view.rows);
    for (size_t n = 0; n < y.size(); ++n)
      EXPECT_TRUE(y[n] == f32[n] || (std::isnan(y[n]) && std::isnan(f32[n]))) << what << " row " << n;
  };
  for (int64_t group : {6, 10, 12}) {
    const Int4Matrix m = int4_matrix(7, 120, group, 6);
    EXPECT_FALSE(cpu::quant_int4_vnni_fits(m.view));
    expect_f32_kernel(m, activations(120, 0, 7), "group " + std::to_string(group));
  }
  const Int4Matrix m = int4_matrix(7, 256, 32, 8);
  std::vector<float> x = activations(256, 0, 9);
  x[100] = std::numeric_limits<float>::infinity();
  expect_f32_kernel(m, x, "an infinite activation");
  x[100] = std::numeric_limits<float>::quiet_NaN();
  expect_f32_kernel(m, x, "a NaN activation");
  for (float& e : x) e = 1e-32f;
  expect_f32_kernel(m, x, "activations under 2^-100");
}

}  // namespace
