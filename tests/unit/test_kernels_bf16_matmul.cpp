// Unit tests of the products by bf16 weights (kernels/cpu/bf16_matmul*.cpp, generate --weights
// bf16): on every path this CPU runs (portable, AVX-512 BF16, AMX), for odd shapes (column tails inside
// a 32-column step, odd column counts, tile tails), one row and several, on 1 and 3 threads:
// - y equals the double product of the rounded activations x~ = bf16(x) and the bf16 weights within
//   the rounding of K f32 sums: |y - sum_k x~_k w_k| <= gamma_K sum_k |x~_k w_k| (the contract of
//   bf16_matmul_paths.h; the inputs here have no subnormals, so vdpbf16ps flushes nothing);
// - against the f32 activations and the f32 weights the bf16 copy was rounded from, within
//   (gamma_K + (2^-7 + 2^-16)(1 + gamma_K)) sum_k |x_k w0_k|;
// - a row's result does not depend on the rows beside it: on the AVX-512 and AMX paths bit for bit, on the
//   portable one (a loop under 4 rows, sgemm panels from 4) within twice the rounding bound;
// - the public op runs the chosen path, which follows the kernel copies' instruction set (AMX for
//   dense weights where it runs, never for quantised ones);
// - a quantised matrix's bf16 products (quant_bf16_matmul) equal the double product of bf16(x) and
//   its dequantised values rounded to bf16 within the same bound, on every pair of paths, for int8
//   and int4 and several group sizes, and a row alone equals the row in a batch;
// - the register kernel of 1 to 3 rows (quant_bf16_gemv_avx512.cpp) equals the bf16 panels bit for
//   bit with either way of unpacking int4 indices (widened; multishifted where the CPU has VBMI),
//   for groups of 32 to 128, tile tails, one step per group, and rows too wide for the multishift;
// - the AMX tiles' edges (1 to 40 activation rows, output-row tails, one step, a matrix that takes
//   the fallback): the same bits alone and in a batch, and quantised equal to dense on one path.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/bf16_matmul_paths.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace {

namespace cpu = tessera::kernels::cpu;
using cpu::Bf16MatmulPath;
using Threads = tessera::testing::ScopedThreads;

std::vector<float> random(int64_t n, uint64_t stream, float std = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  tessera::philox_fill_normal(v.data(), n, 35, stream, 0, 0.0f, std);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = cpu::bf16_from_f32(v[i]);
  return b;
}

float widened(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

std::vector<Bf16MatmulPath> paths() {
  std::vector<Bf16MatmulPath> p{Bf16MatmulPath::scalar};
  for (Bf16MatmulPath path : {Bf16MatmulPath::avx512_bf16, Bf16MatmulPath::amx_bf16})
    if (cpu::bf16_matmul_path_supported(path)) p.push_back(path);
  return p;
}

struct Case {
  int64_t m, rows, cols;
};
// Column tails inside a 32-column step (and odd counts: a pair half filled), tile tails of the 4 x 4
// tiles, several 64-row blocks, and GPT-2's widths.
const Case kCases[] = {{1, 7, 96},  {1, 13, 40},   {1, 5, 33},    {2, 9, 120},  {3, 17, 64},
                       {4, 12, 160}, {5, 33, 97},  {7, 6, 256},   {11, 19, 80}, {6, 150, 1024},
                       {1, 9, 1025}, {32, 70, 768}, {1, 130, 768}, {0, 5, 16},   {3, 4, 1}};

double gamma(int64_t k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1 - k * u);
}

// y [m, rows] against the double product of xs [m, cols] and ws [rows, cols]: |y - exact| <= bound *
// sum |products| (+ a floor for zero rows).
void expect_within(const std::vector<float>& y, const std::vector<float>& xs, const std::vector<float>& ws,
                   const Case& c, double bound, const std::string& what) {
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t n = 0; n < c.rows; ++n) {
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double p = double(xs[i * c.cols + k]) * ws[n * c.cols + k];
        exact += p;
        magnitude += std::fabs(p);
      }
      ASSERT_LE(std::fabs(y[i * c.rows + n] - exact), bound * magnitude + 1e-30)
          << what << " [" << i << ", " << n << "]: " << y[i * c.rows + n] << " vs " << exact;
    }
}

std::string describe(Bf16MatmulPath path, const Case& c, int threads) {
  return std::string(cpu::bf16_matmul_path_name(path)) + " M=" + std::to_string(c.m) + " [" + std::to_string(c.rows) +
         ", " + std::to_string(c.cols) + "] on " + std::to_string(threads) + " thread(s)";
}

TEST(Bf16Matmul, EqualsRoundedProductWithinRounding) {
  int checked = 0;
  for (Bf16MatmulPath path : paths())
    for (const Case& c : kCases)
      for (int threads : {1, 3}) {
        Threads scoped(threads);
        const std::vector<float> w0 = random(c.rows * c.cols, 2 + c.cols, 0.05f);
        const std::vector<float> x = random(c.m * c.cols, 3 + c.rows);
        const std::vector<uint16_t> w = to_bf16(w0);
        std::vector<float> ws(w.size()), xs(x.size());
        for (size_t i = 0; i < w.size(); ++i) ws[i] = widened(w[i]);
        for (size_t i = 0; i < x.size(); ++i) xs[i] = cpu::bf16_rounded(x[i]);
        const std::string what = describe(path, c, threads);
        // One more element than y needs, to see nothing is written past it.
        std::vector<float> y(static_cast<size_t>(c.m * c.rows + 1), -7.0f);
        cpu::bf16_matmul_on_path(path, y.data(), x.data(), c.m, w.data(), c.rows, c.cols);
        expect_within(y, xs, ws, c, gamma(c.cols), what + " against bf16(x) W");
        const double against_f32 = gamma(c.cols) + (std::ldexp(1.0, -7) + std::ldexp(1.0, -16)) * (1 + gamma(c.cols));
        expect_within(y, x, w0, c, against_f32, what + " against the f32 x and weights");
        EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
        ++checked;
      }
  EXPECT_EQ(checked, static_cast<int>(paths().size() * std::size(kCases) * 2));
}

// A row alone and inside a batch of 9: the batch composition does not change a row's result.
TEST(Bf16Matmul, ARowDoesNotDependOnTheRowsBesideIt) {
  const int64_t m = 9, rows = 75, cols = 200;
  const std::vector<uint16_t> w = to_bf16(random(rows * cols, 11, 0.1f));
  const std::vector<float> x = random(m * cols, 12);
  for (Bf16MatmulPath path : paths()) {
    std::vector<float> batch(static_cast<size_t>(m * rows)), alone(static_cast<size_t>(rows));
    cpu::bf16_matmul_on_path(path, batch.data(), x.data(), m, w.data(), rows, cols);
    for (int64_t i = 0; i < m; ++i) {
      cpu::bf16_matmul_on_path(path, alone.data(), x.data() + i * cols, 1, w.data(), rows, cols);
      for (int64_t n = 0; n < rows; ++n) {
        const float a = alone[n], b = batch[i * rows + n];
        if (path != Bf16MatmulPath::scalar) {
          ASSERT_EQ(a, b) << cpu::bf16_matmul_path_name(path) << ": row " << i << ", output " << n
                          << " alone and in a batch of " << m;
        } else {
          double magnitude = 0;
          for (int64_t k = 0; k < cols; ++k)
            magnitude += std::fabs(double(cpu::bf16_rounded(x[i * cols + k])) * widened(w[n * cols + k]));
          ASSERT_LE(std::fabs(double(a) - b), 2 * gamma(cols) * magnitude)
              << "scalar: row " << i << ", output " << n << " alone and in a batch of " << m;
        }
      }
    }
  }
}

TEST(Bf16Matmul, PublicOpRunsTheBestPath) {
  const int64_t m = 3, rows = 10, cols = 64;
  const std::vector<uint16_t> w = to_bf16(random(rows * cols, 9, 0.1f));
  const std::vector<float> x = random(m * cols, 10);
  std::vector<float> a(static_cast<size_t>(m * rows)), b(a.size());
  cpu::bf16_weight_matmul(a.data(), x.data(), m, w.data(), rows, cols);
  cpu::bf16_matmul_on_path(cpu::bf16_matmul_best_path(), b.data(), x.data(), m, w.data(), rows, cols);
  EXPECT_EQ(a, b);
  // The path follows the kernel copies' instruction set (TESSERA_CPU_ISA=base runs the portable one).
  if (cpu::kernel_isa() != cpu::Isa::avx512 && cpu::isa_copies()) {
    EXPECT_EQ(cpu::bf16_matmul_best_path(), Bf16MatmulPath::scalar);
  }
  // The dense products take AMX where it runs; the quantised ones never do (bf16_matmul_paths.h).
  if (cpu::bf16_matmul_path_supported(Bf16MatmulPath::amx_bf16) &&
      (cpu::kernel_isa() == cpu::Isa::avx512 || !cpu::isa_copies())) {
    EXPECT_EQ(cpu::bf16_matmul_best_path(), Bf16MatmulPath::amx_bf16);
  }
  EXPECT_NE(cpu::quant_bf16_best_path(), Bf16MatmulPath::amx_bf16);
}

struct Quantised {
  std::vector<uint8_t> q, zeros;
  std::vector<float> scales;
  tessera::kernels::QuantMatrixView view;
};

Quantised quantise(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t group, int bits) {
  Quantised r;
  r.q.resize(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2));
  r.scales.resize(static_cast<size_t>(rows * cols / group));
  r.zeros.resize(bits == 4 ? r.scales.size() : 0);
  cpu::quantize_weights(r.q.data(), r.scales.data(), bits == 4 ? r.zeros.data() : nullptr, w.data(), rows, cols,
                        group, bits, false);
  r.view = {r.q.data(), r.scales.data(), bits == 4 ? r.zeros.data() : nullptr, rows, cols, group, bits};
  return r;
}

TEST(Bf16Matmul, QuantisedWeightsEqualTheirRoundedDequantisedProduct) {
  struct QCase {
    int64_t m, rows, cols, group;
  };
  // Under 4 rows with a group a multiple of 32 the AVX-512 paths dequantise in registers (no panel).
  const QCase cases[] = {{1, 7, 96, 32},   {1, 13, 40, 8},    {3, 17, 64, 16},   {4, 12, 160, 40},
                         {5, 33, 96, 96},  {32, 70, 768, 64}, {2, 9, 1024, 64},  {9, 100, 2048, 64},
                         {1, 130, 768, 128}, {3, 70, 768, 64}, {2, 66, 256, 32}, {1, 5, 3072, 64},
                         {1, 67, 32, 32},  {1, 131, 480, 96}, {3, 6, 384, 128}, {2, 71, 160, 32}};
  std::vector<cpu::QuantPath> qpaths{cpu::QuantPath::scalar};
  if (cpu::quant_path_supported(cpu::QuantPath::avx512)) qpaths.push_back(cpu::QuantPath::avx512);
  int checked = 0;
  for (cpu::QuantPath qpath : qpaths)
    for (Bf16MatmulPath bpath : paths())
      for (int bits : {8, 4})
        for (const QCase& qc : cases)
          for (int threads : {1, 3}) {
            Threads scoped(threads);
            const Case c{qc.m, qc.rows, qc.cols};
            const Quantised q = quantise(random(c.rows * c.cols, 20 + c.cols, 0.05f), c.rows, c.cols, qc.group, bits);
            const std::vector<float> x = random(c.m * c.cols, 21 + c.rows);
            std::vector<float> ws(static_cast<size_t>(c.rows * c.cols)), xs(x.size());
            cpu::dequantize_weights(ws.data(), q.view);
            for (float& v : ws) v = cpu::bf16_rounded(v);
            for (size_t i = 0; i < x.size(); ++i) xs[i] = cpu::bf16_rounded(x[i]);
            const std::string what = std::string(cpu::quant_path_name(qpath)) + " + " + describe(bpath, c, threads) +
                                     " int" + std::to_string(bits) + " G" + std::to_string(qc.group);
            std::vector<float> y(static_cast<size_t>(c.m * c.rows + 1), -7.0f);
            cpu::quant_bf16_matmul_on_paths(qpath, bpath, y.data(), x.data(), c.m, q.view);
            expect_within(y, xs, ws, c, gamma(c.cols), what);
            EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
            if (bpath != Bf16MatmulPath::scalar && qpath == cpu::QuantPath::avx512) {
              // Dequantised in registers (under 4 rows) or into panels (the scalar dequantisation's):
              // the same bits.
              std::vector<float> panels(static_cast<size_t>(c.m * c.rows));
              cpu::quant_bf16_matmul_on_paths(cpu::QuantPath::scalar, bpath, panels.data(), x.data(), c.m, q.view);
              for (int64_t i = 0; i < c.m * c.rows; ++i)
                ASSERT_EQ(panels[i], y[i]) << what << ": against the panels, output " << i;
            }
            if (bpath != Bf16MatmulPath::scalar && c.m > 1) {  // a row alone: the same bits
              std::vector<float> alone(static_cast<size_t>(c.rows));
              cpu::quant_bf16_matmul_on_paths(qpath, bpath, alone.data(), x.data() + (c.m - 1) * c.cols, 1, q.view);
              for (int64_t n = 0; n < c.rows; ++n)
                ASSERT_EQ(alone[n], y[(c.m - 1) * c.rows + n]) << what << ": the last row alone, output " << n;
            }
            ++checked;
          }
  EXPECT_EQ(checked, static_cast<int>(qpaths.size() * paths().size() * 2 * std::size(cases) * 2));
}

// The register kernel called directly with each int4 unpacking this CPU runs (and int8), against
// the panels that 4 or more rows use: the same bits, so a row's text does not depend on its batch.
TEST(Bf16Matmul, RegisterKernelUnpackingsEqualThePanelsBitForBit) {
  if (!cpu::bf16_matmul_path_supported(Bf16MatmulPath::avx512_bf16) ||
      !cpu::quant_path_supported(cpu::QuantPath::avx512))
    GTEST_SKIP() << "no AVX-512 BF16 kernel copy on this CPU / ISA setting: the register kernel is never chosen";
  struct QCase {
    int64_t rows, cols, group;
  };
  // Tile tails (rows not a multiple of 4, several 64-row blocks), one step a group (32), three (96),
  // four (128), and 8224 columns: wider than the multishifted rows' buffer (the widened indices).
  const QCase cases[] = {{7, 96, 32},  {13, 64, 64},  {67, 480, 96}, {130, 768, 128},
                         {5, 3072, 64}, {70, 160, 32}, {3, 8224, 32}};
  std::vector<bool> unpackings{false};
  if (cpu::quant_bf16_gemv_multishift_supported()) unpackings.push_back(true);
  int checked = 0;
  for (int bits : {4, 8})
    for (const QCase& qc : cases)
      for (int64_t m : {1, 2, 3}) {
        const Quantised q = quantise(random(qc.rows * qc.cols, 40 + qc.cols, 0.05f), qc.rows, qc.cols, qc.group, bits);
        const std::vector<float> x = random(m * qc.cols, 41 + qc.rows);
        std::vector<float> panels(static_cast<size_t>(m * qc.rows));
        cpu::quant_bf16_matmul_on_paths(cpu::QuantPath::scalar, Bf16MatmulPath::avx512_bf16, panels.data(), x.data(), m,
                                        q.view);
        const std::vector<uint16_t> xb = to_bf16(x);
        for (bool multishift : unpackings) {
          const std::string what = "int" + std::to_string(bits) + " G" + std::to_string(qc.group) + " [" +
                                   std::to_string(qc.rows) + ", " + std::to_string(qc.cols) +
                                   "] M=" + std::to_string(m) + (multishift ? " multishifted" : " widened");
          std::vector<float> y(static_cast<size_t>(m * qc.rows + 1), -7.0f);
          for (int64_t n0 = 0; n0 < qc.rows; n0 += 64)  // as quant_bf16_matmul: 64-row blocks
            cpu::quant_bf16_gemv_rows_avx512_unpacked(y.data(), xb.data(), m, q.view, n0,
                                                      std::min<int64_t>(qc.rows, n0 + 64), multishift);
          for (int64_t i = 0; i < m * qc.rows; ++i) ASSERT_EQ(panels[i], y[i]) << what << ": output " << i;
          EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
          ++checked;
        }
      }
  EXPECT_EQ(checked, static_cast<int>(2 * std::size(cases) * 3 * unpackings.size()));
}

// The AMX tiles' edges on every vector path: activation rows 1, 3, 16 (one B tile), 17 and 40
// (chunks of 16 and a tail), output rows not a multiple of 16 (a tail tile) and past 64 (several
// blocks), one 32-column step, and 40 columns (no tiles: the avx512_bf16 kernels on the amx_bf16
// path). Each: within the contract, nothing written past y, a row alone has its bits in the batch,
// and the int8 / int4 weights give the bits of the dense product on their rounded values.
TEST(Bf16Matmul, TileEdgesKeepTheBitsForEveryRowCount) {
  struct ECase {
    int64_t rows, cols, group;
  };
  const ECase cases[] = {{37, 32, 32}, {75, 256, 64}, {130, 96, 32}, {21, 40, 8}};
  const cpu::QuantPath qpath =
      cpu::quant_path_supported(cpu::QuantPath::avx512) ? cpu::QuantPath::avx512 : cpu::QuantPath::scalar;
  int checked = 0;
  for (Bf16MatmulPath path : paths()) {
    if (path == Bf16MatmulPath::scalar) continue;
    for (const ECase& e : cases)
      for (int64_t m : {1, 3, 16, 17, 40})
        for (int threads : {1, 3}) {
          Threads scoped(threads);
          const Case c{m, e.rows, e.cols};
          const std::vector<float> x = random(m * e.cols, 50 + e.rows);
          std::vector<float> xs(x.size());
          for (size_t i = 0; i < x.size(); ++i) xs[i] = cpu::bf16_rounded(x[i]);
          for (int bits : {0, 8, 4}) {  // 0: dense bf16 weights
            const std::string what = describe(path, c, threads) + (bits ? " int" + std::to_string(bits) : " bf16");
            std::vector<float> ws;
            std::vector<uint16_t> wb;
            Quantised q;
            if (bits == 0) {
              wb = to_bf16(random(e.rows * e.cols, 51 + e.cols, 0.05f));
              for (uint16_t b : wb) ws.push_back(widened(b));
            } else {
              q = quantise(random(e.rows * e.cols, 52 + e.cols, 0.05f), e.rows, e.cols, e.group, bits);
              ws.resize(static_cast<size_t>(e.rows * e.cols));
              cpu::dequantize_weights(ws.data(), q.view);
              for (float& v : ws) v = cpu::bf16_rounded(v);
              wb = to_bf16(ws);
            }
            auto run = [&](float* y, const float* xi, int64_t rows_of_x) {
              if (bits == 0)
                cpu::bf16_matmul_on_path(path, y, xi, rows_of_x, wb.data(), e.rows, e.cols);
              else
                cpu::quant_bf16_matmul_on_paths(qpath, path, y, xi, rows_of_x, q.view);
            };
            std::vector<float> y(static_cast<size_t>(m * e.rows + 1), -7.0f);
            run(y.data(), x.data(), m);
            expect_within(y, xs, ws, c, gamma(e.cols), what);
            EXPECT_EQ(y.back(), -7.0f) << what << ": written past the output";
            std::vector<float> dense(static_cast<size_t>(m * e.rows));
            cpu::bf16_matmul_on_path(path, dense.data(), x.data(), m, wb.data(), e.rows, e.cols);
            for (int64_t i = 0; i < m * e.rows; ++i)
              ASSERT_EQ(dense[i], y[i]) << what << ": against dense, output " << i;
            std::vector<float> alone(static_cast<size_t>(e.rows));
            for (int64_t i : {int64_t{0}, m - 1}) {
              run(alone.data(), x.data() + i * e.cols, 1);
              for (int64_t n = 0; n < e.rows; ++n)
                ASSERT_EQ(alone[n], y[i * e.rows + n]) << what << ": row " << i << " alone, output " << n;
            }
            ++checked;
          }
        }
  }
  EXPECT_EQ(checked, static_cast<int>((paths().size() - 1) * std::size(cases) * 5 * 2 * 3));
}

TEST(Bf16Matmul, BadExtentsAreRefused) {
  std::vector<float> x(16, 1.0f), y(4);
  std::vector<uint16_t> w(64);
  try {
    cpu::bf16_weight_matmul(y.data(), x.data(), -1, w.data(), 4, 16);
    ADD_FAILURE() << "a negative row count was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a negative extent"), std::string::npos) << e.what();
  }
}

}  // namespace
