// StepPrefetcher<Batch>: one background thread filling a ring of step buffers (allocated once, by
// the caller) ahead of the consumer, so a training step finds its data ready; a failed fill reaches
// the consumer at the step that needed it, after the steps before it. The token and image
// prefetchers are this ring with their own buffers and fill functions.
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::io {

// Batch: any buffer type with an `int64_t step` member.
template <class Batch>
class StepPrefetcher {
 public:
  // fill(batch) writes step batch.step into the batch's buffers. Steps first_step, first_step + 1,
  // ... are made up to slots.size() - 1 ahead of the one handed out.
  using Fill = std::function<void(Batch&)>;
  StepPrefetcher(Fill fill, int64_t first_step, std::vector<Batch> slots)
      : fill_(std::move(fill)), first_step_(first_step), slots_(std::move(slots)) {
    thread_ = std::thread([this] { produce(); });
  }
  StepPrefetcher(const StepPrefetcher&) = delete;
  StepPrefetcher& operator=(const StepPrefetcher&) = delete;
  // Stops the thread (it finishes the step in hand) and joins it.
  ~StepPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // The next step's batch, waiting only if it is not ready. Valid until the next call. A failed
  // fill is rethrown here, once the steps before it have been handed out (and again on each call).
  const Batch& next() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++handed_out_;  // frees the slot of the step handed out before this one
    changed_.notify_all();
    changed_.wait(lock, [&] { return produced_ >= handed_out_ || error_; });
    if (produced_ < handed_out_) {
      --handed_out_;  // nothing handed out this time
      std::rethrow_exception(error_);
    }
    return slots_[static_cast<size_t>((handed_out_ - 1) % static_cast<int64_t>(slots_.size()))];
  }
  // The step next() will hand out.
  int64_t next_step() const { return first_step_ + handed_out_; }

 private:
  void produce() {
    const auto slots = static_cast<int64_t>(slots_.size());
    for (int64_t n = 0;; ++n) {
      {
        // Step n may be made once its slot is free: the consumer holds at most one step.
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || n < std::max<int64_t>(handed_out_ - 1, 0) + slots; });
        if (stop_) return;
      }
      Batch& b = slots_[static_cast<size_t>(n % slots)];
      try {
        b.step = first_step_ + n;
        fill_(b);
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

  Fill fill_;
  int64_t first_step_;
  std::vector<Batch> slots_;  // step first_step + n lives in slot n mod slots_.size()
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t produced_ = 0;    // steps made
  int64_t handed_out_ = 0;  // steps returned by next(); all but the last are free again
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace tessera::io
