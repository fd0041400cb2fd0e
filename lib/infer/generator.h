// Generator: continuous batching over the KvCache's slots. Each step runs one forward over every
// busy slot (a new prompt's whole prefill, or a decoding slot's last token), chooses each slot's
// next token, and hands a finished sequence back at once, its slot refilled from the queue for the
// very next step.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "infer/decoder.h"
#include "infer/sampler.h"

namespace tessera::infer {

struct Request {
  uint64_t index = 0;  // the prompt's index in its input: with the seed, it keys the sampling
  std::vector<int32_t> prompt;
};

struct StopRules {
  int64_t max_new_tokens = 64;
  std::vector<int32_t> stop_tokens;       // end a completion (not part of its text; kept in its ids)
  std::vector<std::string> stop_strings;  // end a completion when its text contains one (cut before it)
};

struct Completion {
  uint64_t index = 0;
  std::vector<int32_t> prompt, ids;  // ids: the tokens generated
  std::vector<double> logprobs;      // the model's log-probability of each generated token (if asked)
  std::string text;                  // the ids decoded (without a stop token, cut before a stop string)
  std::string finish_reason;         // "stop" (a stop token or string) or "length"
};

// Token ids to text (the tokenizer's decode).
using Detokenize = std::function<std::string(const std::vector<int32_t>&)>;

struct GenerationStats {
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  double seconds = 0;
  // The steps in which every busy slot decoded one token (no prefill): their tokens and time.
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  // logprobs: record each token's log-probability (Completion::logprobs; a log-softmax over the
  // vocabulary per token, so off unless the output wants them).
  Generator(Decoder& decoder, KvCache& cache, const SamplingOptions& sampling, StopRules stop, Detokenize detokenize,
            bool logprobs = true);

  // A prompt must hold at least one token and leave room for one more in the cache: checked here,
  // throwing naming the prompt's index (so callers may check all prompts before any work).
  void check(const Request& r) const;
  // Runs until the queue is empty and every slot idle. on_token sees a completion after each new
  // token (for streaming); on_done gets each finished one, in the order they finish; after_step,
  // if given, runs after each step's tokens are handed out (generate --dp relays lines there).
  void run(std::deque<Request> queue, const std::function<void(const Completion&)>& on_token,
           const std::function<void(Completion&&)>& on_done, const std::function<void()>& after_step = {});
  const GenerationStats& stats() const { return stats_; }

 private:
  struct Active {
    Completion c;
    std::vector<int32_t> seen;  // prompt then completion: the repetition penalty's tokens
    bool prefilled = false;
  };
  // Appends the chosen token; returns true when the completion is finished.
  bool advance(Active& a, int64_t slot, float* logits);

  Decoder& decoder_;
  KvCache& cache_;
  SamplingOptions sampling_;
  StopRules stop_;
  Detokenize detokenize_;
  bool logprobs_ = true;
  GenerationStats stats_;
};

}  // namespace tessera::infer
