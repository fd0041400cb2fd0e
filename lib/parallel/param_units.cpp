// ParamUnits: allocation, unit ranges and the per-unit ZeRO-3 / GradSync calls.
#include "parallel/param_units.h"

namespace tessera::parallel {

ParamUnits::ParamUnits(nn::ParamStore& store, std::vector<int> first_params, Device device, uint64_t seed,
                       comm::Communicator* zero3, bool shard_on_host_tier, bool overlap) {
  TESSERA_CHECK(zero3 || !shard_on_host_tier, "--offload-params moves ZeRO-3's shard: it needs --zero 3");
  if (zero3) {
    const Range mine = FlatShards(store.numel(), zero3->size()).shard(zero3->rank());
    store.allocate_shard(device, seed, mine.begin, mine.end, shard_on_host_tier);
    sharded_ = std::make_unique<ShardedParams>(store, *zero3, overlap);
  } else {
    store.allocate(device, seed);
  }
  for (size_t i = 0; i < first_params.size(); ++i) {
    const int64_t begin = store.spec(first_params[i]).offset;
    const int64_t end = i + 1 < first_params.size() ? store.spec(first_params[i + 1]).offset : store.numel();
    ranges_.push_back({begin, end});
  }
}

void ParamUnits::grads_done(size_t unit, GradSync* sync) {
  if (sharded_) {
    sharded_->reduce_grads(ranges_[unit]);
    sharded_->release(ranges_[unit]);
  } else if (sync) {
    sync->grads_final_from(ranges_[unit].begin);
  }
}

}  // namespace tessera::parallel
