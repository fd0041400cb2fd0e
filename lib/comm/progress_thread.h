// ProgressThread: moves this rank's non-blocking MPI operations forward while the caller computes.
// Open MPI (like most MPIs without an asynchronous progress engine) advances a non-blocking
// collective only while the process is inside an MPI call, so an all-gather posted before a
// block's forward would otherwise run at its wait. While at least one operation is held in flight
// (hold(), let_go()), a helper thread enters MPI's progress engine (MPI_Iprobe on a private
// communicator) every few tens of microseconds; otherwise it sleeps. It needs MPI_THREAD_MULTIPLE
// (MpiRuntime asks for it): where MPI gives less, the thread is not started and the operations
// advance at their waits, with the same results.
#pragma once
#include <mpi.h>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace tessera::comm {

class ProgressThread {
 public:
  ProgressThread();  // local: no collective (it probes a duplicate of MPI_COMM_SELF)
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  void hold();     // one more operation in flight: drive progress
  void let_go();   // one fewer (each hold() is matched by one let_go())
  bool running() const { return thread_.joinable(); }  // false: MPI lacks MPI_THREAD_MULTIPLE

 private:
  void loop();

  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  std::mutex mutex_;
  std::condition_variable wake_;
  int held_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
