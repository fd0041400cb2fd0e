// Unit tests of the CPU LayerNorm through ops::layernorm_forward/backward: forward (out, mean,
// rstd) against a double reference; backward (accumulating into dinp, dweight, dbias) against
// central finite differences of the double forward under a random projection loss sum(out * R);
// the residual add + layernorm op against the two ops it stands for.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;

using tessera::testing::rel_error;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream, float mean = 0.0f, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 7, stream, mean, std);
}

using Threads = tessera::testing::ScopedThreads;

std::vector<double> to_double(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// out, mean, rstd in double.
void layernorm_ref(std::vector<double>& out, std::vector<double>& mean, std::vector<double>& rstd,
                   const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                   int64_t rows, int64_t cols, double eps) {
  out.resize(x.size());
  mean.resize(rows);
  rstd.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mu += x[r * cols + c];
    mu /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    var /= cols;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = (x[r * cols + c] - mu) * rs * w[c] + b[c];
    mean[r] = mu;
    rstd[r] = rs;
  }
}


struct Size {
  int64_t rows, cols;
};

class LayerNorm : public ::testing::TestWithParam<Size> {};

TEST_P(LayerNorm, ForwardMatchesDoubleReference) {
  const auto [rows, cols] = GetParam();
  for (int threads : {1, 3}) {
    Threads scope(threads);
    // An offset mean tests the centring; std 0.003 (no offset, which float could not resolve at
    // that scale) makes the variance comparable to eps.
    for (auto [offset, std] : {std::pair{0.5f, 2.0f}, std::pair{0.0f, 0.003f}}) {
      const Tensor x = random_tensor({rows, cols}, 1, offset, std);
      const Tensor w = random_tensor({cols}, 2, 1.0f, 0.3f), b = random_tensor({cols}, 3);
      Tensor out = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
      tessera::ops::layernorm_forward(out, mean, rstd, x, w, b, 1e-5f);
      std::vector<double> ro, rm, rr;
      layernorm_ref(ro, rm, rr, to_double(x), to_double(w), to_double(b), rows, cols, 1e-5);
      EXPECT_LT(rel_error(out.data<float>(), ro), 2e-6) << "std " << std;
      EXPECT_LT(rel_error(mean.data<float>(), rm), 2e-6) << "std " << std;
      EXPECT_LT(rel_error(rstd.data<float>(), rr), 2e-6) << "std " << std;
    }
  }
}

// Gradients of L = sum(out * R) by central differences of the double forward (h = 1e-6 on O(1)
// inputs: difference error ~1e-9), against the kernel, which adds them onto random prior values.
TEST_P(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const auto [rows, cols] = GetParam();
  const Tensor x = random_tensor({rows, cols}, 4, 0.5f, 2.0f);
  const Tensor w = random_tensor({cols}, 5, 1.0f, 0.3f), b = random_tensor({cols}, 6);
  const Tensor proj = random_tensor({rows, cols}, 7);
  const double eps = 1e-5;
  Tensor out = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  tessera::ops::layernorm_forward(out, mean, rstd, x, w, b, static_cast<float>(eps));

  std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b), rd = to_double(proj);
  // The loss of rows [first, last); a change of x in row r moves only row r's term.
  auto loss = [&](int64_t first, int64_t last) {
    const int64_t n = last - first;
    std::vector<double> o, m, r;
    std::vector<double> xs(xd.begin() + first * cols, xd.begin() + last * cols);
    layernorm_ref(o, m, r, xs, wd, bd, n, cols, eps);
    double s = 0.0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * rd[first * cols + i];
    return s;
  };
  auto fd = [&](std::vector<double>& v, bool per_row) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t first = per_row ? static_cast<int64_t>(i) / cols : 0, last = per_row ? first + 1 : rows;
      const double h = 1e-6, keep = v[i];
      v[i] = keep + h;
      const double up = loss(first, last);
      v[i] = keep - h;
      const double down = loss(first, last);
      v[i] = keep;
      g[i] = (up - down) / (2 * h);
    }
    return g;
  };
  const std::vector<double> gx = fd(xd, true), gw = fd(wd, false), gb = fd(bd, false);

  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor dinp = random_tensor({rows, cols}, 8), dw = random_tensor({cols}, 9), db = random_tensor({cols}, 10);
    const Tensor dinp0 = dinp.clone(), dw0 = dw.clone(), db0 = db.clone();
    tessera::ops::layernorm_backward(dinp, dw, db, proj, x, w, mean, rstd);
    auto added = [](const Tensor& now, const Tensor& before) {
      std::vector<float> d(now.numel());
      for (int64_t i = 0; i < now.numel(); ++i) d[i] = now.data<float>()[i] - before.data<float>()[i];
      return d;
    };
    EXPECT_LT(rel_error(added(dinp, dinp0).data(), gx), 2e-5) << "dinp, threads=" << threads;
    EXPECT_LT(rel_error(added(dw, dw0).data(), gw), 2e-5) << "dweight, threads=" << threads;
    EXPECT_LT(rel_error(added(db, db0).data(), gb), 2e-5) << "dbias, threads=" << threads;
  }
}

// The residual add + layernorm is add followed by layernorm_forward, bit for bit, on one and on
// three threads, with its sum written apart or over its first input.
TEST_P(LayerNorm, AddLayernormIsAddThenLayernormBitForBit) {
  const auto [rows, cols] = GetParam();
  const Tensor a = random_tensor({rows, cols}, 11, 0.3f, 2.0f), b = random_tensor({rows, cols}, 12);
  const Tensor w = random_tensor({cols}, 13, 1.0f, 0.3f), bias = random_tensor({cols}, 14);
  Tensor sum_want = Tensor::empty({rows, cols}), out_want = Tensor::empty({rows, cols});
  Tensor mean_want = Tensor::empty({rows}), rstd_want = Tensor::empty({rows});
  tessera::ops::add(sum_want, a, b);
  tessera::ops::layernorm_forward(out_want, mean_want, rstd_want, sum_want, w, bias);
  auto same = [](const Tensor& x, const Tensor& y) { return std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0; };
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << (in_place ? ", sum over a" : ""));
      Tensor sum = in_place ? a.clone() : Tensor::empty({rows, cols});
      const Tensor first = in_place ? sum : a;
      Tensor out = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
      tessera::ops::add_layernorm_forward(sum, out, mean, rstd, first, b, w, bias);
      EXPECT_TRUE(same(sum, sum_want)) << "sum";
      EXPECT_TRUE(same(out, out_want)) << "out";
      EXPECT_TRUE(same(mean, mean_want)) << "mean";
      EXPECT_TRUE(same(rstd, rstd_want)) << "rstd";
    }
  }
}

TEST(LayerNormShapes, AddLayernormRejectsShapesThatDoNotFit) {
  const Tensor a = random_tensor({4, 6}, 15), b = random_tensor({4, 5}, 16);
  const Tensor w = random_tensor({6}, 17), bias = random_tensor({6}, 18);
  Tensor sum = Tensor::empty({4, 6}), out = Tensor::empty({4, 6}), mean = Tensor::empty({4}), rstd = Tensor::empty({4});
  EXPECT_THROW(tessera::ops::add_layernorm_forward(sum, out, mean, rstd, a, b, w, bias), tessera::Error);
}

// One row; odd widths; rows x cols large enough for the multithreaded path with per-thread sums.
INSTANTIATE_TEST_SUITE_P(Sizes, LayerNorm,
                         ::testing::Values(Size{1, 8}, Size{5, 37}, Size{3, 64}, Size{130, 129}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "x" + std::to_string(info.param.cols);
                         });

}  // namespace
