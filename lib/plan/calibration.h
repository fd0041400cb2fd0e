// Calibration: measures, on the machine (or allocation) it runs on, what the time model needs
// (plan/machine_model.h): GEMM rates by shape class and precision with tessera's own GEMM, the
// attention kernel's rate, the step's other kernels per element, memory-copy bandwidth, and each
// collective as latency + bytes x seconds per byte, fitted from three message sizes per group
// size, for groups inside a node and (when the ranks span nodes, MPI_COMM_TYPE_SHARED) across
// nodes. Every rank measures its compute at once, as in training; the ranks' mean is kept.
// Collective over `world`; every rank returns the same model.
#pragma once
#include <span>

#include "comm/communicator.h"
#include "plan/machine_model.h"

namespace tessera::plan {

struct CalibrationOptions {
  double min_seconds = 0.02;  // each compute measurement repeats for at least this long
  // Where a node's ranks outnumber its cores, each compute measurement lasts at least this long
  // instead: the ranks must take turns on the cores many times within it, or a window shorter than
  // a few scheduler slices sees one rank alone on a core (8 ranks on 2 cores measured 8 lone rates).
  double shared_min_seconds = 0.25;
  // timed calls (or loops of calls between compute) per message size after a warm-up, the median kept:
  // at 8 ranks on 2 cores, 5 left a 2-rank group's fitted latency moving 0.2-1.8 ms between calibrations
  int collective_repeats = 9;
};

MachineModel calibrate(comm::Communicator& world, const CalibrationOptions& options = {});

// A node rank's part in the window that measures waiting_rank_share (ranks sharing cores): whether
// it computes, and its partner (the rank it sends a word to when done, or waits for; -1: none).
// `cpus`: each node rank's bound CPU (-1: unbound). Within each set of ranks on one CPU (all
// unbound ones together), in rank order, a computing rank and then one waiting for it, so every CPU
// keeps half its ranks computing. (Even ranks computing would put them all on one core under
// mpirun --bind-to core, which binds round-robin: the other core idle, the share read as 1.)
struct HalfWindowPart {
  bool computes = true;
  int partner = -1;
};
HalfWindowPart half_window_part(std::span<const int> cpus, int rank);

}  // namespace tessera::plan
