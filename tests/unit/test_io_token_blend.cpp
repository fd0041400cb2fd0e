// Unit tests of blended token data (io/token_blend.h, TokenLoader's blend constructor): realised
// proportions match the weights, rows are a pure function of (seed, step, row) under any split and
// order, each source keeps its own exact epochs, and bad blends are refused naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/token_blend.h"
#include "io/token_loader.h"

using tessera::io::BlendSource;
using tessera::io::parse_blend;
using tessera::io::Sampling;
using tessera::io::TokenDataset;
using tessera::io::TokenLoader;

namespace {

// Source k's token i is k * 1000 + i (n <= 1000), so a row's first token names its source and start.
TokenDataset source(int64_t k, int64_t n, int64_t vocab = 4000) {
  TokenDataset d;
  d.path = k == 0 ? "source0.h5" : k == 1 ? "source1.h5" : "source2.h5";
  d.split = "train";
  d.vocab_size = vocab;
  d.tokenizer = "test";
  for (int64_t i = 0; i < n; ++i) d.tokens.push_back(static_cast<int32_t>(k * 1000 + i));
  return d;
}

TokenLoader blend(const std::vector<double>& weights, const std::vector<int64_t>& sizes, int64_t seq, int64_t batch,
                  Sampling sampling = Sampling::random) {
  std::vector<BlendSource> b;
  std::vector<TokenDataset> d;
  for (size_t k = 0; k < weights.size(); ++k) {
    d.push_back(source(static_cast<int64_t>(k), sizes[k]));
    b.push_back({d.back().path, weights[k]});
  }
  return TokenLoader(b, d, seq, batch, 7, sampling);
}

std::vector<int32_t> rows(const TokenLoader& l, int64_t step, int64_t first, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count * l.row_len()));
  l.train_rows(step, first, count, out.data());
  return out;
}

}  // namespace

TEST(TokenBlend, RealisedProportionsWithinThreeStandardDeviations) {
  const std::vector<double> weights{3.5, 1.0, 0.5};  // normalised: 0.7, 0.2, 0.1
  const TokenLoader l = blend(weights, {900, 500, 300}, 8, 100);
  std::vector<int64_t> seen(3, 0);
  const int64_t n = 10000;  // 100 steps of 100 rows
  for (int64_t s = 0; s < 100; ++s) {
    const std::vector<int32_t> r = rows(l, s, 0, 100);
    for (int64_t i = 0; i < 100; ++i) {
      const int32_t first = r[static_cast<size_t>(i * l.row_len())];
      ++seen[static_cast<size_t>(first / 1000)];
      EXPECT_EQ(first / 1000, l.train_source(s, i));
    }
  }
  for (size_t k = 0; k < 3; ++k) {
    const double p = weights[k] / 5.0, sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
    EXPECT_LE(std::abs(static_cast<double>(seen[k]) - static_cast<double>(n) * p), 3 * sd)
        << "source " << k << ": " << seen[k] << " of " << n << " windows, weight " << p;
  }
  EXPECT_EQ(l.source_samples(100), seen);
}

TEST(TokenBlend, RowsArePureFunctionsOfStepAndRowUnderAnySplitAndOrder) {
  for (Sampling sampling : {Sampling::random, Sampling::epoch}) {
    const TokenLoader a = blend({0.6, 0.4}, {400, 700}, 16, 12, sampling);
    std::vector<std::vector<int32_t>> whole;
    for (int64_t s = 0; s < 40; ++s) whole.push_back(rows(a, s, 0, 12));
    // A fresh loader asked out of order (a resume at step 37, a rank's rows only) agrees.
    const TokenLoader b = blend({0.6, 0.4}, {400, 700}, 16, 12, sampling);
    for (int64_t s : {37, 3, 39, 0, 21}) {
      std::vector<int32_t> split;
      for (int64_t first = 0; first < 12; first += 4) {
        const std::vector<int32_t> part = rows(b, s, first, 4);
        split.insert(split.end(), part.begin(), part.end());
      }
      EXPECT_EQ(whole[static_cast<size_t>(s)], split) << "step " << s;
    }
    // Each row is a window of its source: consecutive tokens.
    for (const std::vector<int32_t>& w : whole)
      for (size_t r = 0; r < 12; ++r)
        for (size_t t = 1; t < 17; ++t) ASSERT_EQ(w[r * 17 + t], w[r * 17] + static_cast<int32_t>(t));
  }
}

TEST(TokenBlend, EachSourceVisitsEveryWindowOncePerItsOwnEpoch) {
  // Source 0: 11 windows of 9 tokens; source 1: 5. Each source's n-th sample is its own epoch n / W.
  const TokenLoader l = blend({0.5, 0.5}, {100, 45}, 8, 6, Sampling::epoch);
  std::vector<std::map<int64_t, int64_t>> count(2);  // per source: window start -> visits
  std::vector<int64_t> taken(2, 0);
  const int64_t windows[2] = {11, 5};
  for (int64_t s = 0; s < 40; ++s) {
    const std::vector<int32_t> r = rows(l, s, 0, 6);
    for (int64_t i = 0; i < 6; ++i) {
      const int32_t first = r[static_cast<size_t>(i * 9)];
      const int64_t k = first / 1000, start = first % 1000;
      ASSERT_EQ(start % 9, 0) << "epoch windows do not overlap";
      ++count[static_cast<size_t>(k)][start];
      const int64_t n = ++taken[static_cast<size_t>(k)];
      if (n % windows[k] == 0) {  // a source's epoch just ended: every window exactly n / W times
        ASSERT_EQ(static_cast<int64_t>(count[static_cast<size_t>(k)].size()), windows[k]);
        for (const auto& [w, c] : count[static_cast<size_t>(k)]) ASSERT_EQ(c, n / windows[k]) << "window " << w;
      }
    }
  }
  EXPECT_GT(taken[1], 2 * windows[1]) << "the test should cross several of source 1's epochs";
  EXPECT_EQ(l.source_samples(40), taken);
}

TEST(TokenBlend, ZeroWeightSourceIsNeverRead) {
  const TokenLoader l = blend({1.0, 0.0}, {300, 300}, 8, 10);
  for (int64_t s = 0; s < 50; ++s)
    for (int64_t r = 0; r < 10; ++r) ASSERT_EQ(l.train_source(s, r), 0);
  EXPECT_EQ(l.source_samples(50), (std::vector<int64_t>{500, 0}));
}

TEST(TokenBlend, SourcesWithDifferentVocabulariesOrTokenizersAreRefusedNamingBoth) {
  std::vector<TokenDataset> d{source(0, 100), source(1, 100, 5000)};
  try {
    TokenLoader(std::vector<BlendSource>{{"source0.h5", 1}, {"source1.h5", 1}}, d, 8, 4, 1);
    FAIL() << "sources of different vocabularies were blended";
  } catch (const tessera::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("source0.h5 has vocab_size 4000"), std::string::npos) << what;
    EXPECT_NE(what.find("source1.h5 has vocab_size 5000"), std::string::npos) << what;
  }
  d[1] = source(1, 100);
  d[1].tokenizer = "other";
  try {
    TokenLoader(std::vector<BlendSource>{{"source0.h5", 1}, {"source1.h5", 1}}, d, 8, 4, 1);
    FAIL() << "sources of different tokenizers were blended";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("source1.h5 has vocab_size 4000 (tokenizer other)"), std::string::npos)
        << e.what();
  }
}

TEST(TokenBlendSpec, PlainInputsAreNoBlend) {
  EXPECT_FALSE(parse_blend("data.h5").has_value());
  EXPECT_FALSE(parse_blend("dir/shard_*.h5").has_value());
  EXPECT_FALSE(parse_blend("host:dir/data.h5").has_value());
}

TEST(TokenBlendSpec, WeightedListParses) {
  const auto b = parse_blend("a.h5:0.7, dir/b_*.h5:0.3");
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[0].path, "a.h5");
  EXPECT_DOUBLE_EQ((*b)[0].weight, 0.7);
  EXPECT_EQ((*b)[1].path, "dir/b_*.h5");
  EXPECT_EQ(tessera::io::blend_text(*b), "a.h5:0.69999999999999996,dir/b_*.h5:0.29999999999999999");
}

namespace {
std::string error_of(const std::string& input) {
  try {
    parse_blend(input);
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(TokenBlendSpec, BadWeightsAreRefused) {
  EXPECT_NE(error_of("a.h5:0.7,b.h5:-0.3").find("the weight of b.h5 is negative"), std::string::npos);
  EXPECT_NE(error_of("a.h5:0,b.h5:0").find("weights sum to zero"), std::string::npos);
  EXPECT_NE(error_of("a.h5:0.7,b.h5").find("blend entry 'b.h5' is not PATH:WEIGHT"), std::string::npos);
  EXPECT_NE(error_of("a.h5:nan").find("not finite"), std::string::npos);
}

TEST(TokenBlendSpec, BlendFileLinesAndErrorsNamedByLine) {
  const std::string path = std::filesystem::temp_directory_path() / ("tessera_blend_" + std::to_string(::getpid()));
  std::ofstream(path) << "# two sources\n\na.h5 0.7\n  b.h5   0.3  \n";
  const auto b = parse_blend("@" + path);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[1].path, "b.h5");
  EXPECT_DOUBLE_EQ((*b)[1].weight, 0.3);
  std::ofstream(path) << "a.h5 0.7\nb.h5 lots\n";
  EXPECT_NE(error_of("@" + path).find("line 2: expected 'PATH WEIGHT'"), std::string::npos) << error_of("@" + path);
  std::filesystem::remove(path);
  EXPECT_NE(error_of("@" + path).find("cannot read the blend file"), std::string::npos);
}
