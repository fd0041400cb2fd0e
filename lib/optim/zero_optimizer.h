// ZeroOptimizer: AdamW under a ZeRO stage on the dp group, once the gradients are reduced (by
// GradSync under zero 0-2, by the model's ShardedParams under zero 3).
//   zero 0: every rank updates every parameter (replicated states).
//   zero 1, 2: each rank updates its shard of the flat order (states sized to the shard), then
//              all-gather(dp) reassembles the parameters on every rank.
//   zero 3: each rank updates its shard, which is all it holds: no all-gather.
// The gradient norm for clipping is over the whole model: local under zero 0/1 (every rank holds
// the summed gradient), the sum of the shards' squares all-reduced(dp) under zero 2 and 3; under
// tensor parallelism each rank's share is then all-reduced(tp), and over the pipeline's stages (pp).
#pragma once
#include <optional>

#include "optim/adamw.h"
#include "parallel/grad_sync.h"

namespace tessera::optim {

class ZeroOptimizer {
 public:
  // sync: the GradSync of zero 0-2 (nullptr under zero 3, where the store holds only the shard).
  // tp: the tensor-parallel group the store's split parameters are split over (nullptr: none).
  // pp: the pipeline group whose stages hold the rest of the model (nullptr: none).
  // ep: the expert-parallel group, whose ranks see different tokens (nullptr: none).
  ZeroOptimizer(nn::ParamStore& store, int zero_stage, parallel::GradSync* sync, comm::Communicator& dp,
                const AdamWConfig& config, comm::Communicator* tp = nullptr, comm::Communicator* pp = nullptr,
                comm::Communicator* ep = nullptr);

  // The groups completing partial gradients (nn::PartialGrad) under a grid layout; by default
  // row-partial ones sum over tp (split_gather).
  void set_partial_groups(comm::Communicator* rows, comm::Communicator* branch_rows, comm::Communicator* replicas) {
    rows_ = rows;
    branch_rows_ = branch_rows;
    replicas_ = replicas;
  }
  // Once the gradients are reduced over dp: sums each partial gradient over its group (rows:
  // tp or the grid's; branch rows; replicas) and over ep every gradient but the experts' (the ep
  // ranks saw different tokens): one all-reduce per group.
  void complete_partial_grads();
  // The global gradient norm. held_squares: the held gradients' sum of squares when the caller
  // has it (MixedPrecision::round_gradients under bf16), used when norm_share_is_held_sum()
  // instead of reading the gradients again.
  double grad_norm(std::optional<double> held_squares = std::nullopt);
  // Whether this rank's share of the squared norm is the plain sum over its held gradients: no tp
  // or ep (whose groups hold some gradients on several ranks, counted once).
  bool norm_share_is_held_sum() const { return (!tp_ || tp_->size() == 1) && (!ep_ || ep_->size() == 1); }
  // The update; returns whether it left the gradients zero (without ZeRO: the update zeroes each
  // gradient as it reads it, so the next step's zeroing pass is not needed). It bumps the store's
  // values version (nn::ParamStore::values_updated); when writes_weight_bits() and the store keeps a
  // bf16 copy, it writes the copy's bits of every weight as it updates them, so the copy stays current.
  bool step(float lr, float grad_scale);
  // Whether step can write the weights' bits: without ZeRO (every weight updated here) and with
  // the states in memory.
  bool writes_weight_bits() const { return zero_ == 0 && !adamw_.states_in_files(); }
  // The reduced gradients this rank holds: all, or its ZeRO-2/3 shard of the flat order from
  // flat offset `begin`.
  Tensor held_gradients(int64_t& begin);

  AdamW& adamw() { return adamw_; }
  parallel::Range shard() const { return adamw_.shard(); }
  // Bytes this rank holds on the compute device for parameters, gradients and optimizer states
  // (states offloaded to the host tier or to files not counted), and on the host tier.
  int64_t state_bytes() const;
  int64_t host_state_bytes() const;

 private:
  Tensor shard_grads();

  nn::ParamStore& store_;
  int zero_;
  parallel::GradSync* sync_;
  comm::Communicator& dp_;
  comm::Communicator* tp_;
  comm::Communicator* pp_;
  comm::Communicator* ep_;
  comm::Communicator* rows_ = nullptr;  // row-partial gradients' group (default tp_)
  comm::Communicator* branch_rows_ = nullptr;
  comm::Communicator* replicas_ = nullptr;
  AdamW adamw_;
  Tensor gather_input_;  // zero 1/2: this rank's updated shard, sent by the all-gather
  // Sums over `group` the held gradients of the parameters `partial` selects, packed into one
  // all-reduce (the selection is the same on every rank of the group: their flat layouts match).
  template <typename Partial>
  void sum_partial(comm::Communicator* group, Partial partial);
  Tensor packed_;        // the partial gradients, packed for one all-reduce
};

}  // namespace tessera::optim
