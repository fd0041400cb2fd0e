// GradSync: data-parallel gradient reduction over the dp group, in buckets that start while
// backward is still running. The model reports, after each block's backward, the flat offset from
// which every gradient is final; each bucket above it starts at once as a non-blocking collective.
//   zero 0, 1: all-reduce(dp) of each bucket: every rank holds the summed gradient.
//   zero 2:    reduce-scatter(dp) of each bucket: each rank receives the sum of the part of the
//              bucket inside its shard (FlatShards), into a shard-sized gradient buffer.
#pragma once
#include <vector>

#include "comm/communicator.h"
#include "nn/param_store.h"
#include "parallel/flat_shards.h"

namespace tessera::parallel {

class GradSync {
 public:
  GradSync(nn::ParamStore& store, comm::Communicator& dp, int zero_stage, int64_t bucket_bytes);

  // Call before the backward whose gradients complete the step (the last micro-batch);
  // micro-batches before it accumulate locally with no communication.
  void begin();
  // Every gradient at flat offset >= offset is final for this step: start the buckets above it.
  void grads_final_from(int64_t offset);
  // Starts what is left and waits for every bucket.
  void finish();

  const FlatShards& shards() const { return shards_; }
  Range my_shard() const { return shards_.shard(dp_.rank()); }
  // zero 2: this rank's summed gradient shard; zero 0/1: a view of the shard in the flat buffer.
  Tensor shard_grads();
  int zero_stage() const { return zero_; }
  int buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  void start(size_t bucket);

  nn::ParamStore& store_;
  comm::Communicator& dp_;
  int zero_;
  FlatShards shards_;
  std::vector<Range> buckets_;  // highest offsets first: the order backward finishes them
  size_t next_ = 0;             // first bucket not yet started
  std::vector<comm::CommHandle> inflight_;
  Tensor grad_shard_;           // zero 2
};

}  // namespace tessera::parallel
