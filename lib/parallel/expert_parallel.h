// ExpertParallel: the experts of each MoE layer split over the ep group (rank r holds experts
// [r E/ep, (r+1) E/ep)); every rank routes its own token rows and the rows travel to the experts'
// ranks and back (nn/expert_layout.h).
//
// Communication, per MoE layer and call, all over the ep group. First the routing counts: one
// all-gather of k E + 1 int32 per rank (assignments per choice and expert, and the token count),
// from which every rank computes the same capacity decisions and the same table of kept rows
// T[i][e] (rows rank i sends to expert e). Then the rows, each an all-to-all with per-rank counts
// (MPI_Alltoallv) of C-float rows: forward, dispatch sends this rank's kept assignments' x rows
// (S = sum_e T[me][e]) to the experts' ranks, and combine sends the R = sum_i sum_{e local} T[i][e]
// expert outputs back; backward, dispatch sends the S gated output gradients and combine the R
// input gradients back. So each pass moves 4 C (S + R) bytes from this rank (CommStats' all_to_all
// bytes; the block a rank keeps for itself included), and over the group 8 C K bytes per pass,
// K = the kept assignments of all ranks (each crosses twice: x out, y back). Received rows are
// reordered (one copy) from source-rank order to expert order, so each local expert runs one GEMM
// over its rows, in global token order. An expert nobody chose receives zero rows: the exchange
// still runs (zero counts) and its gradient stays zero.
//
// With token shards (sequence parallelism's sp group, or the tp group under --sp-mode
// split_gather: nn/expert_layout.h) the ep group stays the ranks of the ep axis, which share this
// rank's dp, sp and tp coordinates: each shard index has its own ep group, and the rows are
// exchanged inside it exactly as above (an sp or tp rank's tokens only meet the experts' copies on
// its own shard index). Only the counts cross the shards: all-gather(shards) of this rank's
// k S E + 1 int32 (per choice, sequence and expert: S = the rank's sequences under sp, 1 under
// split_gather), then all-gather(ep) of the shards' tables, so every rank of the ep x shards
// token group holds the same [ep x shards] table and takes the same capacity decisions, in the
// one-rank token order. Without ep (ep = 1) the rows stay on their rank and only the counts move.
#pragma once
#include "comm/communicator.h"
#include "nn/expert_layout.h"

namespace tessera::parallel {

class ExpertParallel final : public nn::ExpertLayout {
 public:
  // shards: the token shards' group (sp, or tp under split_gather; null: none); each_sequence: sp's
  // kind of shard (a share of every sequence's positions).
  explicit ExpertParallel(comm::Communicator& ep, comm::Communicator* shards = nullptr, bool each_sequence = false)
      : ep_(ep), shards_(shards && shards->size() > 1 ? shards : nullptr), each_sequence_(each_sequence) {}
  int rank() const override { return ep_.rank(); }
  int size() const override { return ep_.size(); }
  int shard_rank() const override { return shards_ ? shards_->rank() : 0; }
  int shard_size() const override { return shards_ ? shards_->size() : 1; }
  bool shards_each_sequence() const override { return shards_ != nullptr && each_sequence_; }

  void all_gather_counts(const Tensor& mine, Tensor& all) const override;
  void dispatch(const Tensor& rows, Tensor& expert_rows, const nn::ExpertTraffic& traffic,
                Tensor& staging) const override;
  void combine(const Tensor& expert_rows, Tensor& rows, const nn::ExpertTraffic& traffic,
               Tensor& staging) const override;
  int64_t staging_rows(int64_t max_sent, int64_t max_received) const override;

 private:
  comm::Communicator& ep_;
  comm::Communicator* shards_ = nullptr;
  bool each_sequence_ = false;
  mutable Tensor shard_counts_;  // [shards, M]: the shards' counts before the ep all-gather
};

}  // namespace tessera::parallel
