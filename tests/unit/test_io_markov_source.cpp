// Unit tests of io::MarkovSource: random chains are well formed and reproducible, the stationary
// distribution is stationary, the entropy rate matches a closed form and the sampled data.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/philox.h"
#include "io/markov_source.h"

using tessera::io::MarkovSource;

TEST(MarkovSource, RandomChainIsWellFormed) {
  const int64_t v = 50, k = 5;
  const MarkovSource m = MarkovSource::random(v, k, 17);
  ASSERT_EQ(m.vocab(), v);
  for (int64_t s = 0; s < v; ++s) {
    const auto& row = m.successors(s);
    ASSERT_EQ(static_cast<int64_t>(row.size()), k);
    std::set<int32_t> next;
    double total = 0;
    for (const auto& e : row) {
      EXPECT_GE(e.next, 0);
      EXPECT_LT(e.next, v);
      EXPECT_GT(e.prob, 0.0);
      next.insert(e.next);
      total += e.prob;
    }
    EXPECT_EQ(static_cast<int64_t>(next.size()), k) << "successors of " << s << " are not distinct";
    EXPECT_TRUE(next.count(static_cast<int32_t>((s + 1) % v))) << "irreducibility edge missing at " << s;
    EXPECT_TRUE(next.count(static_cast<int32_t>(s))) << "self-loop missing at " << s;
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

TEST(MarkovSource, ReproducibleBySeed) {
  const MarkovSource a = MarkovSource::random(30, 4, 5), b = MarkovSource::random(30, 4, 5);
  const MarkovSource c = MarkovSource::random(30, 4, 6);
  bool differs = false;
  for (int64_t s = 0; s < 30; ++s)
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(a.successors(s)[j].next, b.successors(s)[j].next);
      EXPECT_EQ(a.successors(s)[j].prob, b.successors(s)[j].prob);
      differs |= a.successors(s)[j].prob != c.successors(s)[j].prob;
    }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.entropy_rate(), b.entropy_rate());
  const uint64_t stream = tessera::stream_id("test.sample");
  EXPECT_EQ(a.sample(1000, 9, stream), b.sample(1000, 9, stream));
  EXPECT_NE(a.sample(1000, 9, stream), a.sample(1000, 10, stream));
}

TEST(MarkovSource, BranchingCappedAtVocab) {
  const MarkovSource m = MarkovSource::random(3, 10, 1);
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(m.successors(s).size(), 3u);
  const MarkovSource two = MarkovSource::random(2, 4, 1);
  EXPECT_EQ(two.successors(0).size(), 2u);
  EXPECT_THROW(MarkovSource::random(1, 4, 1), tessera::Error);
  EXPECT_THROW(MarkovSource::random(10, 1, 1), tessera::Error);
}

TEST(MarkovSource, StationaryDistributionIsStationary) {
  const MarkovSource m = MarkovSource::random(64, 4, 1);
  const std::vector<double>& pi = m.stationary();
  double total = 0;
  std::vector<double> next(pi.size(), 0.0);
  for (int64_t s = 0; s < m.vocab(); ++s) {
    EXPECT_GT(pi[s], 0.0);
    total += pi[s];
    for (const auto& e : m.successors(s)) next[e.next] += pi[s] * e.prob;
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
  for (size_t s = 0; s < pi.size(); ++s) EXPECT_NEAR(next[s], pi[s], 1e-12) << "state " << s;
}

TEST(MarkovSource, TwoStateClosedForm) {
  // P = [[1-a, a], [b, 1-b]]: pi = (b, a) / (a + b), H = pi0 h(a) + pi1 h(b).
  const double a = 0.3, b = 0.1;
  const MarkovSource m({{{0, 1 - a}, {1, a}}, {{0, b}, {1, 1 - b}}});
  const double pi0 = b / (a + b), pi1 = a / (a + b);
  auto h = [](double p) { return -p * std::log(p) - (1 - p) * std::log(1 - p); };
  EXPECT_NEAR(m.stationary()[0], pi0, 1e-13);
  EXPECT_NEAR(m.stationary()[1], pi1, 1e-13);
  EXPECT_NEAR(m.entropy_rate(), pi0 * h(a) + pi1 * h(b), 1e-13);
  EXPECT_DOUBLE_EQ(m.prob(0, 1), a);
}

TEST(MarkovSource, PeriodicChainStillConverges) {
  // A deterministic 3-cycle is periodic: the lazy iteration still finds the uniform pi, H = 0.
  const MarkovSource m({{{1, 1.0}}, {{2, 1.0}}, {{0, 1.0}}});
  for (double p : m.stationary()) EXPECT_NEAR(p, 1.0 / 3.0, 1e-13);
  EXPECT_EQ(m.entropy_rate(), 0.0);
}

TEST(MarkovSource, RejectsBadRows) {
  EXPECT_THROW(MarkovSource({{{0, 0.5}, {1, 0.4}}, {{0, 1.0}}}), tessera::Error);  // sums to 0.9
  EXPECT_THROW(MarkovSource({{{2, 1.0}}, {{0, 1.0}}}), tessera::Error);             // state 2 of 2
  EXPECT_THROW(MarkovSource({{{0, 1.0}}, {}}), tessera::Error);                     // no successors
  EXPECT_THROW(MarkovSource({{{0, 1.5}, {1, -0.5}}, {{0, 1.0}}}), tessera::Error);  // negative
}

TEST(MarkovSource, EmpiricalEntropyMatchesEntropyRate) {
  const MarkovSource m = MarkovSource::random(64, 4, 1);
  const std::vector<int32_t> x = m.sample(200000, 1, tessera::stream_id("markov.sample.train"));
  ASSERT_EQ(x.size(), 200000u);
  for (int32_t t : x) ASSERT_TRUE(t >= 0 && t < 64);
  const double h = m.entropy_rate(), empirical = m.mean_nll(x);
  EXPECT_GT(h, 0.0);
  EXPECT_NEAR(empirical / h, 1.0, 0.03) << "entropy rate " << h << ", empirical " << empirical;
  // The chain visits states in proportion to pi.
  std::vector<double> freq(64, 0.0);
  for (int32_t t : x) freq[t] += 1.0 / static_cast<double>(x.size());
  for (int s = 0; s < 64; ++s) EXPECT_NEAR(freq[s], m.stationary()[s], 0.01) << "state " << s;
}

TEST(MarkovSource, EmpiricalEntropyOfTwoStateChain) {
  const double a = 0.2, b = 0.6;
  const MarkovSource m({{{0, 1 - a}, {1, a}}, {{0, b}, {1, 1 - b}}});
  const std::vector<int32_t> x = m.sample(200000, 3, 77);
  EXPECT_NEAR(m.mean_nll(x) / m.entropy_rate(), 1.0, 0.02);
}
