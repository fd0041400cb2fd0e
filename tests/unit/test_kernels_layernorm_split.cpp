// Unit tests of the split-column LayerNorm (ops::layernorm_split_*): the columns are cut into q
// blocks, each run through the split kernels with the per-block sums added up on the host (the
// all-reduce), and the reassembled results compared to ops::layernorm_forward/backward on the whole.
#include <gtest/gtest.h>

#include <algorithm>
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
  return tessera::testing::random_tensor(std::move(shape), 11, stream, mean, std);
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

// |got - want| <= tol (1 + |want|) everywhere; returns the worst excess over the bound's scale.
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

class LayerNormSplit : public ::testing::TestWithParam<Case> {};

TEST_P(LayerNormSplit, PiecesMatchWholeLayerNorm) {
  const auto [rows, cols, q] = GetParam();
  ASSERT_EQ(cols % q, 0);
  const int64_t cl = cols / q;
  const float eps = 1e-5f;
  const Tensor x = random_tensor({rows, cols}, 1, 0.5f, 2.0f);
  const Tensor w = random_tensor({cols}, 2, 1.0f, 0.3f), b = random_tensor({cols}, 3);
  const Tensor dout = random_tensor({rows, cols}, 4);
  const Tensor dinp0 = random_tensor({rows, cols}, 5), dw0 = random_tensor({cols}, 6), db0 = random_tensor({cols}, 7);

  for (int threads : {1, 3}) {
    Threads scope(threads);
    // The whole layer norm, on as many threads (dweight, dbias: the same order of row sums).
    Tensor out = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    tessera::ops::layernorm_forward(out, mean, rstd, x, w, b, eps);
    Tensor dinp = dinp0.clone(), dw = dw0.clone(), db = db0.clone();
    tessera::ops::layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd);

    std::vector<Tensor> xs, ws, bs, dys;
    for (int64_t p = 0; p < q; ++p) {
      xs.push_back(columns(x, p * cl, cl));
      ws.push_back(columns(w, p * cl, cl));
      bs.push_back(columns(b, p * cl, cl));
      dys.push_back(columns(dout, p * cl, cl));
    }
    // Forward: row sums, all-reduce, centred squares, all-reduce, normalise.
    std::vector<Tensor> parts;
    for (int64_t p = 0; p < q; ++p) {
      parts.push_back(Tensor::empty({rows}));
      tessera::ops::layernorm_split_row_sums(parts.back(), xs[p]);
    }
    const Tensor row_sums = sum_of(parts);
    for (int64_t p = 0; p < q; ++p) tessera::ops::layernorm_split_centered_squares(parts[p], xs[p], row_sums, cols);
    const Tensor squares = sum_of(parts);
    Tensor s_out = Tensor::empty({rows, cols});
    std::vector<Tensor> means, rstds;
    for (int64_t p = 0; p < q; ++p) {
      Tensor o = Tensor::empty({rows, cl});
      means.push_back(Tensor::empty({rows}));
      rstds.push_back(Tensor::empty({rows}));
      tessera::ops::layernorm_split_forward(o, means[p], rstds[p], xs[p], ws[p], bs[p], row_sums, squares, cols, eps);
      put_columns(s_out, o, p * cl);
    }
    // Backward: per-block sums, all-reduce, gradients (onto the same prior values as the whole).
    std::vector<Tensor> bsums;
    for (int64_t p = 0; p < q; ++p) {
      bsums.push_back(Tensor::empty({2, rows}));
      tessera::ops::layernorm_split_backward_sums(bsums[p], dys[p], xs[p], ws[p], means[p], rstds[p]);
    }
    const Tensor grad_sums = sum_of(bsums);
    Tensor s_dinp = Tensor::empty({rows, cols}), s_dw = Tensor::empty({cols}), s_db = Tensor::empty({cols});
    for (int64_t p = 0; p < q; ++p) {
      Tensor dx = columns(dinp0, p * cl, cl), dwp = columns(dw0, p * cl, cl), dbp = columns(db0, p * cl, cl);
      tessera::ops::layernorm_split_backward(dx, dwp, dbp, dys[p], xs[p], ws[p], means[p], rstds[p], grad_sums, cols);
      put_columns(s_dinp, dx, p * cl);
      put_columns(s_dw, dwp, p * cl);
      put_columns(s_db, dbp, p * cl);
    }

    // One piece is layernorm_forward/backward's arithmetic in the same order (bit for bit here).
    const double tol = q == 1 ? 1e-6 : 2e-6;
    const std::string where = "threads=" + std::to_string(threads);
    EXPECT_LT(max_mixed_error(s_out, out), tol) << "out, " << where;
    for (int64_t p = 0; p < q; ++p) {
      EXPECT_LT(max_mixed_error(means[p], mean), tol) << "mean of piece " << p << ", " << where;
      EXPECT_LT(max_mixed_error(rstds[p], rstd), tol) << "rstd of piece " << p << ", " << where;
    }
    EXPECT_LT(max_mixed_error(s_dinp, dinp), tol) << "dinp, " << where;
    // dweight and dbias sum over the rows: float rounding in another order (threads, vector width
    // of the build) grows with their number.
    const double sum_tol = std::max(tol, 1e-8 * static_cast<double>(rows));
    EXPECT_LT(max_mixed_error(s_dw, dw), sum_tol) << "dweight, " << where;
    EXPECT_LT(max_mixed_error(s_db, db), sum_tol) << "dbias, " << where;
  }
}

// 520 x 64 in two pieces: large enough for the multithreaded path with per-thread dweight sums.
INSTANTIATE_TEST_SUITE_P(Pieces, LayerNormSplit,
                         ::testing::Values(Case{7, 64, 1}, Case{7, 64, 2}, Case{7, 64, 4}, Case{33, 64, 1},
                                           Case{33, 64, 2}, Case{33, 64, 4}, Case{7, 24, 3}, Case{33, 24, 3},
                                           Case{520, 64, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "x" + std::to_string(info.param.cols) + "_q" +
                                  std::to_string(info.param.pieces);
                         });

TEST(LayerNormSplitChecks, ShapeMismatchThrows) {
  const int64_t rows = 5, cl = 8, cols = 16;
  const Tensor x = random_tensor({rows, cl}, 1), w = random_tensor({cl}, 2), b = random_tensor({cl}, 3);
  Tensor sums = Tensor::empty({rows + 1});
  EXPECT_THROW(tessera::ops::layernorm_split_row_sums(sums, x), tessera::Error);
  Tensor row_sums = Tensor::zeros({rows}), squares = Tensor::zeros({rows});
  Tensor out = Tensor::empty({rows, cl}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  const Tensor wrong_w = random_tensor({cl + 1}, 4);
  EXPECT_THROW(tessera::ops::layernorm_split_forward(out, mean, rstd, x, wrong_w, b, row_sums, squares, cols, 1e-5f),
               tessera::Error);
  Tensor bsums = Tensor::empty({rows});  // must be [2, rows]
  EXPECT_THROW(tessera::ops::layernorm_split_backward_sums(bsums, x, x, w, mean, rstd), tessera::Error);
  // A block wider than the whole.
  EXPECT_THROW(tessera::ops::layernorm_split_centered_squares(row_sums, x, squares, cl - 1), tessera::Error);
  // Not f32.
  const Tensor xh = Tensor::empty({rows, cl}, tessera::DType::bf16);
  EXPECT_THROW(tessera::ops::layernorm_split_row_sums(row_sums, xh), tessera::Error);
}

}  // namespace
