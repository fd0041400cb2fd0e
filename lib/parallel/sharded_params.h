// ShardedParams (ZeRO-3): parameters live as this rank's 1/dp shard of the flat order. A unit (a
// contiguous range of whole parameters: the embedding, one block, the final norm) is
// all-gathered(dp) into a buffer just before it is used and freed after; its gradients, computed
// into a buffer of the unit's size, are reduce-scattered(dp) into the shard as soon as the unit's
// backward is done (added to what earlier micro-batches left there).
#pragma once
#include <map>

#include "comm/communicator.h"
#include "nn/param_store.h"
#include "parallel/flat_shards.h"

namespace tessera::parallel {

class ShardedParams {
 public:
  ShardedParams(nn::ParamStore& store, comm::Communicator& dp);

  void gather(Range unit, bool with_grads);  // all-gather(dp); binds the unit's parameter views
  void reduce_grads(Range unit);             // reduce-scatter(dp) of the unit's gradients into the shard
  void release(Range unit);                  // unbinds and frees the unit's buffers
  Range my_shard() const { return shards_.shard(dp_.rank()); }
  const FlatShards& shards() const { return shards_; }

 private:
  struct Gathered {
    Tensor values, grads;
  };
  Range mine_within(Range unit) const;  // this rank's part of the unit, relative to the shard start
  template <typename Fn>
  void for_params_in(Range unit, Fn fn);

  nn::ParamStore& store_;
  comm::Communicator& dp_;
  FlatShards shards_;
  std::map<int64_t, Gathered> gathered_;  // by unit start
};

}  // namespace tessera::parallel
