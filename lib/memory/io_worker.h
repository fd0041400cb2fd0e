// IoWorker: one background thread running submitted jobs (file reads and writes) in order, so
// that compute overlaps I/O. submit() returns a ticket; wait(ticket) returns once that job and all
// before it are done, rethrowing the first job's exception.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera::memory {

class IoWorker {
 public:
  IoWorker();
  ~IoWorker();  // finishes the queued jobs
  IoWorker(const IoWorker&) = delete;
  IoWorker& operator=(const IoWorker&) = delete;

  int64_t submit(std::function<void()> job);
  void wait(int64_t ticket);
  void wait_all() { wait(submitted_); }

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  int64_t submitted_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is set up
};

}  // namespace tessera::memory
