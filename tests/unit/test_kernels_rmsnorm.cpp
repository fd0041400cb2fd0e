// Unit tests of the CPU RMSNorm through ops::rmsnorm_forward/backward: forward (out, rstd) against
// a double reference; backward (accumulating into dinp and dweight) against central differences of
// the double forward under a random projection loss sum(out * R); the residual add + RMSNorm op
// against the two ops it stands for; shapes that do not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Tensor;
using tessera::testing::expect_error;
using tessera::testing::rel_error;
using Threads = tessera::testing::ScopedThreads;

namespace {

Tensor random_tensor(tessera::Shape shape, uint64_t stream, float mean = 0.0f, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 31, stream, mean, std);
}

std::vector<double> to_double(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// out = x rstd w, rstd = 1 / sqrt(mean_c x^2 + eps), in double.
void rmsnorm_ref(std::vector<double>& out, std::vector<double>& rstd, const std::vector<double>& x,
                 const std::vector<double>& w, int64_t rows, int64_t cols, double eps) {
  out.resize(x.size());
  rstd.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0.0;
    for (int64_t c = 0; c < cols; ++c) sq += x[r * cols + c] * x[r * cols + c];
    const double rs = 1.0 / std::sqrt(sq / cols + eps);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] * rs * w[c];
    rstd[r] = rs;
  }
}

struct Size {
  int64_t rows, cols;
};

class RmsNorm : public ::testing::TestWithParam<Size> {};

TEST_P(RmsNorm, ForwardMatchesDoubleReference) {
  const auto [rows, cols] = GetParam();
  for (int threads : {1, 3}) {
    Threads scope(threads);
    // An offset mean (RMSNorm does not centre); std 0.003 makes the mean square comparable to eps.
    for (auto [offset, std] : {std::pair{0.5f, 2.0f}, std::pair{0.0f, 0.003f}}) {
      const Tensor x = random_tensor({rows, cols}, 1, offset, std);
      const Tensor w = random_tensor({cols}, 2, 1.0f, 0.3f);
      Tensor out = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
      tessera::ops::rmsnorm_forward(out, rstd, x, w, 1e-5f);
      std::vector<double> ro, rr;
      rmsnorm_ref(ro, rr, to_double(x), to_double(w), rows, cols, 1e-5);
      EXPECT_LT(rel_error(out.data<float>(), ro), 2e-6) << "threads " << threads << ", std " << std;
      EXPECT_LT(rel_error(rstd.data<float>(), rr), 2e-6) << "threads " << threads << ", std " << std;
    }
  }
}

// Gradients of L = sum(out * R) by central differences of the double forward (h = 1e-6 on O(1)
// inputs: difference error ~1e-9), against the kernel, which adds them onto random prior values.
TEST_P(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const auto [rows, cols] = GetParam();
  const Tensor x = random_tensor({rows, cols}, 4, 0.5f, 2.0f);
  const Tensor w = random_tensor({cols}, 5, 1.0f, 0.3f);
  const Tensor proj = random_tensor({rows, cols}, 7);
  const double eps = 1e-5;
  Tensor out = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
  tessera::ops::rmsnorm_forward(out, rstd, x, w, static_cast<float>(eps));

  std::vector<double> xd = to_double(x), wd = to_double(w), rd = to_double(proj);
  // The loss of rows [first, last); a change of x in row r moves only row r's term.
  auto loss = [&](int64_t first, int64_t last) {
    std::vector<double> o, r;
    const std::vector<double> xs(xd.begin() + first * cols, xd.begin() + last * cols);
    rmsnorm_ref(o, r, xs, wd, last - first, cols, eps);
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
  const std::vector<double> gx = fd(xd, true), gw = fd(wd, false);

  for (int threads : {1, 3}) {
    Threads scope(threads);
    // Twice with the same prior values: the second call must not see the first's partial sums.
    for (int call = 0; call < 2; ++call) {
      Tensor dinp = random_tensor({rows, cols}, 8), dw = random_tensor({cols}, 9);
      const Tensor dinp0 = dinp.clone(), dw0 = dw.clone();
      tessera::ops::rmsnorm_backward(dinp, dw, proj, x, w, rstd);
      auto added = [](const Tensor& now, const Tensor& before) {
        std::vector<float> d(now.numel());
        for (int64_t i = 0; i < now.numel(); ++i) d[i] = now.data<float>()[i] - before.data<float>()[i];
        return d;
      };
      EXPECT_LT(rel_error(added(dinp, dinp0).data(), gx), 2e-5) << "dinp, threads " << threads << ", call " << call;
      EXPECT_LT(rel_error(added(dw, dw0).data(), gw), 2e-5) << "dweight, threads " << threads << ", call " << call;
    }
  }
}

// The residual add + RMSNorm is add followed by rmsnorm_forward, bit for bit, on one and on three
// threads, with its sum written apart or over its first input.
TEST_P(RmsNorm, AddRmsnormIsAddThenRmsnormBitForBit) {
  const auto [rows, cols] = GetParam();
  const Tensor a = random_tensor({rows, cols}, 11, 0.3f, 2.0f), b = random_tensor({rows, cols}, 12);
  const Tensor w = random_tensor({cols}, 13, 1.0f, 0.3f);
  Tensor sum_want = Tensor::empty({rows, cols}), out_want = Tensor::empty({rows, cols});
  Tensor rstd_want = Tensor::empty({rows});
  tessera::ops::add(sum_want, a, b);
  tessera::ops::rmsnorm_forward(out_want, rstd_want, sum_want, w, 1e-6f);
  auto same = [](const Tensor& x, const Tensor& y) { return std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0; };
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << (in_place ? ", sum over a" : ""));
      Tensor sum = in_place ? a.clone() : Tensor::empty({rows, cols});
      const Tensor first = in_place ? sum : a;
      Tensor out = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
      tessera::ops::add_rmsnorm_forward(sum, out, rstd, first, b, w, 1e-6f);
      EXPECT_TRUE(same(sum, sum_want)) << "sum";
      EXPECT_TRUE(same(out, out_want)) << "out";
      EXPECT_TRUE(same(rstd, rstd_want)) << "rstd";
    }
  }
}

// One row; odd widths; rows x cols above the kernels' 1 << 14 elements, for the multithreaded
// path with per-thread weight-gradient sums (130 x 129, and few rows of a wide hidden size).
INSTANTIATE_TEST_SUITE_P(Sizes, RmsNorm,
                         ::testing::Values(Size{1, 8}, Size{5, 37}, Size{3, 64}, Size{130, 129}, Size{7, 4096}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "x" + std::to_string(info.param.cols);
                         });


TEST(RmsNormShapes, RefusesShapesThatDoNotFit) {
  const Tensor x = random_tensor({4, 6}, 15), w = random_tensor({6}, 16), w5 = random_tensor({5}, 17);
  Tensor out = Tensor::empty({4, 6}), rstd = Tensor::empty({4}), rstd3 = Tensor::empty({3});
  expect_error([&] { tessera::ops::rmsnorm_forward(out, rstd, x, w5, 1e-5f); }, "rmsnorm_forward: shapes do not fit");
  expect_error([&] { tessera::ops::rmsnorm_forward(out, rstd3, x, w, 1e-5f); }, "rmsnorm_forward: shapes do not fit");
  Tensor dx = Tensor::zeros({4, 6}), dw = Tensor::zeros({6}), dw5 = Tensor::zeros({5});
  expect_error([&] { tessera::ops::rmsnorm_backward(dx, dw5, x, x, w, rstd); }, "rmsnorm_backward: shapes do not fit");
  expect_error([&] { tessera::ops::rmsnorm_backward(dx, dw, x, x, w, rstd3); }, "rmsnorm_backward: shapes do not fit");
  const Tensor b = random_tensor({4, 5}, 18);
  Tensor sum = Tensor::empty({4, 6});
  expect_error([&] { tessera::ops::add_rmsnorm_forward(sum, out, rstd, x, b, w, 1e-5f); },
               "add_rmsnorm_forward: shapes do not fit");
}

}  // namespace
