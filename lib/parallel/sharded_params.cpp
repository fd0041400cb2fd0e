// ShardedParams: gathering units and scattering their gradients.
#include "parallel/sharded_params.h"

#include <algorithm>

#include "kernels/ops.h"

namespace tessera::parallel {

ShardedParams::ShardedParams(nn::ParamStore& store, comm::Communicator& dp)
    : store_(store), dp_(dp), shards_(store.numel(), dp.size()) {
  TESSERA_CHECK(store.sharded() && store.shard_begin() == my_shard().begin &&
                    store.shard_values().numel() == my_shard().size(),
                "ShardedParams: the store does not hold this rank's shard");
}

Range ShardedParams::mine_within(Range unit) const {
  const Range s = my_shard();
  const int64_t b = std::clamp(unit.begin, s.begin, s.end), e = std::clamp(unit.end, s.begin, s.end);
  return {b - s.begin, std::max(b, e) - s.begin};
}

template <typename Fn>
void ShardedParams::for_params_in(Range unit, Fn fn) {
  for (int i = 0; i < store_.size(); ++i) {
    const nn::ParamSpec& s = store_.spec(i);
    if (s.offset >= unit.begin && s.offset < unit.end) fn(i, s);
  }
}

void ShardedParams::gather(Range unit, bool with_grads) {
  TESSERA_CHECK(!gathered_.count(unit.begin), "ZeRO-3: unit at ", unit.begin, " gathered twice");
  const Device device = store_.device();
  Gathered g{Tensor::empty({unit.size()}, DType::f32, device),
             with_grads ? Tensor::zeros({unit.size()}, DType::f32, device) : Tensor()};
  const Range mine = mine_within(unit);
  const Tensor input = store_.shard_values().slice(mine.begin, {mine.size()});
  const std::vector<int64_t> counts = shards_.counts_within(unit);
  dp_.all_gather(input, g.values, counts);  // all-gather(dp): every rank's part of the unit
  for_params_in(unit, [&](int id, const nn::ParamSpec& s) {
    const int64_t at = s.offset - unit.begin;
    store_.bind(id, g.values.slice(at, s.local_shape), with_grads ? g.grads.slice(at, s.local_shape) : Tensor());
  });
  gathered_.emplace(unit.begin, std::move(g));
}

void ShardedParams::reduce_grads(Range unit) {
  auto it = gathered_.find(unit.begin);
  TESSERA_CHECK(it != gathered_.end() && it->second.grads.defined(), "ZeRO-3: gradients of unit at ", unit.begin,
                " reduced while not gathered with gradients");
  const Range mine = mine_within(unit);
  Tensor reduced = Tensor::empty({mine.size()}, DType::f32, store_.device());
  dp_.reduce_scatter(it->second.grads, reduced, shards_.counts_within(unit));  // reduce-scatter(dp)
  Tensor acc = store_.shard_grads().slice(mine.begin, {mine.size()});
  ops::add_inplace(acc, reduced);
}

void ShardedParams::release(Range unit) {
  for_params_in(unit, [&](int id, const nn::ParamSpec&) { store_.unbind(id); });
  gathered_.erase(unit.begin);
}

}  // namespace tessera::parallel
