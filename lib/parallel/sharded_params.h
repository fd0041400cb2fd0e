// ShardedParams (ZeRO-3): parameters live as this rank's 1/dp shard of the flat order. A unit (a
// contiguous range of whole parameters: the embedding, one block, the final norm) is
// all-gathered(dp) into a buffer for its use and released after; its gradients, computed into a
// buffer of the unit's size, are reduce-scattered(dp) into the shard once the unit's backward is
// done (added to what earlier micro-batches left there). Two ways:
//   blocking (--zero3-overlap off): gather() all-gathers into a fresh buffer and waits,
//     reduce_grads() reduce-scatters and waits, release() frees the buffers.
//   overlapped (--zero3-overlap on, the default): prefetch() posts a unit's all-gather while the
//     caller computes the unit before it (a comm::ProgressThread moves it forward), and gather()
//     completes it; reduce_grads() posts the reduce-scatter and returns. Buffers are reused, one
//     per unit in use or in flight per size (sized in the first step: no allocation per gather
//     after it). A gradient buffer is reused only once its reduce-scatter completed; completed
//     reduce-scatters add into the shard in the order they were posted, so the sums, and every
//     bit of a run, are the blocking path's. finish_reductions() completes those in flight.
// Either way the same collectives run in the same order on every rank of dp; only where the
// caller waits for them differs. On one rank (nothing to exchange) the blocking path runs.
#pragma once
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/progress_thread.h"
#include "core/trace_sink.h"
#include "nn/param_store.h"
#include "parallel/flat_shards.h"

namespace tessera::parallel {

class ShardedParams {
 public:
  ShardedParams(nn::ParamStore& store, comm::Communicator& dp, bool overlap);
  ~ShardedParams();

  bool overlapped() const { return overlap_; }  // asked for, over more than one rank
  // Overlapped: posts the unit's all-gather(dp), completed by its gather(); blocking: nothing.
  void prefetch(Range unit);
  // Binds the unit's parameter views to its gathered values (and zeroed gradients with_grads):
  // completes its prefetch, or all-gathers(dp) it now.
  void gather(Range unit, bool with_grads);
  // Reduce-scatter(dp) of the unit's gradients into the shard (overlapped: posted, completed by a
  // later call). The unit stays bound until release().
  void reduce_grads(Range unit);
  void release(Range unit);  // unbinds the unit; its buffers are freed (blocking) or reused
  // Completes every reduce-scatter in flight, in posting order: the shard's gradients are final.
  void finish_reductions();

  Range my_shard() const { return shards_.shard(dp_.rank()); }
  const FlatShards& shards() const { return shards_; }
  // --trace: each unit's use and waits on track 0, its all-gathers and reduce-scatters in flight on
  // track 1 (nullptr: none).
  void set_trace(TraceSink* trace) { trace_ = trace; }

 private:
  // Reused buffers of one role, found by the unit size they serve: values, or gradients each
  // with room for this rank's reduced part (reduce-scatter's output: at most a shard, and at most
  // the unit).
  struct Pool {
    std::vector<Tensor> buffers, reduced;
    std::vector<bool> busy;
    int take_free(int64_t n);  // index of a free buffer of n elements, marked busy; -1: none
    int add(int64_t n, int64_t reduced_room, Device device);  // a new busy buffer
    void free(int i) { busy[static_cast<size_t>(i)] = false; }
  };
  struct Prefetch {
    int values = -1;
    comm::CommHandle handle;
    double posted_ms = 0;
  };
  struct Gathered {
    Tensor values, grads;
    int values_buffer = -1, grads_buffer = -1;  // overlapped: pool indices (-1: none, or handed on)
    double bound_ms = 0;
  };
  struct Reduction {
    Range unit;
    int grads_buffer = -1;  // and its reduced part
    comm::CommHandle handle;
    double posted_ms = 0;
  };

  Range mine_within(Range unit) const;  // this rank's part of the unit, relative to the shard start
  template <typename Fn>
  void for_params_in(Range unit, Fn fn);
  const std::string& label(Range unit) const;  // e.g. "blocks.3", for the trace and messages
  // A gradient buffer for a unit of n elements: a free one; else a new one while fewer than two
  // reduce-scatters hold buffers of that size; else the one the oldest reduce-scatters free as
  // they complete (in order).
  int take_grads(int64_t n);
  void complete_oldest_reduction();
  // A slice named what + label(unit), from start to now (with a trace).
  void trace_slice(const char* what, Range unit, const char* category, double start, int track) const;

  nn::ParamStore& store_;
  comm::Communicator& dp_;
  FlatShards shards_;
  bool overlap_;
  TraceSink* trace_ = nullptr;
  mutable std::map<int64_t, std::string> labels_;  // label()'s, by unit start
  std::map<int64_t, Gathered> gathered_;    // by unit start
  std::map<int64_t, Prefetch> prefetched_;  // overlapped: all-gathers in flight, by unit start
  std::deque<Reduction> reductions_;        // overlapped: reduce-scatters in flight, oldest first
  Pool values_, grads_;
  std::unique_ptr<comm::ProgressThread> progress_;  // overlapped; stops before the pools go
};

}  // namespace tessera::parallel
