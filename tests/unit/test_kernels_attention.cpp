// Unit tests of the CPU causal attention through ops::attention_forward/backward: out and lse
// against a naive full-softmax reference in double, dqkv (overwritten) against the naive backward,
// which is itself checked against central finite differences; T in {1, 7, 64, 130}.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 21, stream, 0.0f, std);
}

using Threads = tessera::testing::ScopedThreads;

struct Dims {
  int64_t batch, seq, heads, head_dim;
};

// Index helpers for qkv [B, T, 3, H, D], out [B, T, H, D], lse [B, H, T].
struct Layout {
  Dims d;
  int64_t qkv(int64_t b, int64_t t, int64_t which, int64_t h, int64_t x) const {
    return (((b * d.seq + t) * 3 + which) * d.heads + h) * d.head_dim + x;
  }
  int64_t out(int64_t b, int64_t t, int64_t h, int64_t x) const {
    return ((b * d.seq + t) * d.heads + h) * d.head_dim + x;
  }
  int64_t lse(int64_t b, int64_t h, int64_t t) const { return (b * d.heads + h) * d.seq + t; }
};

// The naive causal attention in double: the full softmax row per query.
struct Reference {
  std::vector<double> out, lse, dqkv;
};

// probs[j] for j <= i of query (b, h, i); returns lse.
double softmax_row(const Layout& L, const std::vector<double>& qkv, int64_t b, int64_t h, int64_t i,
                   std::vector<double>& probs) {
  const double scale = 1.0 / std::sqrt(double(L.d.head_dim));
  probs.assign(i + 1, 0.0);
  double mx = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) {
    double s = 0.0;
    for (int64_t x = 0; x < L.d.head_dim; ++x) s += qkv[L.qkv(b, i, 0, h, x)] * qkv[L.qkv(b, j, 1, h, x)];
    probs[j] = s * scale;
    mx = std::max(mx, probs[j]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j <= i; ++j) sum += std::exp(probs[j] - mx);
  const double lse = mx + std::log(sum);
  for (int64_t j = 0; j <= i; ++j) probs[j] = std::exp(probs[j] - lse);
  return lse;
}

Reference reference(const Dims& d, const std::vector<double>& qkv, const std::vector<double>& dout) {
  const Layout L{d};
  const double scale = 1.0 / std::sqrt(double(d.head_dim));
  Reference r;
  r.out.assign(d.batch * d.seq * d.heads * d.head_dim, 0.0);
  r.lse.assign(d.batch * d.heads * d.seq, 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  std::vector<double> p, dp;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < d.seq; ++i) {
        r.lse[L.lse(b, h, i)] = softmax_row(L, qkv, b, h, i, p);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t x = 0; x < d.head_dim; ++x) r.out[L.out(b, i, h, x)] += p[j] * qkv[L.qkv(b, j, 2, h, x)];
        if (dout.empty()) continue;
        // dp_j = dO_i . v_j; ds_j = p_j (dp_j - sum_k p_k dp_k)
        dp.assign(i + 1, 0.0);
        double pdp = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t x = 0; x < d.head_dim; ++x) dp[j] += dout[L.out(b, i, h, x)] * qkv[L.qkv(b, j, 2, h, x)];
          pdp += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - pdp);
          for (int64_t x = 0; x < d.head_dim; ++x) {
            r.dqkv[L.qkv(b, j, 2, h, x)] += p[j] * dout[L.out(b, i, h, x)];
            r.dqkv[L.qkv(b, i, 0, h, x)] += scale * ds * qkv[L.qkv(b, j, 1, h, x)];
            r.dqkv[L.qkv(b, j, 1, h, x)] += scale * ds * qkv[L.qkv(b, i, 0, h, x)];
          }
        }
      }
  return r;
}

std::vector<double> to_double(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// max |got - want| / max(max |want|, floor): a relative error that does not blow up at near-zero
// entries; the floor keeps an all-zero reference (dq, dk at T = 1) from dividing by zero.
double rel_error(const float* got, const std::vector<double>& want, double floor = 0.0) {
  double num = 0.0, den = floor;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(got[i] - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / den;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class Attention : public ::testing::TestWithParam<Dims> {};

TEST_P(Attention, ForwardAndBackwardMatchNaiveReference) {
  const Dims d = GetParam();
  const int64_t c = d.heads * d.head_dim;
  // std 1.5: scores of a few units, so the softmax is neither flat nor one-hot.
  const Tensor qkv = random_tensor({d.batch, d.seq, 3 * c}, 1, 1.5f);
  const Tensor dout = random_tensor({d.batch, d.seq, c}, 2);
  const Reference ref = reference(d, to_double(qkv), to_double(dout));
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor out = Tensor::empty({d.batch, d.seq, c}), lse = Tensor::empty({d.batch, d.heads, d.seq});
    tessera::ops::attention_forward(out, lse, qkv, d.heads);
    EXPECT_LT(rel_error(out.data<float>(), ref.out), 2e-6) << "out, threads=" << threads;
    EXPECT_LT(rel_error(lse.data<float>(), ref.lse), 2e-6) << "lse, threads=" << threads;

    Tensor dqkv = Tensor::empty(qkv.shape());
    for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.data<float>()[i] = NAN;  // must be overwritten
    tessera::ops::attention_backward(dqkv, dout, qkv, out, lse, d.heads);
    EXPECT_LT(rel_error(dqkv.data<float>(), ref.dqkv), 1e-5) << "dqkv, threads=" << threads;
    // q, k and v parts separately, so that one of them cannot hide behind the others' scale.
    const Layout L{d};
    for (int which = 0; which < 3; ++which) {
      std::vector<double> want;
      std::vector<float> got;
      for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t t = 0; t < d.seq; ++t)
          for (int64_t h = 0; h < d.heads; ++h)
            for (int64_t x = 0; x < d.head_dim; ++x) {
              want.push_back(ref.dqkv[L.qkv(b, t, which, h, x)]);
              got.push_back(dqkv.data<float>()[L.qkv(b, t, which, h, x)]);
            }
      EXPECT_LT(rel_error(got.data(), want, 0.01 * max_abs(ref.dqkv)), 2e-5) << "part " << "qkv"[which] << ", threads=" << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(Dims{2, 1, 3, 16}, Dims{1, 7, 2, 12}, Dims{2, 64, 3, 16},
                                           Dims{1, 130, 2, 64}, Dims{3, 130, 1, 5}),
                         [](const auto& info) {
                           const Dims& d = info.param;
                           std::ostringstream name;
                           name << "B" << d.batch << "_T" << d.seq << "_H" << d.heads << "_D" << d.head_dim;
                           return name.str();
                         });

// The naive backward above is the yardstick for the kernel, so it is checked itself: against
// central differences of the naive forward under L = sum(out * dout), every qkv entry.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const Dims d{2, 7, 2, 3};
  const int64_t c = d.heads * d.head_dim;
  const Tensor qkv = random_tensor({d.batch, d.seq, 3 * c}, 3, 1.5f);
  const Tensor dout = random_tensor({d.batch, d.seq, c}, 4);
  std::vector<double> x = to_double(qkv);
  const std::vector<double> r = to_double(dout);
  const Reference ref = reference(d, x, r);
  auto loss = [&]() {
    const Reference f = reference(d, x, {});
    double s = 0.0;
    for (size_t i = 0; i < r.size(); ++i) s += f.out[i] * r[i];
    return s;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-6, keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    ASSERT_NEAR(ref.dqkv[i], (up - down) / (2 * h), 1e-7) << "qkv element " << i;
  }
  // And the kernel against the same differences, at the same size.
  Tensor out = Tensor::empty({d.batch, d.seq, c}), lse = Tensor::empty({d.batch, d.heads, d.seq});
  tessera::ops::attention_forward(out, lse, qkv, d.heads);
  Tensor dqkv = Tensor::empty(qkv.shape());
  tessera::ops::attention_backward(dqkv, dout, qkv, out, lse, d.heads);
  EXPECT_LT(rel_error(dqkv.data<float>(), ref.dqkv), 1e-5);
}

TEST(AttentionOps, RejectsHeadsThatDoNotDivide) {
  const Tensor qkv = random_tensor({1, 4, 3 * 10}, 5);
  Tensor out = Tensor::empty({1, 4, 10}), lse = Tensor::empty({1, 3, 4});
  EXPECT_THROW(tessera::ops::attention_forward(out, lse, qkv, 3), tessera::Error);
}

}  // namespace
