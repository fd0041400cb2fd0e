// Test-only hooks: the faults and conditions that the fault tests inject, read from the environment
// once, on first use, into one object. With none set, each costs one branch where it is consulted.
// docs/environment.md lists every variable tessera reads.
//   TESSERA_FAULT_KILL="<rank>:<step>"        that world rank raises SIGKILL as the step starts
//   TESSERA_FAULT_NAN_STEP="<step>"           every rank puts a NaN into one gradient of that step
//   TESSERA_FAULT_SIGNAL="<rank>:<step>[:USR1|TERM]"  that rank raises SIGUSR1 (a preemption
//                                             notice), or SIGTERM, during the step
//   TESSERA_FAULT_SKIP_COLLECTIVE="<rank>:<n>"  that rank silently skips its n-th collective and
//                                             every later one (lib/comm/collective_check.h)
//   TESSERA_FAULT_MISMATCH_COLLECTIVE="<rank>:<n>"  that rank's n-th collective sends a wrong
//                                             element count in its fingerprint
//   TESSERA_CKPT_DISK_LIMIT_BYTES="<bytes>"   checkpoint writes past this size fail as on a full disk
//   TESSERA_CKPT_CRASH_BEFORE_RENAME=<any>    SIGKILL between a checkpoint's write and its rename
//   TESSERA_TEST_STAGE_HOST=1                 collectives of host tensors go through host staging,
//                                             as device tensors do without a device-aware MPI
// A malformed value throws tessera::Error naming the variable.
#pragma once
#include <cstdint>
#include <string>

namespace tessera {

// A hook aimed at one rank: at step `at`, or at its at-th collective. rank < 0: unset.
struct RankAt {
  int rank = -1;
  int64_t at = 0;
  bool set() const { return rank >= 0; }
};

struct TestHooks {
  RankAt kill;                 // TESSERA_FAULT_KILL (at: a step)
  int64_t nan_step = -1;       // TESSERA_FAULT_NAN_STEP
  RankAt signal;               // TESSERA_FAULT_SIGNAL (at: a step)
  int signal_number = 0;       //   SIGUSR1 or SIGTERM
  RankAt skip_collective;      // TESSERA_FAULT_SKIP_COLLECTIVE (at: a collective, from 1)
  RankAt mismatch_collective;  // TESSERA_FAULT_MISMATCH_COLLECTIVE
  int64_t checkpoint_disk_limit_bytes = -1;     // TESSERA_CKPT_DISK_LIMIT_BYTES; -1: none
  bool crash_before_checkpoint_rename = false;  // TESSERA_CKPT_CRASH_BEFORE_RENAME
  bool stage_host = false;                      // TESSERA_TEST_STAGE_HOST=1

  static TestHooks from_environment();
};

// Parses "<rank>:<n>" (rank >= 0, n >= 1); `name` and `what` ("step", "collective") are for the
// error message.
RankAt parse_rank_at(const char* name, const std::string& value, const char* what);

// The process's hooks (from the environment on first use); tests may change them.
TestHooks& test_hooks();

}  // namespace tessera
