// ExpertLayout: where the experts of a mixture-of-experts layer live, as the layer sees it: how
// many expert-parallel ranks there are, which global experts this rank holds, the exchange of
// routing counts, and dispatch/combine, which move token rows to the ranks holding their experts
// and the experts' results back. The base class is the one-rank layout (every expert here, no
// communication); lib/parallel/expert_parallel.h implements it over an ep group.
//
// Experts are split into equal contiguous blocks: rank r holds global experts
// [r * E / ep, (r + 1) * E / ep). Each rank routes its own token rows; the rows it sends are
// grouped by global expert (expert 0's rows first), so the block for rank j is contiguous.
//
// The token group. What one call of the layer routes is the rows of the ep group's ranks and of
// their token shards: the ranks that hold other rows of the same sequences, the sp group under
// sequence parallelism (shard s holds positions [s L, (s + 1) L) of each of the rank's B
// sequences: shards_each_sequence) or the tp group under --sp-mode split_gather (shard s holds the
// contiguous rows [s N, (s + 1) N) of the micro-batch's flattened rows). Capacity and the
// auxiliary losses are over the whole token group, whose rows in the one-rank order (ep rank, then
// sequence, then position) are what the one-rank layer sees. The rows themselves travel only inside
// the ep group (the ranks with this rank's shard index): the experts are replicated over the shards,
// as over dp, and their gradients summed over them (nn/moe.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/param_store.h"

namespace tessera::nn {

// How many token rows each rank sends to each global expert in one dispatch (after capacity):
// rows[i * experts + e]. Every rank of the group holds the same table (it is computed from the
// counts all of them exchanged), so each knows what it sends and what it receives.
struct ExpertTraffic {
  int ranks = 1;
  int64_t experts = 0;
  std::vector<int64_t> rows;  // [ranks x experts]

  void reset(int ranks_, int64_t experts_) {
    ranks = ranks_;
    experts = experts_;
    rows.assign(static_cast<size_t>(ranks_ * experts_), 0);
  }
  int64_t experts_per_rank() const { return experts / ranks; }
  int64_t at(int rank, int64_t expert) const { return rows[static_cast<size_t>(rank * experts + expert)]; }
  // Rows rank `from` sends to the experts rank `to` holds.
  int64_t between(int from, int to) const;
  int64_t sent_by(int rank) const;      // every row it routes (to itself included)
  int64_t received_by(int rank) const;  // every row its experts get (from itself included)
  // Rows the local expert `local` of rank `rank` receives from every rank together.
  int64_t expert_rows(int rank, int64_t local) const;
};

class ExpertLayout {
 public:
  virtual ~ExpertLayout() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }

  // This rank's experts of `experts` as a first-dimension shard of the stacked expert tensors
  // (start = first local expert, local_extent = experts / size(), parts = size()); the whole
  // tensor on one rank. Throws tessera::Error naming both numbers when they do not divide; `what`
  // names the layer.
  Shard experts_shard(int64_t experts, const char* what) const;
  int64_t local_experts(int64_t experts) const { return experts / size(); }
  int64_t first_local_expert(int64_t experts) const { return rank() * (experts / size()); }

  // The token shards (see the top of this file): this rank's index and how many; 1 without
  // sequence parallelism or split_gather.
  virtual int shard_rank() const { return 0; }
  virtual int shard_size() const { return 1; }
  // Whether each shard holds a share of every sequence's positions (sp) rather than a contiguous
  // share of the micro-batch's rows (split_gather, or no shards).
  virtual bool shards_each_sequence() const { return false; }
  int group_size() const { return size() * shard_size(); }

  // Every rank of the token group's count vector: mine [M] -> all [size() x shard_size(), M] (i32),
  // row i x shard_size() + s holding ep rank i's (of shard s's ep group).
  virtual void all_gather_counts(const Tensor& mine, Tensor& all) const { all.copy_from(mine); }

  // dispatch: rows [S, C] this rank routes, grouped by global expert as traffic says (S =
  // traffic.sent_by(rank())), to expert_rows [R, C] (R = traffic.received_by(rank())): the rows of
  // this rank's experts from every rank, grouped by local expert and, inside one expert, by source
  // rank (so in global token order when each rank packs its rows in token order).
  // combine: the reverse; expert_rows [R, C] (one result per received row, in that order) back to
  // rows [S, C] in the order they were dispatched from.
  // staging: [staging_rows(S, R), C] workspace (unused by the one-rank layout).
  virtual void dispatch(const Tensor& rows, Tensor& expert_rows, const ExpertTraffic& traffic, Tensor& staging) const;
  virtual void combine(const Tensor& expert_rows, Tensor& rows, const ExpertTraffic& traffic, Tensor& staging) const;
  virtual int64_t staging_rows(int64_t max_sent, int64_t max_received) const {
    (void)max_sent;
    (void)max_received;
    return 0;
  }

  static const ExpertLayout& single();  // the one-rank layout
};

}  // namespace tessera::nn
