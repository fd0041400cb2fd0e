// Whether every rank of a job was started alike: the same options, the same data. Called by the
// apps before their first other collective, so a job launched with different arguments per rank
// (mpirun's `a : b` form, a broken job script) stops naming the difference instead of training
// silently or failing inside MPI.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace tessera::comm {

// Entries "key" -> "value" (each key once) that every rank of group must hold alike. Returns ""
// when they agree; else, on every rank, a message naming each key that differs and which ranks
// hold which value, e.g. "--steps: 10 on ranks 0-1, 20 on rank 2". Collective: one all-gather of a
// fixed-size digest (it cannot itself mismatch), then the entries only when the digests differ.
std::string rank_differences(const std::vector<std::pair<std::string, std::string>>& entries, Communicator& group);

// "rank 3", "ranks 0-2, 5": a sorted list of ranks, runs collapsed.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace tessera::comm
