// Generator::run: fill free slots from the queue, one forward over all busy slots, choose tokens,
// retire finished sequences.
#include "infer/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace tessera::infer {

Generator::Generator(Decoder& decoder, KvCache& cache, const SamplingOptions& sampling, StopRules stop,
                     Detokenize detokenize, bool logprobs)
    : decoder_(decoder), cache_(cache), sampling_(sampling), stop_(std::move(stop)), detokenize_(std::move(detokenize)),
      logprobs_(logprobs) {
  sampling_.validate();
  TESSERA_CHECK(stop_.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got ", stop_.max_new_tokens);
}

void Generator::check(const Request& r) const {
  TESSERA_CHECK(!r.prompt.empty(), "prompt ", r.index, " is empty: it needs at least one token");
  const int64_t len = static_cast<int64_t>(r.prompt.size()), limit = std::min(cache_.max_len(), decoder_.position_limit());
  TESSERA_CHECK(len < limit, "prompt ", r.index, " is ", len, " tokens long: it must be shorter than --max-len ",
                cache_.max_len(), limit < cache_.max_len() ? " and the model's " + std::to_string(limit) + " positions" : "",
                " (to leave room for a completion)");
  for (const int32_t id : r.prompt)
    TESSERA_CHECK(id >= 0 && id < decoder_.vocab(), "prompt ", r.index, ": token id ", id,
                  " is outside the model's vocabulary [0, ", decoder_.vocab(), ")");
}

bool Generator::advance(Active& a, int64_t slot, float* logits) {
  const int64_t vocab = decoder_.vocab(), position = cache_.length(slot);
  Completion& c = a.c;
  // The penalty changes the logits it is given: the log-probability is the model's own.
  std::vector<float> penalised;
  float* work = logits;
  if (sampling_.repetition_penalty != 1.0f) {
    penalised.assign(logits, logits + vocab);
    work = penalised.data();
  }
  const int32_t token = choose_token(work, vocab, a.seen, sampling_, c.index, position);
  if (logprobs_) c.logprobs.push_back(token_logprob(logits, vocab, token));
  c.ids.push_back(token);
  a.seen.push_back(token);
  ++stats_.generated_tokens;
  if (std::find(stop_.stop_tokens.begin(), stop_.stop_tokens.end(), token) != stop_.stop_tokens.end()) {
    c.text = detokenize_(std::vector<int32_t>(c.ids.begin(), c.ids.end() - 1));
    c.finish_reason = "stop";
    return true;
  }
  if (!stop_.stop_strings.empty()) {
    c.text = detokenize_(c.ids);
    size_t cut = std::string::npos;
    for (const std::string& s : stop_.stop_strings) cut = std::min(cut, c.text.find(s));
    if (cut != std::string::npos) {
      c.text.resize(cut);
      c.finish_reason = "stop";
      return true;
    }
  }
  const int64_t limit = std::min(cache_.max_len(), decoder_.position_limit());
  if (static_cast<int64_t>(c.ids.size()) >= stop_.max_new_tokens || position + 1 >= limit) {
    if (stop_.stop_strings.empty()) c.text = detokenize_(c.ids);
    c.finish_reason = "length";
    return true;
  }
  return false;
}

void Generator::run(std::deque<Request> queue, const std::function<void(const Completion&)>& on_token,
                    const std::function<void(Completion&&)>& on_done, const std::function<void()>& after_step) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::optional<Active>> slots(static_cast<size_t>(cache_.slots()));
  const int64_t vocab = decoder_.vocab();
  for (;;) {
    for (size_t s = 0; s < slots.size() && !queue.empty(); ++s) {  // refill free slots at once
      if (slots[s]) continue;
      Request r = std::move(queue.front());
      queue.pop_front();
      check(r);
      Active a;
      a.c.index = r.index;
      a.c.prompt = std::move(r.prompt);
      a.seen = a.c.prompt;
      cache_.clear(static_cast<int64_t>(s));
      stats_.prompt_tokens += static_cast<int64_t>(a.c.prompt.size());
      slots[s] = std::move(a);
    }
    std::vector<SlotTokens> chunks;
    std::vector<size_t> owner;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (!slots[s]) continue;
      Active& a = *slots[s];
      if (!a.prefilled)
        chunks.push_back({static_cast<int64_t>(s), a.c.prompt.data(), static_cast<int64_t>(a.c.prompt.size()), false});
      else
        chunks.push_back({static_cast<int64_t>(s), &a.c.ids.back(), 1, false});
      owner.push_back(s);
    }
    if (chunks.empty()) break;
    const bool decode_only = std::all_of(chunks.begin(), chunks.end(), [&](const SlotTokens& c) {
      return slots[static_cast<size_t>(c.slot)]->prefilled;
    });
    const auto step_start = std::chrono::steady_clock::now();
    Tensor logits = decoder_.forward(chunks, cache_);
    ++stats_.steps;
    for (size_t i = 0; i < chunks.size(); ++i) {
      Active& a = *slots[owner[i]];
      a.prefilled = true;
      float* row = logits.data<float>() + static_cast<int64_t>(i) * vocab;
      const bool done = advance(a, static_cast<int64_t>(owner[i]), row);
      on_token(a.c);
      if (done) {
        on_done(std::move(a.c));
        slots[owner[i]].reset();
      }
    }
    if (decode_only) {
      stats_.decode_tokens += static_cast<int64_t>(chunks.size());
      stats_.decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    }
    if (after_step) after_step();
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tessera::infer
