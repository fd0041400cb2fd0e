// Unit tests of attention_decode_forward (kernels/cpu/attention_decode.cpp, a decode step's one
// query against a slot's cached rows): equal to softmax(q k^T / sqrt(d)) v computed in double, and
// to the block kernel (attention_block_forward) on the same rows, within f32 rounding, for one
// position, tile tails (64k +- 1), head dims not a multiple of 16, and scores large enough that
// exp would overflow without the running max; bad shapes are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/cpu/cpu_ops.h"

namespace {

namespace cpu = tessera::kernels::cpu;

std::vector<float> random(int64_t n, uint64_t stream, float std) {
  std::vector<float> v(static_cast<size_t>(n));
  tessera::philox_fill_normal(v.data(), n, 61, stream, 0, 0.0f, std);
  return v;
}

TEST(AttentionDecode, EqualsSoftmaxInDoubleAndTheBlockKernel) {
  struct Case {
    int64_t n, dim;
    float q_std;
  };
  int checked = 0;
  for (const Case& c : {Case{1, 64, 1.0f}, Case{5, 32, 1.0f}, Case{63, 64, 1.0f}, Case{64, 64, 1.0f},
                        Case{65, 48, 1.0f}, Case{200, 8, 1.0f}, Case{129, 80, 1.0f}, Case{70, 64, 40.0f}}) {
    const std::vector<float> q = random(c.dim, 1 + c.n, c.q_std), kv = random(c.n * 2 * c.dim, 2 + c.dim, 1.0f);
    std::vector<double> p(static_cast<size_t>(c.n));
    double top = -1e300, sum = 0;
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t d = 0; d < c.dim; ++d) s += double(q[d]) * kv[j * 2 * c.dim + d];
      p[j] = s / std::sqrt(double(c.dim));
      top = std::max(top, p[j]);
    }
    for (double& x : p) sum += x = std::exp(x - top);
    std::vector<float> out(static_cast<size_t>(c.dim + 1), -7.0f);
    cpu::attention_decode_forward(out.data(), q.data(), kv.data(), c.n, c.dim);
    // The block kernel on the same rows: keys at kv, values at kv + dim, rows 2 dim apart.
    std::vector<float> block(static_cast<size_t>(c.dim)), lse(1);
    const tessera::kernels::AttentionBlockShape shape{1, 1, c.n, 1, c.dim, c.dim, 2 * c.dim, false};
    cpu::attention_block_forward(block.data(), lse.data(), q.data(), kv.data(), kv.data() + c.dim, shape, false);
    const std::string what = "n=" + std::to_string(c.n) + " dim=" + std::to_string(c.dim);
    for (int64_t d = 0; d < c.dim; ++d) {
      double want = 0, magnitude = 0;
      for (int64_t j = 0; j < c.n; ++j) {
        want += p[j] / sum * kv[j * 2 * c.dim + c.dim + d];
        magnitude += p[j] / sum * std::fabs(kv[j * 2 * c.dim + c.dim + d]);
      }
      // f32 scores of |q . k| up to a few hundred (q_std 40) carry their rounding into exp.
      const double tol = (c.q_std > 1 ? 1e-4 : 2e-6) * std::max(magnitude, 1e-3);
      ASSERT_NEAR(out[d], want, tol) << what << " d=" << d;
      ASSERT_NEAR(out[d], block[d], tol) << what << " d=" << d << " against the block kernel";
    }
    EXPECT_EQ(out.back(), -7.0f) << what << ": written past the output";
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

TEST(AttentionDecode, BadShapesAreRefused) {
  std::vector<float> out(300), q(300), kv(600);
  using Shape = std::pair<int64_t, int64_t>;  // positions, head_dim
  for (const auto& [n, dim] : {Shape{0, 64}, Shape{4, 0}, Shape{1, 257}}) {
    try {
      cpu::attention_decode_forward(out.data(), q.data(), kv.data(), n, dim);
      ADD_FAILURE() << "accepted n=" << n << " dim=" << dim;
    } catch (const tessera::Error& e) {
      EXPECT_NE(std::string(e.what()).find("attention_decode_forward: head_dim"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
