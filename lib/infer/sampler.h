// Sampler: the next token from a row of logits under the decoding options. Random draws are
// Philox values keyed by (seed, prompt index, position), so a prompt's text does not depend on
// which other prompts share its batch, in what order, or on how many ranks run it.
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::infer {

struct SamplingOptions {
  float temperature = 0.0f;         // 0: greedy (the largest logit; the smallest id on a tie)
  int64_t top_k = 0;                // keep the k most likely tokens (0: all)
  float top_p = 1.0f;               // keep the fewest most likely tokens whose probability reaches p, in (0, 1]
  float repetition_penalty = 1.0f;  // > 0; a token already in the prompt or completion has its logit
                                    // divided by it (positive) or multiplied by it (negative), as CTRL
  uint64_t seed = 0;
  void validate() const;  // throws naming the option and its value
};

// The token at `position` (its index in the sequence, prompt included) of prompt `prompt_index`.
// logits: the vocabulary's [vocab] values (changed in place by the penalty); seen: the ids of the
// prompt and the completion so far.
int32_t choose_token(float* logits, int64_t vocab, const std::vector<int32_t>& seen, const SamplingOptions& o,
                     uint64_t prompt_index, int64_t position);

// log softmax(logits)[token] over [vocab] values, in double.
double token_logprob(const float* logits, int64_t vocab, int32_t token);

}  // namespace tessera::infer
