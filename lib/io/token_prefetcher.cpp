// TokenPrefetcher: a producer thread filling a ring of step buffers ahead of the consumer.
#include "io/token_prefetcher.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::io {

TokenPrefetcher::TokenPrefetcher(Fill fill, int64_t first_step, int64_t tokens_per_step, int depth)
    : fill_(std::move(fill)), first_step_(first_step) {
  TESSERA_CHECK(depth >= 1, "token prefetcher: depth must be at least 1, got ", depth);
  TESSERA_CHECK(first_step >= 0 && tokens_per_step >= 0, "token prefetcher: invalid first step ", first_step,
                " or tokens per step ", tokens_per_step);
  slots_.resize(static_cast<size_t>(depth) + 1);
  for (TokenBatch& b : slots_) b.tokens.resize(static_cast<size_t>(tokens_per_step));
  thread_ = std::thread([this] { produce(); });
}

TokenPrefetcher::~TokenPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void TokenPrefetcher::produce() {
  const auto slots = static_cast<int64_t>(slots_.size());
  for (int64_t n = 0;; ++n) {
    {
      // Step n may be made once its slot is free: the consumer holds at most one step.
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || n < std::max<int64_t>(handed_out_ - 1, 0) + slots; });
      if (stop_) return;
    }
    TokenBatch& b = slots_[static_cast<size_t>(n % slots)];
    try {
      b.step = first_step_ + n;
      fill_(b.step, b.tokens.data());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      produced_ = n + 1;
    }
    changed_.notify_all();
  }
}

const TokenBatch& TokenPrefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++handed_out_;  // frees the slot of the step handed out before this one
  changed_.notify_all();
  changed_.wait(lock, [&] { return produced_ >= handed_out_ || error_; });
  if (produced_ < handed_out_) {
    --handed_out_;  // nothing handed out this time; calling again rethrows again
    std::rethrow_exception(error_);
  }
  return slots_[static_cast<size_t>((handed_out_ - 1) % static_cast<int64_t>(slots_.size()))];
}

}  // namespace tessera::io
