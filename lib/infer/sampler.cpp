// choose_token: repetition penalty, then greedy or temperature -> top-k -> top-p -> one Philox
// draw over the kept tokens (the order of transformers' logits processors).
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace tessera::infer {

void SamplingOptions::validate() const {
  TESSERA_CHECK(std::isfinite(temperature) && temperature >= 0, "--temperature must be >= 0 (0: greedy), got ",
                temperature);
  TESSERA_CHECK(top_k >= 0, "--top-k must be >= 0 (0: every token), got ", top_k);
  TESSERA_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got ", top_p);
  TESSERA_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0,
                "--repetition-penalty must be > 0 (1: none), got ", repetition_penalty);
}

int32_t choose_token(float* logits, int64_t vocab, const std::vector<int32_t>& seen, const SamplingOptions& o,
                     uint64_t prompt_index, int64_t position) {
  if (o.repetition_penalty != 1.0f) {
    std::vector<int32_t> ids(seen);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (const int32_t id : ids) {
      float& x = logits[id];
      x = x > 0 ? x / o.repetition_penalty : x * o.repetition_penalty;
    }
  }
  if (o.temperature == 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);

  // Candidates by logit, largest first (the smaller id first on a tie, so the order is total).
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto before = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int64_t keep_k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep_k, order.end(), before);
  order.resize(static_cast<size_t>(keep_k));
  std::vector<double> p(order.size());
  const double top = logits[order[0]];
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += p[i] = std::exp((logits[order[i]] - top) / o.temperature);
  size_t kept = order.size();
  if (o.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += p[i] / sum;
      if (mass >= o.top_p) {
        kept = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0;
  for (size_t i = 0; i < kept; ++i) kept_sum += p[i];
  const double u = philox_uniform(o.seed, stream_id("generate.sample") + prompt_index, static_cast<uint64_t>(position)) *
                   kept_sum;
  double acc = 0;
  for (size_t i = 0; i < kept; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[kept - 1];
}

double token_logprob(const float* logits, int64_t vocab, int32_t token) {
  const float top = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - top);
  return static_cast<double>(logits[token]) - top - std::log(sum);
}

}  // namespace tessera::infer
