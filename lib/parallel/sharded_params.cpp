// ShardedParams: gathering units and scattering their gradients, blocking or overlapped.
#include "parallel/sharded_params.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "kernels/ops.h"

namespace tessera::parallel {
namespace {
// Overlapped waits test every 50 us and sleep between: the rank's core goes to ranks still
// computing (on a node with more ranks than cores MPI's own wait would spin on it).
constexpr std::chrono::microseconds kWaitPause{50};
}  // namespace

int ShardedParams::Pool::take_free(int64_t n) {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (!busy[i] && buffers[i].numel() == n) {
      busy[i] = true;
      return static_cast<int>(i);
    }
  return -1;
}

int ShardedParams::Pool::add(int64_t n, int64_t reduced_room, Device device) {
  buffers.push_back(Tensor::empty({n}, DType::f32, device));
  reduced.push_back(reduced_room > 0 ? Tensor::empty({reduced_room}, DType::f32, device) : Tensor());
  busy.push_back(true);
  return static_cast<int>(buffers.size() - 1);
}

ShardedParams::ShardedParams(nn::ParamStore& store, comm::Communicator& dp, bool overlap)
    : store_(store), dp_(dp), shards_(store.numel(), dp.size()), overlap_(overlap && dp.size() > 1) {
  TESSERA_CHECK(store.sharded() && store.shard_begin() == my_shard().begin &&
                    store.shard_values().numel() == my_shard().size(),
                "ShardedParams: the store does not hold this rank's shard");
  if (overlap_) progress_ = std::make_unique<comm::ProgressThread>();
}

ShardedParams::~ShardedParams() {
  // Operations still in flight (a step abandoned by an error) complete as their handles go; the
  // helper thread stops first.
  progress_.reset();
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

const std::string& ShardedParams::label(Range unit) const {
  auto [it, added] = labels_.try_emplace(unit.begin);
  if (!added) return it->second;
  std::string first, last;
  for (int i = 0; i < store_.size(); ++i) {
    const nn::ParamSpec& s = store_.spec(i);
    if (s.offset < unit.begin || s.offset >= unit.end) continue;
    if (first.empty()) first = s.name;
    last = s.name;
  }
  // The names' common prefix up to a dot ("blocks.3"), else the heads of the first and last.
  size_t common = 0;
  while (common < first.size() && common < last.size() && first[common] == last[common]) ++common;
  const size_t dot = common > 0 ? first.rfind('.', common - 1) : std::string::npos;
  if (first == last) it->second = first;
  else if (dot != std::string::npos && dot > 0) it->second = first.substr(0, dot);
  else it->second = first.substr(0, first.find('.')) + ".." + last.substr(0, last.find('.'));
  return it->second;
}

void ShardedParams::trace_slice(const char* what, Range unit, const char* category, double start, int track) const {
  if (trace_) trace_->add(what + label(unit), category, start, trace_->now(), track);
}

void ShardedParams::prefetch(Range unit) {
  if (!overlap_) return;
  TESSERA_CHECK(!gathered_.count(unit.begin) && !prefetched_.count(unit.begin), "ZeRO-3: unit ", label(unit),
                " prefetched while gathered or in flight");
  Prefetch p;
  p.values = values_.take_free(unit.size());
  if (p.values < 0) p.values = values_.add(unit.size(), 0, store_.device());
  p.posted_ms = trace_ ? trace_->now() : 0.0;
  const Range mine = mine_within(unit);
  const Tensor input = store_.shard_values().slice(mine.begin, {mine.size()});
  Tensor& output = values_.buffers[static_cast<size_t>(p.values)];
  // all-gather(dp), posted: every rank's part of the unit, while the caller computes.
  p.handle = dp_.iall_gather(input, output, shards_.counts_within(unit));
  if (progress_) progress_->hold();
  prefetched_.emplace(unit.begin, std::move(p));
}

void ShardedParams::gather(Range unit, bool with_grads) {
  TESSERA_CHECK(!gathered_.count(unit.begin), "ZeRO-3: unit ", label(unit), " gathered twice");
  const Device device = store_.device();
  Gathered g;
  if (!overlap_) {
    g.values = Tensor::empty({unit.size()}, DType::f32, device);
    if (with_grads) g.grads = Tensor::zeros({unit.size()}, DType::f32, device);
    const Range mine = mine_within(unit);
    const Tensor input = store_.shard_values().slice(mine.begin, {mine.size()});
    const double start = trace_ ? trace_->now() : 0.0;
    dp_.all_gather(input, g.values, shards_.counts_within(unit));  // all-gather(dp), waited
    trace_slice("all_gather ", unit, "zero3", start, 0);
  } else {
    if (!prefetched_.count(unit.begin)) prefetch(unit);  // not prefetched: posted now, waited at once
    auto it = prefetched_.find(unit.begin);
    const double start = trace_ ? trace_->now() : 0.0;
    it->second.handle.wait_sleeping(kWaitPause);
    if (progress_) progress_->let_go();
    trace_slice("wait all_gather ", unit, "zero3", start, 0);
    trace_slice("all_gather ", unit, "zero3", it->second.posted_ms, 1);
    g.values_buffer = it->second.values;
    g.values = values_.buffers[static_cast<size_t>(g.values_buffer)];
    prefetched_.erase(it);
    if (with_grads) {
      g.grads_buffer = take_grads(unit.size());
      g.grads = grads_.buffers[static_cast<size_t>(g.grads_buffer)];
      g.grads.zero();
    }
  }
  for_params_in(unit, [&](int id, const nn::ParamSpec& s) {
    const int64_t at = s.offset - unit.begin;
    store_.bind(id, g.values.slice(at, s.local_shape), with_grads ? g.grads.slice(at, s.local_shape) : Tensor());
  });
  g.bound_ms = trace_ ? trace_->now() : 0.0;
  gathered_.emplace(unit.begin, std::move(g));
}

void ShardedParams::reduce_grads(Range unit) {
  auto it = gathered_.find(unit.begin);
  TESSERA_CHECK(it != gathered_.end() && it->second.grads.defined(), "ZeRO-3: gradients of unit ", label(unit),
                " reduced while not gathered with gradients");
  const Range mine = mine_within(unit);
  const std::vector<int64_t> counts = shards_.counts_within(unit);
  if (!overlap_) {
    Tensor reduced = Tensor::empty({mine.size()}, DType::f32, store_.device());
    const double start = trace_ ? trace_->now() : 0.0;
    dp_.reduce_scatter(it->second.grads, reduced, counts);  // reduce-scatter(dp), waited
    trace_slice("reduce_scatter ", unit, "zero3", start, 0);
    Tensor acc = store_.shard_grads().slice(mine.begin, {mine.size()});
    ops::add_inplace(acc, reduced);
    return;
  }
  TESSERA_CHECK(it->second.grads_buffer >= 0, "ZeRO-3: gradients of unit ", label(unit), " reduced twice");
  Reduction r;
  r.unit = unit;
  r.grads_buffer = std::exchange(it->second.grads_buffer, -1);  // the reduce-scatter's until it completes
  r.posted_ms = trace_ ? trace_->now() : 0.0;
  Tensor reduced = grads_.reduced[static_cast<size_t>(r.grads_buffer)].slice(0, {mine.size()});
  // reduce-scatter(dp), posted: completed in posting order, before its buffer is reused.
  r.handle = dp_.ireduce_scatter(it->second.grads, reduced, counts);
  if (progress_) progress_->hold();
  reductions_.push_back(std::move(r));
}

int ShardedParams::take_grads(int64_t n) {
  while (true) {
    const int i = grads_.take_free(n);
    if (i >= 0) return i;
    // Two reduce-scatters of a size in flight at most: the newest keeps running while the next
    // unit computes, the older one completes to free its buffer.
    const auto in_flight = std::count_if(reductions_.begin(), reductions_.end(), [&](const Reduction& r) {
      return grads_.buffers[static_cast<size_t>(r.grads_buffer)].numel() == n;
    });
    if (in_flight < 2) return grads_.add(n, std::min(n, shards_.shard(0).size()), store_.device());
    complete_oldest_reduction();
  }
}

void ShardedParams::complete_oldest_reduction() {
  Reduction r = std::move(reductions_.front());
  reductions_.pop_front();
  const double start = trace_ ? trace_->now() : 0.0;
  r.handle.wait_sleeping(kWaitPause);
  if (progress_) progress_->let_go();
  trace_slice("wait reduce_scatter ", r.unit, "zero3", start, 0);
  trace_slice("reduce_scatter ", r.unit, "zero3", r.posted_ms, 1);
  const Range mine = mine_within(r.unit);
  Tensor acc = store_.shard_grads().slice(mine.begin, {mine.size()});
  ops::add_inplace(acc, grads_.reduced[static_cast<size_t>(r.grads_buffer)].slice(0, {mine.size()}));
  grads_.free(r.grads_buffer);
}

void ShardedParams::finish_reductions() {
  while (!reductions_.empty()) complete_oldest_reduction();
}

void ShardedParams::release(Range unit) {
  auto it = gathered_.find(unit.begin);
  TESSERA_CHECK(it != gathered_.end(), "ZeRO-3: unit ", label(unit), " released while not gathered");
  for_params_in(unit, [&](int id, const nn::ParamSpec&) { store_.unbind(id); });
  if (it->second.values_buffer >= 0) values_.free(it->second.values_buffer);
  if (it->second.grads_buffer >= 0) grads_.free(it->second.grads_buffer);  // gathered with gradients, not reduced
  trace_slice("", unit, "zero3 unit", it->second.bound_ms, 0);
  gathered_.erase(it);
}

}  // namespace tessera::parallel
