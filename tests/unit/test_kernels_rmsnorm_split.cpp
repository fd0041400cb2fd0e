// Unit tests of the split-column RMSNorm (ops::rmsnorm_split_*, the grid layouts' Llama norm): the
// columns are cut into q blocks, each run through the split kernels with the per-block sums added
// up on the host (the all-reduce), and the reassembled results compared to
// ops::rmsnorm_forward/backward on the whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream, float mean = 0.0f, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 13, stream, mean, std);
}

using Threads = tessera::testing::ScopedThreads;

// Columns [c0, c0 + n) of x viewed as [rows, last dim], as a [rows, n] copy (a [C] vector: [n]).
Tensor columns(const Tensor& x, int64_t c0, int64_t n) {
  const int64_t w = x.shape()[-1], rows = x.numel() / w;
  Tensor out = Tensor::empty(x.shape().rank() == 1 ? Shape({n}) : Shape({rows, n}));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) out.data<float>()[r * n + c] = x.data<float>()[r * w + c0 + c];
  return out;
}

// Writes block [rows, n] into columns [c0, c0 + n) of x.
void put_columns(Tensor& x, const Tensor& block, int64_t c0) {
  const int64_t w = x.shape()[-1], n = block.shape()[-1], rows = x.numel() / w;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) x.data<float>()[r * w + c0 + c] = block.data<float>()[r * n + c];
}

// The all-reduce of the ranks' sums, on the host.
Tensor sum_of(const std::vector<Tensor>& parts) {
  Tensor total = Tensor::zeros(parts[0].shape());
  for (const Tensor& p : parts) tessera::ops::add_inplace(total, p);
  return total;
}

// |got - want| / (1 + |want|), the worst over all elements.
double max_mixed_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.numel(), want.numel());
  double worst = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    worst = std::max(worst, std::fabs(g - w) / (1.0 + std::fabs(w)));
  }
  return worst;
}

struct Case {
  int64_t rows, cols, pieces;
};

class RmsNormSplit : public ::testing::TestWithParam<Case> {};

TEST_P(RmsNormSplit, PiecesMatchWholeRmsNorm) {
  const auto [rows, cols, q] = GetParam();
  ASSERT_EQ(cols % q, 0);
  const int64_t cl = cols / q;
  const float eps = 1e-5f;
  const Tensor x = random_tensor({rows, cols}, 1, 0.5f, 2.0f);
  const Tensor w = random_tensor({cols}, 2, 1.0f, 0.3f);
  const Tensor dout = random_tensor({rows, cols}, 4);
  const Tensor dinp0 = random_tensor({rows, cols}, 5), dw0 = random_tensor({cols}, 6);

  for (int threads : {1, 3}) {
    Threads scope(threads);
    // The whole RMSNorm, on as many threads (dweight: the same order of row sums).
    Tensor out = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
    tessera::ops::rmsnorm_forward(out, rstd, x, w, eps);
    Tensor dinp = dinp0.clone(), dw = dw0.clone();
    tessera::ops::rmsnorm_backward(dinp, dw, dout, x, w, rstd);

    std::vector<Tensor> xs, ws, dys;
    for (int64_t p = 0; p < q; ++p) {
      xs.push_back(columns(x, p * cl, cl));
      ws.push_back(columns(w, p * cl, cl));
      dys.push_back(columns(dout, p * cl, cl));
    }
    // Forward: sums of squares, all-reduce, normalise (rstd written over the squares, as
    // nn::LayerNorm does).
    std::vector<Tensor> parts;
    for (int64_t p = 0; p < q; ++p) {
      parts.push_back(Tensor::empty({rows}));
      tessera::ops::rmsnorm_split_squares(parts.back(), xs[p]);
    }
    const Tensor squares = sum_of(parts);
    Tensor s_out = Tensor::empty({rows, cols});
    std::vector<Tensor> rstds;
    for (int64_t p = 0; p < q; ++p) {
      Tensor o = Tensor::empty({rows, cl});
      rstds.push_back(squares.clone());
      tessera::ops::rmsnorm_split_forward(o, rstds[p], xs[p], ws[p], rstds[p], cols, eps);
      put_columns(s_out, o, p * cl);
    }
    // Backward: per-block sums, all-reduce, gradients (onto the same prior values as the whole).
    std::vector<Tensor> bsums;
    for (int64_t p = 0; p < q; ++p) {
      bsums.push_back(Tensor::empty({rows}));
      tessera::ops::rmsnorm_split_backward_sums(bsums[p], dys[p], xs[p], ws[p], rstds[p]);
    }
    const Tensor grad_sums = sum_of(bsums);
    Tensor s_dinp = Tensor::empty({rows, cols}), s_dw = Tensor::empty({cols});
    for (int64_t p = 0; p < q; ++p) {
      Tensor dx = columns(dinp0, p * cl, cl), dwp = columns(dw0, p * cl, cl);
      tessera::ops::rmsnorm_split_backward(dx, dwp, dys[p], xs[p], ws[p], rstds[p], grad_sums, cols);
      put_columns(s_dinp, dx, p * cl);
      put_columns(s_dw, dwp, p * cl);
    }

    // One piece is rmsnorm_forward/backward's arithmetic in the same order.
    const double tol = q == 1 ? 1e-6 : 2e-6;
    const std::string where = "threads=" + std::to_string(threads);
    EXPECT_LT(max_mixed_error(s_out, out), tol) << "out, " << where;
    for (int64_t p = 0; p < q; ++p) EXPECT_LT(max_mixed_error(rstds[p], rstd), tol) << "rstd of piece " << p << ", " << where;
    EXPECT_LT(max_mixed_error(s_dinp, dinp), tol) << "dinp, " << where;
    // dweight sums over the rows: float rounding in another order grows with their number.
    const double sum_tol = std::max(tol, 1e-8 * static_cast<double>(rows));
    EXPECT_LT(max_mixed_error(s_dw, dw), sum_tol) << "dweight, " << where;
  }
}

// 520 x 64 in two pieces: large enough for the multithreaded path with per-thread dweight sums.
INSTANTIATE_TEST_SUITE_P(Pieces, RmsNormSplit,
                         ::testing::Values(Case{7, 64, 1}, Case{7, 64, 2}, Case{7, 64, 4}, Case{33, 64, 2},
                                           Case{33, 24, 3}, Case{520, 64, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "x" + std::to_string(info.param.cols) + "_q" +
                                  std::to_string(info.param.pieces);
                         });

// Finite differences through the split pieces: the loss L = sum(out * dout) of the reassembled
// output, perturbed at a few inputs of one piece, against dinp (the pieces' sums all-reduced).
TEST(RmsNormSplitGradient, FiniteDifferencesAcrossPieces) {
  const int64_t rows = 3, cols = 12, q = 3, cl = cols / q;
  const float eps = 1e-5f;
  const Tensor x = random_tensor({rows, cols}, 21, 0.2f, 1.0f), w = random_tensor({cols}, 22, 1.0f, 0.3f);
  const Tensor dout = random_tensor({rows, cols}, 23);
  auto loss = [&](const Tensor& input) {  // in double: the split forward's output dotted with dout
    std::vector<Tensor> parts;
    for (int64_t p = 0; p < q; ++p) {
      parts.push_back(Tensor::empty({rows}));
      tessera::ops::rmsnorm_split_squares(parts.back(), columns(input, p * cl, cl));
    }
    const Tensor squares = sum_of(parts);
    double total = 0.0;
    for (int64_t p = 0; p < q; ++p) {
      Tensor o = Tensor::empty({rows, cl}), rstd = Tensor::empty({rows});
      tessera::ops::rmsnorm_split_forward(o, rstd, columns(input, p * cl, cl), columns(w, p * cl, cl), squares, cols,
                                          eps);
      const Tensor d = columns(dout, p * cl, cl);
      for (int64_t i = 0; i < o.numel(); ++i) total += static_cast<double>(o.data<float>()[i]) * d.data<float>()[i];
    }
    return total;
  };
  // Analytic dinp from the split backward.
  std::vector<Tensor> rstds, bsums;
  Tensor squares = Tensor::zeros({rows});
  for (int64_t p = 0; p < q; ++p) {
    Tensor part = Tensor::empty({rows});
    tessera::ops::rmsnorm_split_squares(part, columns(x, p * cl, cl));
    tessera::ops::add_inplace(squares, part);
  }
  for (int64_t p = 0; p < q; ++p) {
    Tensor o = Tensor::empty({rows, cl});
    rstds.push_back(Tensor::empty({rows}));
    tessera::ops::rmsnorm_split_forward(o, rstds[p], columns(x, p * cl, cl), columns(w, p * cl, cl), squares, cols, eps);
    bsums.push_back(Tensor::empty({rows}));
    tessera::ops::rmsnorm_split_backward_sums(bsums[p], columns(dout, p * cl, cl), columns(x, p * cl, cl),
                                              columns(w, p * cl, cl), rstds[p]);
  }
  const Tensor sums = sum_of(bsums);
  Tensor dinp = Tensor::zeros({rows, cols});
  for (int64_t p = 0; p < q; ++p) {
    Tensor dx = Tensor::zeros({rows, cl}), dw = Tensor::zeros({cl});
    tessera::ops::rmsnorm_split_backward(dx, dw, columns(dout, p * cl, cl), columns(x, p * cl, cl),
                                         columns(w, p * cl, cl), rstds[p], sums, cols);
    put_columns(dinp, dx, p * cl);
  }
  const float h = 1e-2f;
  int checked = 0;
  for (int64_t i : {0L, 5L, 11L, 17L, 30L, 35L}) {
    Tensor plus = x.clone(), minus = x.clone();
    plus.data<float>()[i] += h;
    minus.data<float>()[i] -= h;
    const double numeric = (loss(plus) - loss(minus)) / (2.0 * h);
    const double analytic = dinp.data<float>()[i];
    EXPECT_NEAR(analytic, numeric, 2e-3 * (1.0 + std::fabs(numeric))) << "element " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(RmsNormSplitChecks, ShapeMismatchThrows) {
  const int64_t rows = 5, cl = 8, cols = 16;
  const Tensor x = random_tensor({rows, cl}, 1), w = random_tensor({cl}, 2);
  Tensor sums = Tensor::empty({rows + 1});
  EXPECT_THROW(tessera::ops::rmsnorm_split_squares(sums, x), tessera::Error);
  Tensor squares = Tensor::zeros({rows}), out = Tensor::empty({rows, cl}), rstd = Tensor::empty({rows});
  const Tensor wrong_w = random_tensor({cl + 1}, 4);
  EXPECT_THROW(tessera::ops::rmsnorm_split_forward(out, rstd, x, wrong_w, squares, cols, 1e-5f), tessera::Error);
  // A block wider than the whole.
  EXPECT_THROW(tessera::ops::rmsnorm_split_forward(out, rstd, x, w, squares, cl - 1, 1e-5f), tessera::Error);
  Tensor bsums = Tensor::empty({2, rows});  // must be [rows]
  EXPECT_THROW(tessera::ops::rmsnorm_split_backward_sums(bsums, x, x, w, rstd), tessera::Error);
  Tensor dx = Tensor::empty({rows, cl}), dw = Tensor::empty({cl});
  EXPECT_THROW(tessera::ops::rmsnorm_split_backward(dx, dw, x, x, w, rstd, squares, cl - 1), tessera::Error);
  // Not f32.
  const Tensor xh = Tensor::empty({rows, cl}, tessera::DType::bf16);
  EXPECT_THROW(tessera::ops::rmsnorm_split_squares(squares, xh), tessera::Error);
}

}  // namespace
