// Device-side timing of the CUDA ops by kind (kernels/kernel_timing.h): ops are asynchronous, so a
// host timer would time their launch; instead each op is bracketed by two CUDA events on
// op_stream() and take_op_times() sums the device time between them once the last has run.
// Per thread, like the CPU kernels' sums; events are reused from step to step. When the device is
// idle an op's start event fires at once, so its pair also holds the host's time to queue it (the
// device waits for the host then). Timers do not nest: ops.cpp times each op at its dispatch.
// Profiling (op_profile.h), the same pairs are also summed by op name when they are folded.
#pragma once
#include <cstddef>

#include "kernels/kernel_timing.h"

namespace tessera::kernels::cuda {

// A thread that times this many ops without take_op_times() sums them then (one wait).
constexpr size_t kOpTimerFoldEvery = size_t{1} << 14;

// Records a start event on op_stream() at construction and an end event at destruction; name is
// the op's string literal (or null: its kind in the profile). An op that makes the host wait for
// the device (wait_for_ops, to read a value back) ends its interval there, before the wait: the
// end event then follows the op's kernels, not the host's wait and whatever the driver does in it.
class OpTimer {
 public:
  explicit OpTimer(KernelKind kind, const char* name = nullptr);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  void end();  // records the end event now (once; the destructor then records nothing)

 private:
  size_t slot_;  // this op's event pair in the thread's pool
  bool ended_ = false;
};

// Ends the calling thread's running OpTimer, if any (wait_for_ops calls it before waiting).
void end_running_op_timer();

// The calling thread's device time per kind since the last call (waits for the last timed op),
// then starts again; its per-op sums are added to *by_name, or dropped when null. Returns zeros
// without touching CUDA when no op was timed.
KernelTimes take_op_times(OpSums* by_name = nullptr);

}  // namespace tessera::kernels::cuda
