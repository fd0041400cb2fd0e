// Test-only fault injection for the trainer, read once from the environment (no cost when unset):
//   TESSERA_FAULT_KILL="<dp rank>:<step>"  that rank raises SIGKILL as the step starts
//   TESSERA_FAULT_NAN_STEP="<step>"        every rank puts a NaN into one gradient of that step
//   TESSERA_FAULT_SIGNAL="<rank>:<step>[:TERM]" that rank raises SIGUSR1 (a preemption notice), or
//                                          SIGTERM, during the step
// The faults tests use them to check that jobs end promptly, resume, and stop on NaN with a name.
#pragma once
#include <cstdint>

namespace tessera::train {

struct FaultHooks {
  int kill_rank = -1;
  int64_t kill_step = -1;
  int64_t nan_step = -1;
  int signal_rank = -1;
  int64_t signal_step = -1;
  int signal = 0;  // SIGUSR1 or SIGTERM
  static FaultHooks from_environment();
};

}  // namespace tessera::train
