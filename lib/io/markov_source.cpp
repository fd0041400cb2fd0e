// MarkovSource: random sparse chains from Philox, the stationary distribution by the lazy power
// iteration, the exact entropy rate, and reproducible sampling.
#include "io/markov_source.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace tessera::io {
namespace {

// Uniform in [0, 1) with 53 random bits from the words at (seed, stream, index).
double uniform53(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxCounter w = philox_bits(seed, stream, index);
  const uint64_t bits = (static_cast<uint64_t>(w[0]) << 32 | w[1]) >> 11;
  return static_cast<double>(bits) * 0x1p-53;
}

// An index into a discrete distribution given by weights summing to 1, for u in [0, 1).
template <typename Weight>
int64_t pick(const std::vector<Weight>& items, double u, double (*weight)(const Weight&)) {
  double acc = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    acc += weight(items[j]);
    if (u < acc) return static_cast<int64_t>(j);
  }
  // Rounding left u above the last partial sum: the last item with positive weight.
  for (size_t j = items.size(); j-- > 0;)
    if (weight(items[j]) > 0) return static_cast<int64_t>(j);
  return static_cast<int64_t>(items.size()) - 1;
}

}  // namespace

MarkovSource::MarkovSource(std::vector<std::vector<Edge>> rows) : rows_(std::move(rows)) {
  const int64_t v = vocab();
  TESSERA_CHECK(v >= 1, "a Markov source needs at least one state");
  for (int64_t s = 0; s < v; ++s) {
    const auto& row = rows_[static_cast<size_t>(s)];
    TESSERA_CHECK(!row.empty(), "Markov source: state ", s, " has no successors");
    double total = 0;
    for (const Edge& e : row) {
      TESSERA_CHECK(e.next >= 0 && e.next < v, "Markov source: state ", s, " -> ", e.next,
                    " is outside the vocabulary of ", v);
      TESSERA_CHECK(e.prob >= 0 && std::isfinite(e.prob), "Markov source: P(", e.next, " | ", s,
                    ") = ", e.prob, " is not a probability");
      total += e.prob;
    }
    TESSERA_CHECK(std::abs(total - 1.0) < 1e-9, "Markov source: the probabilities of state ", s,
                  " sum to ", total, ", not 1");
    for (Edge& e : rows_[static_cast<size_t>(s)]) e.prob /= total;  // exactly normalised
  }

  // Stationary distribution: pi <- pi (P + I) / 2 from the uniform start. The lazy chain is
  // aperiodic whatever P is, so the iteration converges for any irreducible P.
  std::vector<double> pi(static_cast<size_t>(v), 1.0 / static_cast<double>(v)), next(pi.size());
  const int64_t max_iterations = 10'000'000;
  bool converged = false;
  for (int64_t it = 0; it < max_iterations && !converged; ++it) {
    for (int64_t s = 0; s < v; ++s) next[s] = 0.5 * pi[s];
    for (int64_t s = 0; s < v; ++s)
      for (const Edge& e : rows_[static_cast<size_t>(s)]) next[e.next] += 0.5 * pi[s] * e.prob;
    double sum = 0;
    for (double x : next) sum += x;
    double change = 0;
    for (int64_t s = 0; s < v; ++s) {
      next[s] /= sum;
      change = std::max(change, std::abs(next[s] - pi[s]));
    }
    pi.swap(next);
    converged = change < 1e-14;
  }
  TESSERA_CHECK(converged, "Markov source: the stationary distribution did not converge in ",
                max_iterations, " iterations");
  stationary_ = std::move(pi);

  entropy_rate_ = 0;
  for (int64_t s = 0; s < v; ++s) {
    double h = 0;
    for (const Edge& e : rows_[static_cast<size_t>(s)])
      if (e.prob > 0) h -= e.prob * std::log(e.prob);
    entropy_rate_ += stationary_[s] * h;
  }
}

MarkovSource MarkovSource::random(int64_t vocab, int64_t branching, uint64_t seed) {
  TESSERA_CHECK(vocab >= 2, "a Markov source needs a vocabulary of at least 2, got ", vocab);
  TESSERA_CHECK(branching >= 2, "a Markov source needs branching of at least 2, got ", branching);
  const int64_t k = std::min(branching, vocab);
  const uint64_t succ_stream = stream_id("markov.successors");
  const uint64_t prob_stream = stream_id("markov.probs");
  std::vector<std::vector<Edge>> rows(static_cast<size_t>(vocab));
  for (int64_t s = 0; s < vocab; ++s) {
    std::vector<int32_t> next = {static_cast<int32_t>((s + 1) % vocab), static_cast<int32_t>(s)};
    // Further distinct successors drawn uniformly: attempt a of state s uses index s * 2^32 + a.
    for (uint64_t attempt = 0; static_cast<int64_t>(next.size()) < k; ++attempt) {
      const uint64_t index = (static_cast<uint64_t>(s) << 32) | attempt;
      const auto cand = static_cast<int32_t>(uniform53(seed, succ_stream, index) * static_cast<double>(vocab));
      if (std::find(next.begin(), next.end(), cand) == next.end()) next.push_back(cand);
    }
    // Probabilities: normalised exponential draws, i.e. a flat Dirichlet over the successors.
    std::vector<double> w(next.size());
    double total = 0;
    for (size_t j = 0; j < next.size(); ++j) {
      const double u = uniform53(seed, prob_stream, static_cast<uint64_t>(s) * k + j);
      w[j] = -std::log1p(-u);  // u < 1, so finite; 0 only when u == 0
      total += w[j];
    }
    if (total <= 0) {  // every draw was exactly 0: fall back to equal probabilities
      std::fill(w.begin(), w.end(), 1.0);
      total = static_cast<double>(w.size());
    }
    auto& row = rows[static_cast<size_t>(s)];
    for (size_t j = 0; j < next.size(); ++j) row.push_back({next[j], w[j] / total});
  }
  return MarkovSource(std::move(rows));
}

double MarkovSource::prob(int64_t from, int64_t to) const {
  TESSERA_CHECK(from >= 0 && from < vocab(), "Markov source: state ", from, " is outside the vocabulary");
  for (const Edge& e : rows_[static_cast<size_t>(from)])
    if (e.next == to) return e.prob;
  return 0;
}

std::vector<int32_t> MarkovSource::sample(int64_t n, uint64_t seed, uint64_t stream) const {
  TESSERA_CHECK(n >= 0, "Markov source: cannot sample ", n, " tokens");
  std::vector<int32_t> out(static_cast<size_t>(n));
  sample_block(0, n, 0, seed, stream, out.data());
  return out;
}

void MarkovSource::sample_block(int64_t first, int64_t n, int32_t previous, uint64_t seed, uint64_t stream,
                                int32_t* out) const {
  TESSERA_CHECK(first >= 0 && n >= 0, "Markov source: cannot sample tokens [", first, ", ", first + n, ")");
  TESSERA_CHECK(first == 0 || (previous >= 0 && previous < vocab()), "Markov source: previous token ", previous,
                " is not a state");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = first + i;
    if (t == 0) {
      out[i] = static_cast<int32_t>(
          pick<double>(stationary_, uniform53(seed, stream, 0), [](const double& p) { return p; }));
      continue;
    }
    const int32_t prev = i == 0 ? previous : out[i - 1];
    const auto& row = rows_[static_cast<size_t>(prev)];
    const int64_t j = pick<Edge>(row, uniform53(seed, stream, static_cast<uint64_t>(t)),
                                 [](const Edge& e) { return e.prob; });
    out[i] = row[static_cast<size_t>(j)].next;
  }
}

double MarkovSource::mean_nll(const std::vector<int32_t>& tokens) const {
  TESSERA_CHECK(tokens.size() >= 2, "Markov source: the empirical entropy needs at least 2 tokens");
  double nll = 0;
  for (size_t t = 1; t < tokens.size(); ++t) nll -= std::log(prob(tokens[t - 1], tokens[t]));
  return nll / static_cast<double>(tokens.size() - 1);
}

}  // namespace tessera::io
