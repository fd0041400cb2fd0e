// MarkovSource: a sparse first-order Markov chain over a vocabulary, the synthetic corpus whose
// entropy rate is known exactly, so a trained model's loss can be compared with the floor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::io {

class MarkovSource {
 public:
  struct Edge {
    int32_t next;
    double prob;
  };

  // rows[s] lists the successors of state s with their probabilities (each row sums to 1).
  explicit MarkovSource(std::vector<std::vector<Edge>> rows);

  // A random chain: each state s has min(branching, vocab) distinct successors, always (s+1) mod V
  // (so the chain is irreducible) and s itself (so it is aperiodic), the others and all
  // probabilities drawn from Philox by seed. branching >= 2, vocab >= 2.
  static MarkovSource random(int64_t vocab, int64_t branching, uint64_t seed);

  int64_t vocab() const { return static_cast<int64_t>(rows_.size()); }
  const std::vector<Edge>& successors(int64_t state) const { return rows_[static_cast<size_t>(state)]; }
  // P(to | from); 0 when `to` is not a successor.
  double prob(int64_t from, int64_t to) const;

  // The stationary distribution pi = pi P (iterating the lazy chain (P + I) / 2 until the largest
  // change is below 1e-14), computed once at construction.
  const std::vector<double>& stationary() const { return stationary_; }
  // H = sum_s pi(s) H(P(. | s)), in nats per token.
  double entropy_rate() const { return entropy_rate_; }

  // n tokens of the chain started from its stationary distribution; token t uses Philox
  // (seed, stream, t), so a stream gives one reproducible sequence.
  std::vector<int32_t> sample(int64_t n, uint64_t seed, uint64_t stream) const;
  // Tokens [first, first + n) of that sequence into out[n], given token first - 1 (`previous`,
  // unused when first is 0): a corpus sampled block by block, never held whole.
  void sample_block(int64_t first, int64_t n, int32_t previous, uint64_t seed, uint64_t stream, int32_t* out) const;
  // -mean over t >= 1 of log P(x_t | x_{t-1}): the empirical entropy of a sampled sequence.
  double mean_nll(const std::vector<int32_t>& tokens) const;

 private:
  std::vector<std::vector<Edge>> rows_;
  std::vector<double> stationary_;
  double entropy_rate_ = 0;
};

}  // namespace tessera::io
