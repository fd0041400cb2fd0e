// TokenPrefetcher: reads the token rows of the next steps on one background thread into a ring of
// buffers allocated once (depth + 1 steps), so a step finds its rows ready; a read error (a token
// outside the vocabulary, a short file) reaches the consumer at the step that needed the rows.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::io {

// One step's rows for this rank (whatever rows the fill function writes), and the step they are of.
struct TokenBatch {
  int64_t step = -1;
  std::vector<int32_t> tokens;
};

class TokenPrefetcher {
 public:
  // fill(step, out) writes one step's `tokens_per_step` tokens. Steps first_step, first_step + 1,
  // ... are made up to `depth` (>= 1) ahead of the one handed out.
  using Fill = std::function<void(int64_t step, int32_t* out)>;
  TokenPrefetcher(Fill fill, int64_t first_step, int64_t tokens_per_step, int depth = 3);
  TokenPrefetcher(const TokenPrefetcher&) = delete;
  TokenPrefetcher& operator=(const TokenPrefetcher&) = delete;
  ~TokenPrefetcher();  // stops the thread (it finishes the step in hand) and joins it

  // The next step's rows, waiting only if they are not ready. Valid until the next call. A failed
  // fill is rethrown here, once the steps before it have been handed out.
  const TokenBatch& next();
  // The step next() will hand out.
  int64_t next_step() const { return first_step_ + handed_out_; }

 private:
  void produce();

  Fill fill_;
  int64_t first_step_;
  std::vector<TokenBatch> slots_;  // step n lives in slot n mod slots_.size()
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t produced_ = 0, handed_out_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace tessera::io
