// ParamUnits: a model's parameters as units (contiguous ranges of whole parameters in the flat
// order: an embedding, each block, a head) and what a unit needs around its use. Allocates the
// store: whole, or under ZeRO-3 this rank's shard over the given group (on the host tier with
// shard_on_host_tier: --offload-params, the gathers then read it from there). Then, per unit: under
// ZeRO-3 an all-gather before its forward and backward and a release after (overlapped, the
// default: the loops prefetch the next unit while this one computes); after its backward the
// data-parallel reduction of its gradients (ZeRO-3: a reduce-scatter, posted or waited; else
// GradSync's buckets, told that everything from the unit's start is final).
#pragma once
#include <memory>
#include <vector>

#include "parallel/grad_sync.h"
#include "parallel/sharded_params.h"

namespace tessera::parallel {

class ParamUnits {
 public:
  // first_params: each unit's first parameter id, ascending from 0; the last unit runs to the end.
  // overlap: ZeRO-3's gathers and reduce-scatters overlapped with compute (ShardedParams).
  ParamUnits(nn::ParamStore& store, std::vector<int> first_params, Device device, uint64_t seed,
             comm::Communicator* zero3, bool shard_on_host_tier = false, bool overlap = true);

  size_t size() const { return ranges_.size(); }
  Range range(size_t unit) const { return ranges_[unit]; }
  ShardedParams* sharded() { return sharded_.get(); }

  // ZeRO-3 overlapped: starts the unit's all-gather, to run while the caller computes; the unit's
  // gather() completes it. The caller gathers it next (a prefetched unit holds a buffer until then).
  void prefetch(size_t unit) {
    if (sharded_) sharded_->prefetch(ranges_[unit]);
  }
  void gather(size_t unit, bool with_grads) {
    if (sharded_) sharded_->gather(ranges_[unit], with_grads);
  }
  void release(size_t unit) {
    if (sharded_) sharded_->release(ranges_[unit]);
  }
  // After the unit's backward: reduce its gradients over dp (and release it under ZeRO-3).
  void grads_done(size_t unit, GradSync* sync);
  // ZeRO-3: every reduce-scatter posted so far completes into the shard. A model calls it at the
  // end of each backward pass it runs, so that its gradients are final when the step reads them.
  void finish_grads() {
    if (sharded_) sharded_->finish_reductions();
  }
  void set_trace(TraceSink* trace) {
    if (sharded_) sharded_->set_trace(trace);
  }

 private:
  std::vector<Range> ranges_;
  std::unique_ptr<ShardedParams> sharded_;
};

}  // namespace tessera::parallel
