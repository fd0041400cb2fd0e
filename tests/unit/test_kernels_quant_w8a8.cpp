// Unit tests of the int8-activation products (kernels/cpu/quant_w8a8*.cpp): the activations'
// quantisation lands each element within half its group's step; quant_w8a8_gemm on every path this
// CPU runs (portable, AVX-512 VNNI) and quant_w8a8_matmul (under 4 rows: the weight-only kernels on
// the dequantised int8 activations) equal the reference "quantise the activations
// (quantize_activations_int8), dequantise the weights (dequantize_weights), multiply in double"
// within the rounding of f32 sums, int8 and int4, odd shapes (block tails, row tiles of 1-3),
// groups not a multiple of 4 or 8, 1 and 3 threads; the matrix packed once (w8a8_pack, generate's
// load) gives quant_w8a8_gemm's bits on each path, for 1 row and many, reusing its scratch; the
// AVX-512 packing gives the portable packing's bytes; bad descriptions are refused naming the problem.
//
// The bound: each (row, weight row, group) integer sum is exact; the kernel rounds the two scales'
// product, the sum's conversion and the product (3 u a term, + u for the reference's own rounding
// of each dequantised weight), then sums the groups in f32: |y - exact| <= (gamma_K + 4u) sum_k
// |xdq_k w_k| (Higham 3.1; gamma_K bounds gamma_groups).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"
#include "kernels/cpu/quant_w8a8_packed.h"
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
// Rows in tiles of 4 and tails of 1-3, blocks of 32 weight rows and their tails, groups of 2, 6, 10
// and 24 (padded to 8), a group as wide as the row, one of 320 (its activation sums past an int16's
// reach: the VNNI kernel's other way of taking the offsets out).
const Case kCases[] = {{4, 32, 64, 64}, {5, 33, 96, 32},  {7, 70, 120, 24}, {1, 9, 40, 10},    {2, 17, 48, 6},
                       {3, 5, 64, 2},   {8, 65, 256, 64}, {6, 40, 80, 80},  {32, 100, 768, 64}, {5, 40, 640, 320}};

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

// A quantised matrix (int8 or int4) of the case's shape, owning its pieces.
struct Quantised {
  std::vector<uint8_t> q, zeros;
  std::vector<float> scales;
  QuantMatrixView view;
  Quantised(int64_t rows, int64_t cols, int64_t group, int bits, uint64_t stream) {
    const std::vector<float> w = random(rows * cols, stream, 0.05f);
    q.resize(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2));
    scales.resize(static_cast<size_t>(rows * cols / group));
    zeros.resize(bits == 4 ? scales.size() : 0);
    cpu::quantize_weights(q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, w.data(), rows, cols, group,
                          bits, false);
    view = {q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, rows, cols, group, bits};
  }
};

// The packed product (generate's) against the per-call packing: the same bits, every path, int8 and
// int4, 1-3 rows and the tiles' shapes, groups whose int4 words are whole (a multiple of 8) or not;
// one scratch for all, grown and shrunk, and not reallocated by a product that fits it.
TEST(QuantW8A8, PackedOnceEqualsPackedPerCall) {
  int checked = 0;
  for (W8A8Path path : paths())
    for (int bits : {8, 4}) {
      cpu::W8A8Scratch scratch;
      for (const Case& c : kCases)
        for (int64_t m : {c.m, int64_t{1}, int64_t{3}}) {
          const Quantised w(c.rows, c.cols, c.group, bits, 11 + c.cols);
          const cpu::W8A8PackedMatrix packed = cpu::w8a8_pack(w.view);
          ASSERT_EQ(packed.rows, c.rows);
          ASSERT_EQ(static_cast<int64_t>(packed.bytes.size()), packed.blocks() * packed.block_bytes());
          const std::vector<float> x = random(m * c.cols, 12 + c.rows, 1.0f);
          std::vector<float> want(static_cast<size_t>(m * c.rows + 1), -7.0f), got(want.size(), -7.0f);
          cpu::quant_w8a8_gemm_on_path(path, want.data(), x.data(), m, w.view);
          cpu::quant_w8a8_gemm_packed_on_path(path, got.data(), x.data(), m, packed, scratch);
          const std::string what = std::string(cpu::w8a8_path_name(path)) + " int" + std::to_string(bits) +
                                   " M=" + std::to_string(m) + " [" + std::to_string(c.rows) + ", " +
                                   std::to_string(c.cols) + "] G=" + std::to_string(c.group);
          for (size_t e = 0; e < want.size(); ++e)
            ASSERT_EQ(std::bit_cast<uint32_t>(got[e]), std::bit_cast<uint32_t>(want[e])) << what << " element " << e;
          const int8_t* before = scratch.xq.data();
          cpu::quant_w8a8_gemm_packed_on_path(path, got.data(), x.data(), m, packed, scratch);
          EXPECT_EQ(scratch.xq.data(), before) << what << ": a product that fits the scratch reallocated it";
          ++checked;
        }
    }
  EXPECT_EQ(checked, static_cast<int>(paths().size() * 2 * std::size(kCases) * 3));
}

// One row's result does not depend on the rows beside it: row i of an 11-row product equals the
// product of row i alone, bit for bit (tiles of 4 and of 1-3 alike).
TEST(QuantW8A8, PackedRowsIndependentOfTheBatch) {
  const int64_t m = 11, rows = 70, cols = 192, group = 64;
  for (W8A8Path path : paths())
    for (int bits : {8, 4}) {
      const Quantised w(rows, cols, group, bits, 21);
      const cpu::W8A8PackedMatrix packed = cpu::w8a8_pack(w.view);
      cpu::W8A8Scratch scratch;
      const std::vector<float> x = random(m * cols, 22, 1.0f);
      std::vector<float> all(static_cast<size_t>(m * rows)), one(static_cast<size_t>(rows));
      cpu::quant_w8a8_gemm_packed_on_path(path, all.data(), x.data(), m, packed, scratch);
      for (int64_t i = 0; i < m; ++i) {
        cpu::quant_w8a8_gemm_packed_on_path(path, one.data(), x.data() + i * cols, 1, packed, scratch);
        for (int64_t n = 0; n < rows; ++n)
          ASSERT_EQ(std::bit_cast<uint32_t>(one[n]), std::bit_cast<uint32_t>(all[i * rows + n]))
              << cpu::w8a8_path_name(path) << " int" << bits << " row " << i << ", output " << n;
      }
    }
}

// The AVX-512 packing of an int8 block (groups of a multiple of 8) gives the portable one's bytes.
TEST(QuantW8A8, VectorPackingEqualsPortablePacking) {
  if (!cpu::w8a8_path_supported(W8A8Path::avx512_vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  struct Shape {
    int64_t rows, cols, group;
  };
  for (const auto& [rows, cols, group] : {Shape{70, 192, 64}, Shape{33, 40, 8}, Shape{5, 120, 24}}) {
    const Quantised w(rows, cols, group, 8, 31);
    const int64_t groups = cols / group, bytes = groups * cpu::w8a8_group_bytes(cpu::w8a8_padded_group(group), 8);
    for (int64_t n0 = 0; n0 < rows; n0 += cpu::kW8A8BlockRows) {
      const int64_t count = std::min(cpu::kW8A8BlockRows, rows - n0);
      std::vector<uint8_t> a(static_cast<size_t>(bytes), 1), b(a.size(), 2);
      std::vector<float> sa(static_cast<size_t>(groups * cpu::kW8A8BlockRows)), sb(sa.size());
      std::vector<int32_t> oa(sa.size()), ob(sa.size());
      cpu::w8a8_pack_block(a.data(), sa.data(), oa.data(), w.view, n0, count);
      cpu::w8a8_pack_block_vnni(b.data(), sb.data(), ob.data(), w.view, n0, count);
      ASSERT_EQ(a, b) << "[" << rows << ", " << cols << "] G=" << group << " block at row " << n0;
      ASSERT_EQ(sa, sb);
      ASSERT_EQ(oa, ob);
    }
  }
}

// The AVX-512 quantisation of the activations gives the portable one's bytes, scales and sums:
// groups of 16k, with a tail, narrower than a vector, padded; values on rounding ties (k + 1/2
// steps) and an all-zero group.
TEST(QuantW8A8, VectorActivationQuantisationEqualsPortable) {
  if (!cpu::w8a8_path_supported(W8A8Path::avx512_vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  struct Shape {
    int64_t m, cols, group;
  };
  for (const auto& [m, cols, group] :
       {Shape{3, 192, 64}, Shape{2, 120, 24}, Shape{5, 40, 10}, Shape{1, 96, 96}, Shape{4, 48, 6}, Shape{2, 36, 18}}) {
    std::vector<float> x = random(m * cols, 41 + cols, 1.5f);
    for (int64_t k = 0; k < group; ++k) x[static_cast<size_t>(k)] = 0.0f;  // row 0's first group: zeros
    // A group whose largest is 127 exactly: its other values k + 1/2 land on ties.
    for (int64_t k = 0; k < group; ++k) x[static_cast<size_t>(cols - group + k)] = k == 0 ? 127.0f : float(k % 9) - 3.5f;
    const int64_t groups = cols / group, padded = cpu::w8a8_padded_group(group);
    std::vector<int8_t> qa(static_cast<size_t>(m * groups * padded), 55), qb(qa.size(), 66);
    std::vector<float> sa(static_cast<size_t>(m * groups)), sb(sa.size());
    std::vector<int32_t> ua(sa.size()), ub(sa.size());
    cpu::quantize_activations_int8_portable(qa.data(), sa.data(), ua.data(), x.data(), m, cols, group);
    cpu::quantize_activations_int8_avx512(qb.data(), sb.data(), ub.data(), x.data(), m, cols, group);
    const std::string what = "M=" + std::to_string(m) + " K=" + std::to_string(cols) + " G=" + std::to_string(group);
    ASSERT_EQ(qa, qb) << what;
    ASSERT_EQ(sa, sb) << what;
    ASSERT_EQ(ua, ub) << what;
  }
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
