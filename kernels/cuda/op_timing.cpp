// CUDA ops' device time by kind through pairs of events (see op_timing.h).
#include "kernels/cuda/op_timing.h"

#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace tessera::kernels::cuda {
namespace {

struct TimedOp {
  cudaEvent_t start = nullptr, end = nullptr;
  KernelKind kind = KernelKind::other;
  const char* name = nullptr;
};

// One thread's event pairs: the first `used` hold ops not yet summed into `folded` (and, profiling,
// `folded_by_name`); a pool that reaches kOpTimerFoldEvery pending pairs sums them first.
struct OpTimes {
  std::vector<TimedOp> ops;
  size_t used = 0;
  KernelTimes folded;
  OpSums folded_by_name;

  ~OpTimes() {
    for (TimedOp& op : ops) {
      (void)cudaEventDestroy(op.start);
      (void)cudaEventDestroy(op.end);
    }
  }

  size_t begin(KernelKind kind, const char* name) {
    if (used == kOpTimerFoldEvery) fold();
    if (used == ops.size()) {
      TimedOp op;
      TESSERA_CUDA_CHECK(cudaEventCreate(&op.start));
      TESSERA_CUDA_CHECK(cudaEventCreate(&op.end));
      ops.push_back(op);
    }
    ops[used].kind = kind;
    ops[used].name = name;
    TESSERA_CUDA_CHECK(cudaEventRecord(ops[used].start, op_stream()));
    return used++;
  }

  // Sums the pending pairs' device time into `folded` (waits for the last one); after a fault
  // the pairs are dropped, not summed twice.
  void fold() {
    if (used == 0) return;
    const size_t pending = used;
    used = 0;
    KernelTimes sums;
    const bool by_name = op_profile_enabled();
    TESSERA_CUDA_CHECK(cudaEventSynchronize(ops[pending - 1].end));
    for (size_t i = 0; i < pending; ++i) {
      float ms = 0.0f;
      TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, ops[i].start, ops[i].end));
      sums.ms[static_cast<int>(ops[i].kind)] += ms;
      if (by_name) folded_by_name[ops[i].name ? ops[i].name : unnamed_op(ops[i].kind)].add(ms);
    }
    for (int k = 0; k < kKernelKinds; ++k) folded.ms[k] += sums.ms[k];
  }
};

thread_local OpTimes t_times;
thread_local OpTimer* t_running = nullptr;  // timers do not nest: at most one per thread

}  // namespace

OpTimer::OpTimer(KernelKind kind, const char* name) : slot_(t_times.begin(kind, name)) { t_running = this; }

OpTimer::~OpTimer() {
  if (!ended_) (void)cudaEventRecord(t_times.ops[slot_].end, op_stream());  // a destructor must not throw
  if (t_running == this) t_running = nullptr;
}

void OpTimer::end() {
  if (ended_) return;
  TESSERA_CUDA_CHECK(cudaEventRecord(t_times.ops[slot_].end, op_stream()));
  ended_ = true;
}

void end_running_op_timer() {
  if (t_running) t_running->end();
}

KernelTimes take_op_times(OpSums* by_name) {
  t_times.fold();
  const KernelTimes taken = t_times.folded;
  t_times.folded = {};
  if (by_name) add_op_sums(*by_name, t_times.folded_by_name);
  t_times.folded_by_name.clear();
  return taken;
}

}  // namespace tessera::kernels::cuda
