// ZeroOptimizer: the sharded update and the parameter all-gather.
#include "optim/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/grad_clip.h"

namespace tessera::optim {
namespace {
parallel::Range optimizer_range(nn::ParamStore& store, int zero, comm::Communicator& dp) {
  return zero == 0 ? parallel::Range{0, store.numel()} : parallel::FlatShards(store.numel(), dp.size()).shard(dp.rank());
}
}  // namespace

ZeroOptimizer::ZeroOptimizer(nn::ParamStore& store, int zero_stage, parallel::GradSync* sync, comm::Communicator& dp,
                             const AdamWConfig& config, comm::Communicator* tp, comm::Communicator* pp,
                             comm::Communicator* ep)
    : store_(store), zero_(zero_stage), sync_(sync), dp_(dp), tp_(tp), pp_(pp), ep_(ep), adamw_(store, config, optimizer_range(store, zero_stage, dp)) {
  TESSERA_CHECK((zero_stage == 3) == store.sharded() && (zero_stage == 3 || sync),
                "ZeroOptimizer: ZeRO stage ", zero_stage, " does not match how the parameters are held");
  if (zero_ == 1 || zero_ == 2) gather_input_ = Tensor::empty({adamw_.shard().size()}, DType::f32, store.device());
}

Tensor ZeroOptimizer::shard_grads() { return zero_ == 3 ? store_.shard_grads() : sync_->shard_grads(); }

Tensor ZeroOptimizer::held_gradients(int64_t& begin) {
  if (zero_ < 2) {
    begin = 0;
    return store_.flat_grads();
  }
  begin = zero_ == 3 ? store_.shard_begin() : sync_->my_shard().begin;
  return shard_grads();
}

void ZeroOptimizer::complete_partial_grads() {
  using nn::PartialGrad;
  comm::Communicator* rows = rows_ ? rows_ : tp_;
  if (branch_rows_ == rows) {  // the same ranks (2D, 2.5D): one all-reduce
    sum_partial(rows, [](const nn::ParamSpec& s) {
      return s.partial == PartialGrad::rows || s.partial == PartialGrad::branch_rows;
    });
  } else {
    sum_partial(rows, [](const nn::ParamSpec& s) { return s.partial == PartialGrad::rows; });
    sum_partial(branch_rows_, [](const nn::ParamSpec& s) { return s.partial == PartialGrad::branch_rows; });
  }
  sum_partial(replicas_, [](const nn::ParamSpec& s) { return s.partial == PartialGrad::replicas; });
  sum_partial(ep_, [](const nn::ParamSpec& s) { return !s.expert; });
}

template <typename Partial>
void ZeroOptimizer::sum_partial(comm::Communicator* group, Partial partial) {
  if (!group || group->size() == 1) return;
  int64_t begin = 0;
  Tensor held = held_gradients(begin);
  int64_t n = 0;
  std::vector<Tensor> pieces;
  for (const nn::ParamSpec& s : store_.specs()) {
    const int64_t b = std::max(s.offset, begin), e = std::min(s.offset + s.local_shape.numel(), begin + held.numel());
    if (!partial(s) || b >= e) continue;
    pieces.push_back(held.slice(b - begin, {e - b}));
    n += e - b;
  }
  if (pieces.empty()) return;  // the same on every rank of the group
  if (packed_.numel() < n) {  // grown to the largest group's (freed first: no two at once)
    packed_ = Tensor();
    packed_ = Tensor::empty({n}, DType::f32, store_.device());
  }
  Tensor packed = packed_.slice(0, {n});
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    packed.slice(at, {p.numel()}).copy_from(p);
    at += p.numel();
  }
  group->all_reduce_sum(packed);
  at = 0;
  for (Tensor& p : pieces) {
    p.copy_from(packed.slice(at, {p.numel()}));
    at += p.numel();
  }
}

double ZeroOptimizer::grad_norm(std::optional<double> held_squares) {
  const int tp = tp_ ? tp_->size() : 1, ep = ep_ ? ep_->size() : 1;
  double sq = 0.0;
  if (held_squares && norm_share_is_held_sum()) {
    sq = *held_squares;  // squared_norm_share's sum, taken as the gradients were rounded
  } else {
    int64_t begin = 0;
    const Tensor held = held_gradients(begin);  // sets begin
    sq = squared_norm_share(store_, held, begin, tp, ep);
  }
  if (zero_ >= 2) sq = dp_.all_reduce_sum(sq);  // the shards' squares; under zero 0/1 every rank holds all
  if (tp > 1) sq = tp_->all_reduce_sum(sq);
  if (ep > 1) sq = ep_->all_reduce_sum(sq);
  if (pp_ && pp_->size() > 1) sq = pp_->all_reduce_sum(sq);
  return std::sqrt(sq);
}

bool ZeroOptimizer::step(float lr, float grad_scale) {
  // Without ZeRO and under ZeRO-3 the update reads every gradient the store zeroes each step (the
  // flat buffer, the shard): it zeroes them as it goes. ZeRO-1/2 update a shard of a larger buffer.
  if (zero_ == 0) {
    const Tensor weight_bits = writes_weight_bits() ? store_.bf16_copy_for_update() : Tensor();
    adamw_.step(lr, grad_scale, /*zero_grads=*/true, weight_bits);
    store_.values_updated(/*copy_written=*/weight_bits.defined());
    return true;
  }
  const parallel::Range mine = adamw_.shard();
  Tensor params = zero_ == 3 ? store_.shard_values() : store_.flat_values().slice(mine.begin, {mine.size()});
  const Tensor grads = shard_grads();
  adamw_.step(lr, grad_scale, params, grads, /*zero_grads=*/zero_ == 3);
  store_.values_updated(/*copy_written=*/false);
  if (zero_ == 3) return true;  // the shard is all this rank holds
  // all-gather(dp): every rank's updated shard into every rank's full parameter buffer.
  gather_input_.copy_from(params);
  std::vector<int64_t> counts(dp_.size());
  for (int r = 0; r < dp_.size(); ++r) counts[r] = sync_->shards().shard(r).size();
  dp_.all_gather(gather_input_, store_.flat_values(), counts);
  return false;
}

int64_t ZeroOptimizer::host_state_bytes() const {
  const int64_t params = store_.shard_on_host_tier() ? 2 * adamw_.shard().size() : 0;  // values, gradients
  return int64_t(sizeof(float)) * (params + 2 * adamw_.host_tier_elements());
}

int64_t ZeroOptimizer::state_bytes() const {
  const int64_t f = sizeof(float);
  const int64_t n = store_.numel(), shard = adamw_.shard().size();
  // --offload nvme: on disk; the host tier's part counts in host_state_bytes()
  const int64_t states = adamw_.states_in_files() ? 0 : 2 * (shard - adamw_.host_tier_elements());
  if (zero_ == 3)  // parameters, gradients, two states: all sharded (--offload-params: the first two on the host tier)
    return f * ((store_.shard_on_host_tier() ? 0 : 2 * shard) + states);
  const int64_t grads = zero_ == 2 ? n + shard : n;  // zero 2: the flat buffer + the reduced shard
  return f * (n + grads + states);
}

}  // namespace tessera::optim
