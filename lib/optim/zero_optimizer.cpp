// ZeroOptimizer: the sharded update and the parameter all-gather.
#include "optim/zero_optimizer.h"

#include <cmath>

namespace tessera::optim {
namespace {
parallel::Range optimizer_range(nn::ParamStore& store, parallel::GradSync& sync) {
  return sync.zero_stage() == 0 ? parallel::Range{0, store.numel()} : sync.my_shard();
}
}  // namespace

ZeroOptimizer::ZeroOptimizer(nn::ParamStore& store, parallel::GradSync& sync, comm::Communicator& dp,
                             const AdamWConfig& config)
    : store_(store), sync_(sync), dp_(dp), adamw_(store, config, optimizer_range(store, sync)) {
  if (sync.zero_stage() > 0)
    gather_input_ = Tensor::empty({adamw_.shard().size()}, DType::f32, store.flat_values().device());
}

double ZeroOptimizer::grad_norm() {
  if (sync_.zero_stage() < 2) return std::sqrt(ops::sum_squares(store_.flat_grads()));
  return std::sqrt(dp_.all_reduce_sum(ops::sum_squares(sync_.shard_grads())));
}

void ZeroOptimizer::step(float lr, float grad_scale) {
  if (sync_.zero_stage() == 0) {
    adamw_.step(lr, grad_scale);
    return;
  }
  const parallel::Range mine = adamw_.shard();
  Tensor params = store_.flat_values().slice(mine.begin, {mine.size()});
  const Tensor grads = sync_.shard_grads();
  adamw_.step(lr, grad_scale, params, grads);
  // all-gather(dp): every rank's updated shard into every rank's full parameter buffer.
  gather_input_.copy_from(params);
  std::vector<int64_t> counts(dp_.size());
  for (int r = 0; r < dp_.size(); ++r) counts[r] = sync_.shards().shard(r).size();
  dp_.all_gather(gather_input_, store_.flat_values(), counts);
}

int64_t ZeroOptimizer::state_bytes() const {
  const int64_t f = sizeof(float);
  const int64_t n = store_.numel(), shard = adamw_.shard().size();
  const int64_t grads = sync_.zero_stage() == 2 ? n + shard : n;  // zero 2: the flat buffer + the reduced shard
  return f * (n + grads + 2 * shard);
}

}  // namespace tessera::optim
