// IoWorker: a queue, a thread, a done counter. A job that throws makes every later job a no-op
// and every wait() rethrow.
#include "memory/io_worker.h"

namespace tessera::memory {

IoWorker::IoWorker() : thread_([this] { run(); }) {}

IoWorker::~IoWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

int64_t IoWorker::submit(std::function<void()> job) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  changed_.notify_all();
  return ticket;
}

void IoWorker::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

void IoWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    const bool skip = error_ != nullptr;
    lock.unlock();
    std::exception_ptr failed;
    if (!skip) {
      try {
        job();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    lock.lock();
    if (failed && !error_) error_ = failed;
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace tessera::memory
