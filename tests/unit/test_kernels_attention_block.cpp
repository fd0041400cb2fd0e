// Unit tests of the CPU block attention through ops::attention_block_forward/backward: a causal
// sequence cut into query and key blocks, merged block by block, against the full causal kernel
// (ops::attention_forward/backward); the non-causal kernel against a naive double reference in
// both column layouts (dense q / packed kv, and qkv rows); gradients, through a merge too, against
// central finite differences; bad shapes refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gradcheck.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;
using tessera::testing::expect_error;
namespace ops = tessera::ops;
namespace gc = tessera::testing;

namespace {

using Threads = tessera::testing::ScopedThreads;

Tensor random_tensor(Shape shape, uint64_t stream, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 33, stream, 0.0f, std);
}

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::empty(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value;
  return t;
}

using tessera::testing::max_rel_error;
using tessera::testing::take_positions;

// Positions [t0, t0 + n) of lse [B, H, T], as a [B, H, n] copy.
Tensor take_lse(const Tensor& lse, int64_t t0, int64_t n) {
  return take_positions(lse.reshape({lse.dim(0) * lse.dim(1), lse.dim(2)}), t0, n).reshape({lse.dim(0), lse.dim(1), n});
}

// ---- a causal sequence in blocks ----------------------------------------------------------------

struct Split {
  int64_t batch, seq, heads, head_dim, blocks;
};

class BlockAttention : public ::testing::TestWithParam<Split> {};

// Query block i: the diagonal block (causal), then the earlier blocks i-1 .. 0 merged in (non-causal).
// Backward: each block pair adds dq to block i and dk, dv to block j. Every block is a [B, Tb, 3C]
// qkv, passed as both q and kv (and its gradient as both dq and dkv).
TEST_P(BlockAttention, MergedBlocksMatchTheFullCausalKernel) {
  const Split s = GetParam();
  ASSERT_EQ(s.seq % s.blocks, 0);
  const int64_t c = s.heads * s.head_dim, tb = s.seq / s.blocks;
  const Tensor qkv = random_tensor({s.batch, s.seq, 3 * c}, 1, 1.5f);
  const Tensor dout = random_tensor({s.batch, s.seq, c}, 2);
  Tensor out = Tensor::empty({s.batch, s.seq, c}), lse = Tensor::empty({s.batch, s.heads, s.seq});
  Tensor dqkv = Tensor::empty(qkv.shape());
  ops::attention_forward(out, lse, qkv, s.heads);
  ops::attention_backward(dqkv, dout, qkv, out, lse, s.heads);

  std::vector<Tensor> qkv_b, dout_b;
  for (int64_t i = 0; i < s.blocks; ++i) {
    qkv_b.push_back(take_positions(qkv, i * tb, tb));
    dout_b.push_back(take_positions(dout, i * tb, tb));
  }
  for (int threads : {1, 3}) {
    Threads scope(threads);
    std::vector<Tensor> out_b, lse_b, dqkv_b;
    for (int64_t i = 0; i < s.blocks; ++i) {
      out_b.push_back(filled({s.batch, tb, c}, NAN));  // overwritten by the diagonal block
      lse_b.push_back(filled({s.batch, s.heads, tb}, NAN));
      dqkv_b.push_back(Tensor::zeros(qkv_b[i].shape()));
      ops::attention_block_forward(out_b[i], lse_b[i], qkv_b[i], qkv_b[i], s.heads, true, false);
      for (int64_t j = i - 1; j >= 0; --j)
        ops::attention_block_forward(out_b[i], lse_b[i], qkv_b[i], qkv_b[j], s.heads, false, true);
      EXPECT_LT(max_rel_error(out_b[i], take_positions(out, i * tb, tb)), 1e-5) << "out block " << i << ", threads=" << threads;
      EXPECT_LT(max_rel_error(lse_b[i], take_lse(lse, i * tb, tb)), 1e-5) << "lse block " << i << ", threads=" << threads;
    }
    for (int64_t i = 0; i < s.blocks; ++i) {
      ops::attention_block_backward(dqkv_b[i], dqkv_b[i], dout_b[i], qkv_b[i], qkv_b[i], out_b[i], lse_b[i], s.heads,
                                    true);
      for (int64_t j = 0; j < i; ++j)
        ops::attention_block_backward(dqkv_b[i], dqkv_b[j], dout_b[i], qkv_b[i], qkv_b[j], out_b[i], lse_b[i],
                                      s.heads, false);
    }
    for (int64_t i = 0; i < s.blocks; ++i) {
      const Tensor want = take_positions(dqkv, i * tb, tb);
      for (int part = 0; part < 3; ++part)  // q, k, v separately: none hides behind the others' scale
        EXPECT_LT(max_rel_error(dqkv_b[i], want, part * c, c), 1e-5)
            << "d" << "qkv"[part] << " block " << i << ", threads=" << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, BlockAttention,
                         ::testing::Values(Split{2, 130, 2, 16, 2}, Split{1, 150, 3, 12, 3}, Split{2, 128, 2, 64, 4},
                                           Split{1, 148, 2, 5, 4}, Split{3, 8, 1, 16, 8}),
                         [](const auto& info) {
                           const Split& s = info.param;
                           std::ostringstream name;
                           name << "B" << s.batch << "_T" << s.seq << "_H" << s.heads << "_D" << s.head_dim << "_in"
                                << s.blocks;
                           return name.str();
                         });

// ---- non-causal against a naive reference ---------------------------------------------------------

struct Cross {
  int64_t batch, tq, tk, heads, head_dim;
};

// Naive attention in double: q [B, Tq, C] against kv [B, Tk, 2C] (keys then values), every key seen.
void naive_cross(const Cross& d, const Tensor& q, const Tensor& kv, std::vector<double>& out, std::vector<double>& lse) {
  const int64_t c = d.heads * d.head_dim;
  const double scale = 1.0 / std::sqrt(double(d.head_dim));
  out.assign(d.batch * d.tq * c, 0.0);
  lse.assign(d.batch * d.heads * d.tq, 0.0);
  std::vector<double> s(d.tk);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < d.tq; ++i) {
        const float* qi = q.data<float>() + (b * d.tq + i) * c + h * d.head_dim;
        double mx = -INFINITY;
        for (int64_t j = 0; j < d.tk; ++j) {
          const float* kj = kv.data<float>() + (b * d.tk + j) * 2 * c + h * d.head_dim;
          s[j] = 0.0;
          for (int64_t x = 0; x < d.head_dim; ++x) s[j] += double(qi[x]) * kj[x];
          s[j] *= scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < d.tk; ++j) sum += std::exp(s[j] - mx);
        const double l = mx + std::log(sum);
        lse[(b * d.heads + h) * d.tq + i] = l;
        for (int64_t j = 0; j < d.tk; ++j) {
          const float* vj = kv.data<float>() + (b * d.tk + j) * 2 * c + c + h * d.head_dim;
          for (int64_t x = 0; x < d.head_dim; ++x) out[(b * d.tq + i) * c + h * d.head_dim + x] += std::exp(s[j] - l) * vj[x];
        }
      }
}

double rel_error(const Tensor& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(got.data<float>()[i] - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / den;
}

// x [B, T, W] placed in columns [col0, col0 + W) of a [B, T, width] tensor whose other columns are junk.
Tensor widen(const Tensor& x, int64_t width, int64_t col0) {
  Tensor out = random_tensor({x.dim(0), x.dim(1), width}, 99, 100.0f);
  const int64_t rows = x.dim(0) * x.dim(1), w = x.dim(2);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x.data<float>() + r * w, w, out.data<float>() + r * width + col0);
  return out;
}

class CrossAttention : public ::testing::TestWithParam<Cross> {};

TEST_P(CrossAttention, NonCausalMatchesNaiveReferenceInBothLayouts) {
  const Cross d = GetParam();
  const int64_t c = d.heads * d.head_dim;
  const Tensor q = random_tensor({d.batch, d.tq, c}, 3, 1.5f), kv = random_tensor({d.batch, d.tk, 2 * c}, 4, 1.5f);
  std::vector<double> want_out, want_lse;
  naive_cross(d, q, kv, want_out, want_lse);
  // Dense q [B, Tq, C] with packed kv [B, Tk, 2C]; and both as qkv rows [., ., 3C] (q first, kv last).
  const Tensor q3 = widen(q, 3 * c, 0), kv3 = widen(kv, 3 * c, c);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (bool qkv_rows : {false, true}) {
      Tensor out = filled({d.batch, d.tq, c}, NAN), lse = filled({d.batch, d.heads, d.tq}, NAN);
      ops::attention_block_forward(out, lse, qkv_rows ? q3 : q, qkv_rows ? kv3 : kv, d.heads, false, false);
      EXPECT_LT(rel_error(out, want_out), 2e-6) << "out, qkv rows " << qkv_rows << ", threads " << threads;
      EXPECT_LT(rel_error(lse, want_lse), 2e-6) << "lse, qkv rows " << qkv_rows << ", threads " << threads;
    }
    // merge = true onto "no keys yet" (lse = -inf, out junk) is the same as merge = false.
    Tensor out = filled({d.batch, d.tq, c}, NAN), lse = filled({d.batch, d.heads, d.tq}, -INFINITY);
    ops::attention_block_forward(out, lse, q, kv, d.heads, false, true);
    EXPECT_LT(rel_error(out, want_out), 2e-6) << "merged onto nothing, threads " << threads;
    EXPECT_LT(rel_error(lse, want_lse), 2e-6) << "merged onto nothing, threads " << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossAttention,
                         ::testing::Values(Cross{2, 37, 70, 2, 12}, Cross{1, 5, 130, 3, 16}, Cross{2, 65, 1, 1, 20},
                                           Cross{1, 128, 64, 2, 64}),
                         [](const auto& info) {
                           const Cross& d = info.param;
                           std::ostringstream name;
                           name << "B" << d.batch << "_Tq" << d.tq << "_Tk" << d.tk << "_H" << d.heads << "_D"
                                << d.head_dim;
                           return name.str();
                         });

// ---- gradients against finite differences ---------------------------------------------------------

constexpr float kStep = 1.0f / 32;
constexpr double kTol = 1e-4;

// Checks d/dx of f against `analytic`, every element of x.
template <typename F>
void check(const std::string& what, Tensor& x, const Tensor& analytic, F&& f) {
  const gc::Comparison cmp = gc::compare_gradient(what, x, analytic, kStep, f);
  EXPECT_LT(cmp.rel_err, kTol) << what;
  EXPECT_GT(cmp.num_norm, 1e-3) << what << ": the objective barely depends on it";
}

// Queries [B, T, C] against their own keys (diagonal, causal) merged with an earlier packed key
// block [B, Tk, 2C] (non-causal), objective sum(out * r). The backward runs on the final out and
// lse and accumulates: dq starts at 0.5 and the columns of the qkv gradient outside the checked ones
// must stay as they were.
TEST(BlockAttentionGrad, MergedDiagonalAndEarlierBlockMatchFiniteDifferences) {
  const int64_t batch = 2, seq = 5, tk = 7, heads = 2, head_dim = 3, c = heads * head_dim;
  Tensor qkv = random_tensor({batch, seq, 3 * c}, 5, 1.5f), kv = random_tensor({batch, tk, 2 * c}, 6, 1.5f);
  const Tensor r = random_tensor({batch, seq, c}, 7);
  Tensor out = Tensor::empty({batch, seq, c}), lse = Tensor::empty({batch, heads, seq});
  auto forward = [&]() {
    ops::attention_block_forward(out, lse, qkv, qkv, heads, true, false);
    ops::attention_block_forward(out, lse, qkv, kv, heads, false, true);
  };
  auto f = [&]() {
    forward();
    return gc::dot(out, r);
  };
  forward();
  Tensor dqkv = filled(qkv.shape(), 0.5f), dkv = Tensor::zeros(kv.shape());
  ops::attention_block_backward(dqkv, dqkv, r, qkv, qkv, out, lse, heads, true);
  ops::attention_block_backward(dqkv, dkv, r, qkv, kv, out, lse, heads, false);
  for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.data<float>()[i] -= 0.5f;
  check("qkv (q: both blocks; k, v: diagonal)", qkv, dqkv, f);
  check("kv (earlier block)", kv, dkv, f);
}

TEST(BlockAttentionGrad, NonCausalDenseQueriesAndPackedKeysMatchFiniteDifferences) {
  const int64_t batch = 1, tq = 4, tk = 9, heads = 2, head_dim = 5, c = heads * head_dim;
  Tensor q = random_tensor({batch, tq, c}, 8, 1.5f), kv = random_tensor({batch, tk, 2 * c}, 9, 1.5f);
  const Tensor r = random_tensor({batch, tq, c}, 10);
  Tensor out = Tensor::empty({batch, tq, c}), lse = Tensor::empty({batch, heads, tq});
  auto f = [&]() {
    ops::attention_block_forward(out, lse, q, kv, heads, false, false);
    return gc::dot(out, r);
  };
  f();
  Tensor dq = Tensor::zeros(q.shape()), dkv = Tensor::zeros(kv.shape());
  ops::attention_block_backward(dq, dkv, r, q, kv, out, lse, heads, false);
  check("q", q, dq, f);
  check("kv", kv, dkv, f);
}

// ---- bad shapes ----------------------------------------------------------------------------------


TEST(BlockAttentionOps, RefusesShapesThatDoNotFit) {
  const Tensor q = random_tensor({1, 4, 8}, 11), kv = random_tensor({1, 6, 16}, 12);
  Tensor out = Tensor::empty({1, 4, 8}), lse = Tensor::empty({1, 2, 4});
  expect_error([&] { ops::attention_block_forward(out, lse, q, kv, 2, true, false); }, "needs Tq == Tk, got 4 and 6");
  expect_error([&] { ops::attention_block_forward(out, lse, q, kv, 3, false, false); }, "is not heads (3)");
  Tensor narrow_kv = random_tensor({1, 6, 12}, 13);
  expect_error([&] { ops::attention_block_forward(out, lse, q, narrow_kv, 2, false, false); }, "kv rows 2C");
  Tensor bad_lse = Tensor::empty({1, 2, 5});
  expect_error([&] { ops::attention_block_forward(out, bad_lse, q, kv, 2, false, false); }, "lse has 10 elements");
  Tensor dq = Tensor::zeros({1, 4, 8}), dkv = Tensor::zeros({1, 6, 8});
  expect_error([&] { ops::attention_block_backward(dq, dkv, out, q, kv, out, lse, 2, false); }, "shaped as q, kv");
}

}  // namespace
