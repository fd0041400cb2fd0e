// Collective checks for Communicator: fingerprints of a collective (compared across its group
// before it runs), the texts of the watchdog and mismatch errors, and the test-only fault hooks.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/test_hooks.h"

namespace tessera::comm {

// What one rank is about to call, as a fixed-size record every member of the group exchanges
// (MPI_Allgather of its bytes) when Communicator::set_check_collectives(true). Two calls may be
// matched by MPI only when their fingerprints are equal.
struct CollectiveFingerprint {
  char op[24] = {};     // the MPI-level collective: "all_reduce_sum", "all_gather", "barrier", ...
  char dtype[8] = {};   // "f32", "i32", "bf16", ..., "f64" and "i64" for the scalar reductions
  int64_t count = 0;    // elements (per rank where the call moves equal blocks); -1: not compared
  uint64_t counts_hash = 0;  // hash of the per-rank counts, 0 for the equal-block forms
  int32_t has_counts = 0;    // 1: the per-rank counts form (MPI's "v" collectives)
  int32_t root = -1;         // broadcast's or reduce's root; -1 where there is none
};

// `counts` (the per-rank form's counts, identical on every rank) sets has_counts and counts_hash.
CollectiveFingerprint make_fingerprint(const char* op, const char* dtype, int64_t count,
                                       std::span<const int64_t> counts = {}, bool has_counts = false,
                                       int root = -1);
bool same_collective(const CollectiveFingerprint& a, const CollectiveFingerprint& b);
// "all_reduce_sum f32 x 1024", "all_gather f32 x 12 (per-rank counts, hash 0x1f2e3d4c)",
// "broadcast i32 x 4 from root 0", "barrier".
std::string describe(const CollectiveFingerprint& fp);

// The first member whose fingerprint differs from member 0's, as the error text naming both
// sides by world rank: "collective mismatch in group dp at step 12, micro-batch 3: rank 0 calls
// all_reduce_sum f32 x 1024, rank 2 calls all_gather f32 x 256"; nullopt when all agree.
// fps[i] and world_ranks[i] belong to group rank i. An empty context leaves out " at ...".
std::optional<std::string> find_mismatch(std::span<const CollectiveFingerprint> fps,
                                         std::span<const int> world_ranks, const std::string& group,
                                         const std::string& context);

// "world ranks 0,1,2,3"; a group above 16 members lists its first 8 and last 2 around "...",
// followed by "(N ranks)".
std::string format_peers(std::span<const int> world_ranks);

// The watchdog's line (without a newline): "error: rank 1: all_reduce_sum(dp) [peers: world ranks
// 0,1,2,3] did not complete within 5 s at step 12, micro-batch 3; aborting the job".
std::string timeout_message(int world_rank, const std::string& what, const std::string& peers,
                            double timeout_s, const std::string& context);

// --- test-only fault hooks ------------------------------------------------------------------------
// TESSERA_FAULT_SKIP_COLLECTIVE / _MISMATCH_COLLECTIVE (core/test_hooks.h) aim at one rank's n-th
// collective. Skipping drops the rank out of collective communication from its n-th on (skipping
// only the n-th would let its next collective be matched by MPI with its peers' pending one, of
// another size: undefined behaviour, in practice a crash inside MPI, not a hang), so its peers wait
// until their watchdog ends the job. A mismatch sends an element count one too high in the
// fingerprint only (seen with set_check_collectives(true); the collective itself is never called
// wrongly, so MPI's behaviour stays defined).
// Counting: from 1, per process over all Communicator objects together, of the collectives that
// reach MPI (arguments valid, group of more than one rank; a fingerprint exchange is not counted,
// nor are point-to-point messages), and only while one of the two hooks is set. Blocking and
// asynchronous forms count alike.
int64_t& collectives_counted();

enum class FaultAction { none, skip, mismatch };
// Counts one collective of this process (world rank `world_rank`) and says what the hooks do to it.
inline FaultAction next_collective_fault(int world_rank) {
  const TestHooks& h = test_hooks();
  if (!h.skip_collective.set() && !h.mismatch_collective.set()) return FaultAction::none;
  const int64_t n = ++collectives_counted();
  if (world_rank == h.skip_collective.rank && n >= h.skip_collective.at) return FaultAction::skip;
  if (world_rank == h.mismatch_collective.rank && n == h.mismatch_collective.at) return FaultAction::mismatch;
  return FaultAction::none;
}

}  // namespace tessera::comm
