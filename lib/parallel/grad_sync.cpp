// GradSync: bucket layout and the non-blocking reductions.
#include "parallel/grad_sync.h"

#include <algorithm>

namespace tessera::parallel {

GradSync::GradSync(nn::ParamStore& store, comm::Communicator& dp, int zero_stage, int64_t bucket_bytes)
    : store_(store), dp_(dp), zero_(zero_stage), shards_(store.numel(), dp.size()) {
  TESSERA_CHECK(zero_stage >= 0 && zero_stage <= 2, "GradSync: ZeRO stage ", zero_stage, " (0, 1 or 2)");
  // Buckets of whole parameters, at least bucket_bytes each, from the end of the flat order.
  const int64_t min_elems = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  int64_t end = store.numel();
  for (int i = store.size() - 1; i >= 0; --i) {
    const int64_t begin = store.spec(i).offset;
    if (end - begin >= min_elems || i == 0) {
      buckets_.push_back({begin, end});
      end = begin;
    }
  }
  if (zero_ == 2) grad_shard_ = Tensor::zeros({my_shard().size()}, DType::f32, store.flat_grads().device());
}

void GradSync::begin() {
  TESSERA_CHECK(inflight_.empty(), "GradSync::begin while buckets are in flight");
  next_ = 0;
}

void GradSync::start(size_t b) {
  const Range r = buckets_[b];
  Tensor bucket = store_.flat_grads().slice(r.begin, {r.size()});
  if (zero_ < 2) {
    inflight_.push_back(dp_.iall_reduce_sum(bucket));  // all-reduce(dp)
    return;
  }
  // reduce-scatter(dp): this rank receives the part of the bucket inside its shard.
  const Range mine = my_shard();
  const std::vector<int64_t> counts = shards_.counts_within(r);
  const int64_t first = std::clamp(r.begin, mine.begin, mine.end) - mine.begin;
  Tensor out = grad_shard_.slice(first, {counts[dp_.rank()]});
  inflight_.push_back(dp_.ireduce_scatter(bucket, out, counts));
}

void GradSync::grads_final_from(int64_t offset) {
  while (next_ < buckets_.size() && buckets_[next_].begin >= offset) start(next_++);
}

void GradSync::finish() {
  grads_final_from(0);
  for (comm::CommHandle& h : inflight_) h.wait();
  inflight_.clear();
}

Tensor GradSync::shard_grads() {
  if (zero_ == 2) return grad_shard_;
  const Range mine = my_shard();
  return store_.flat_grads().slice(mine.begin, {mine.size()});
}

}  // namespace tessera::parallel
