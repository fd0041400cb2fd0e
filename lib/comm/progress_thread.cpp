// ProgressThread: the helper thread that enters MPI's progress engine while operations are held.
#include "comm/progress_thread.h"

#include <chrono>

#include "core/error.h"

namespace tessera::comm {

ProgressThread::ProgressThread() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) return;  // MPI calls from a second thread are not allowed
  MPI_Comm_dup(MPI_COMM_SELF, &probe_comm_);
  thread_ = std::thread([this] { loop(); });
}

ProgressThread::~ProgressThread() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&probe_comm_);
}

void ProgressThread::hold() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++held_;
  }
  wake_.notify_one();
}

void ProgressThread::let_go() {
  const std::lock_guard<std::mutex> lock(mutex_);
  TESSERA_CHECK(held_ > 0, "ProgressThread: let_go() without a matching hold()");
  --held_;
}

void ProgressThread::loop() {
  // Between probes the thread sleeps: a shared-memory transfer moves a whole message per
  // progress call (single copy), so a short pause costs it little and leaves the cores to compute.
  constexpr auto kPause = std::chrono::microseconds(50);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || held_ > 0; });
    if (stop_) return;
    lock.unlock();
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, probe_comm_, &flag, MPI_STATUS_IGNORE);  // runs the progress engine
    std::this_thread::sleep_for(kPause);
    lock.lock();
  }
}

}  // namespace tessera::comm
