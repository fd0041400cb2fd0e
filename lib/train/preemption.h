// Preemption: SIGTERM or SIGUSR1 (what Slurm sends before a job's time runs out, with --signal)
// only sets a flag; the trainer asks every rank at each step boundary (all-reduce max over dp)
// and, when any rank was signalled, all of them write a checkpoint and stop together.
#pragma once

namespace tessera::train {

// Exit code of a run that stopped on a preemption signal after writing its checkpoint: job
// scripts requeue on it and the next run continues with --resume auto.
constexpr int kExitPreempted = 3;

void install_preemption_handlers();  // SIGTERM, SIGUSR1
bool preemption_requested();         // this process saw one of them

}  // namespace tessera::train
