// Unit tests of io::TokenLoader: training rows are a pure function of (seed, step, row) whatever
// the split over ranks, windows stay in bounds, evaluation covers the data in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "io/token_loader.h"

using tessera::io::TokenDataset;
using tessera::io::TokenLoader;

namespace {

// tokens[i] = i, so a row's first token is its window start and rows must be consecutive.
TokenDataset counting(int64_t n) {
  TokenDataset d;
  d.path = "counting.h5";
  d.split = "train";
  d.vocab_size = n;
  d.tokenizer = "test";
  for (int64_t i = 0; i < n; ++i) d.tokens.push_back(static_cast<int32_t>(i));
  return d;
}

std::vector<int32_t> train_batch(const TokenLoader& l, int64_t step, int64_t first, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count * l.row_len()));
  l.train_rows(step, first, count, out.data());
  return out;
}

std::vector<int32_t> eval_batch(const TokenLoader& l, int64_t batch, int64_t first, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count * l.row_len()));
  l.eval_rows(batch, first, count, out.data());
  return out;
}

}  // namespace

TEST(TokenLoader, TooFewTokens) {
  const TokenDataset d = counting(8);
  try {
    TokenLoader(d, 8, 2, 1);
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sequence length 8 needs at least 9 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("counting.h5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("has 8"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(TokenLoader(d, 7, 2, 1));  // exactly seq_len + 1 tokens is enough
}

TEST(TokenLoader, RowsIndependentOfSplit) {
  const TokenDataset d = counting(10000);
  const TokenLoader l(d, 16, 12, 42);
  for (int64_t step : {0, 1, 7, 123456}) {
    const std::vector<int32_t> whole = train_batch(l, step, 0, 12);
    // The same global batch assembled from uneven pieces, as dp ranks would each cut theirs.
    std::vector<int32_t> pieces;
    for (auto [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 1}, {6, 0}, {6, 6}}) {
      const std::vector<int32_t> part = train_batch(l, step, first, count);
      pieces.insert(pieces.end(), part.begin(), part.end());
    }
    EXPECT_EQ(whole, pieces) << "step " << step;
    // And a second loader over the same data and seed agrees.
    EXPECT_EQ(whole, train_batch(TokenLoader(d, 16, 12, 42), step, 0, 12));
  }
}

TEST(TokenLoader, StepsAndSeedsDiffer) {
  const TokenDataset d = counting(100000);
  const TokenLoader a(d, 32, 8, 1), b(d, 32, 8, 2);
  EXPECT_NE(train_batch(a, 0, 0, 8), train_batch(a, 1, 0, 8));
  EXPECT_NE(train_batch(a, 5, 0, 8), train_batch(b, 5, 0, 8));
  // Rows within a batch differ too.
  const std::vector<int32_t> batch = train_batch(a, 3, 0, 8);
  std::set<int32_t> starts;
  for (int64_t r = 0; r < 8; ++r) starts.insert(batch[r * a.row_len()]);
  EXPECT_EQ(starts.size(), 8u);
}

TEST(TokenLoader, WindowsInBoundsAndContiguous) {
  const int64_t n = 200, t = 50;
  const TokenDataset d = counting(n);
  const TokenLoader l(d, t, 16, 7);
  int64_t lo = n, hi = -1;
  double sum = 0;
  int64_t draws = 0;
  for (int64_t step = 0; step < 500; ++step) {
    const std::vector<int32_t> batch = train_batch(l, step, 0, 16);
    for (int64_t r = 0; r < 16; ++r) {
      const int32_t* row = batch.data() + r * l.row_len();
      const int64_t start = row[0];
      EXPECT_EQ(start, l.train_start(step, r));
      ASSERT_GE(start, 0);
      ASSERT_LE(start, n - t - 1);
      for (int64_t j = 1; j <= t; ++j) ASSERT_EQ(row[j], start + j);  // targets = inputs shifted
      lo = std::min(lo, start);
      hi = std::max(hi, start);
      sum += static_cast<double>(start);
      ++draws;
    }
  }
  // 8000 draws over 150 starts: both ends are reached and the mean is near the middle.
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, n - t - 1);
  EXPECT_NEAR(sum / static_cast<double>(draws), (n - t - 1) / 2.0, 3.0);
}

TEST(TokenLoader, MinimalDataAlwaysStartsAtZero) {
  const TokenDataset d = counting(9);
  const TokenLoader l(d, 8, 3, 5);
  const std::vector<int32_t> batch = train_batch(l, 11, 0, 3);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(batch[r * 9], 0);
  EXPECT_EQ(l.eval_batches(), 1);
  const std::vector<int32_t> e = eval_batch(l, 0, 0, 3);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(e[r * 9], 0);
}

TEST(TokenLoader, EvalCoversDataInOrder) {
  const int64_t n = 1001, t = 10, b = 4;
  const TokenDataset d = counting(n);
  const TokenLoader l(d, t, b, 99);
  // 100 full non-overlapping windows (targets 1..1000) in batches of 4.
  EXPECT_EQ(l.eval_batches(), 25);
  int64_t expected = 0;
  for (int64_t i = 0; i < l.eval_batches(); ++i) {
    const std::vector<int32_t> batch = eval_batch(l, i, 0, b);
    for (int64_t r = 0; r < b; ++r) {
      EXPECT_EQ(batch[r * l.row_len()], expected) << "batch " << i << " row " << r;
      EXPECT_EQ(l.eval_start(i, r), expected);
      expected += t;
    }
  }
  EXPECT_EQ(expected, n - 1);  // every target position was covered exactly once
  // Splitting an eval batch over ranks gives the same rows; the seed plays no part.
  std::vector<int32_t> pieces = eval_batch(l, 3, 0, 1);
  const std::vector<int32_t> rest = eval_batch(l, 3, 1, 3);
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  EXPECT_EQ(pieces, eval_batch(l, 3, 0, b));
  EXPECT_EQ(eval_batch(TokenLoader(d, t, b, 1), 3, 0, b), eval_batch(l, 3, 0, b));
}

TEST(TokenLoader, EvalWrapsAndRoundsUp) {
  const int64_t n = 100, t = 10, b = 4;
  const TokenDataset d = counting(n);
  const TokenLoader l(d, t, b, 0);
  // 9 full windows -> 3 batches; the last batch's extra rows wrap to the start.
  EXPECT_EQ(l.eval_batches(), 3);
  const std::vector<int32_t> last = eval_batch(l, 2, 0, b);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t start = last[r * l.row_len()];
    EXPECT_EQ(start, ((8 + r) * t) % (n - t));
    EXPECT_LE(start + t, n - 1);
  }
}

TEST(TokenLoader, RowRangeChecked) {
  const TokenDataset d = counting(100);
  const TokenLoader l(d, 10, 4, 0);
  std::vector<int32_t> buf(100);
  EXPECT_THROW(l.train_rows(0, 3, 2, buf.data()), tessera::Error);
  EXPECT_THROW(l.train_rows(0, -1, 1, buf.data()), tessera::Error);
  EXPECT_THROW(l.eval_rows(0, 0, 5, buf.data()), tessera::Error);
  EXPECT_THROW(l.train_rows(-1, 0, 1, buf.data()), tessera::Error);
  EXPECT_THROW(TokenLoader(d, 0, 4, 0), tessera::Error);
  EXPECT_THROW(TokenLoader(d, 10, 0, 0), tessera::Error);
}
