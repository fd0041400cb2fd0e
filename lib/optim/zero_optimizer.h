// ZeroOptimizer: AdamW under a ZeRO stage on the dp group, after GradSync has reduced the
// gradients.
//   zero 0: every rank updates every parameter (replicated states).
//   zero 1, 2: each rank updates its shard of the flat order (states sized to the shard), then
//              all-gather(dp) reassembles the parameters on every rank.
// The gradient norm for clipping is over the whole model: local under zero 0/1 (every rank holds
// the summed gradient), the sum of the shards' squares all-reduced(dp) under zero 2.
#pragma once
#include "optim/adamw.h"
#include "parallel/grad_sync.h"

namespace tessera::optim {

class ZeroOptimizer {
 public:
  ZeroOptimizer(nn::ParamStore& store, parallel::GradSync& sync, comm::Communicator& dp, const AdamWConfig& config);

  double grad_norm();
  void step(float lr, float grad_scale);

  AdamW& adamw() { return adamw_; }
  parallel::Range shard() const { return adamw_.shard(); }
  // Bytes this rank holds for parameters, gradients and optimizer states.
  int64_t state_bytes() const;

 private:
  nn::ParamStore& store_;
  parallel::GradSync& sync_;
  comm::Communicator& dp_;
  AdamW adamw_;
  Tensor gather_input_;  // zero 1/2: this rank's updated shard, sent by the all-gather
};

}  // namespace tessera::optim
