// The per-op profile (TESSERA_OP_PROFILE=1): besides their kinds' sums, the op timers
// (kernel_timing.h, cuda/op_timing.h) keep each op's time and calls by name and device; the trainer
// gathers them over its steps and prints format_op_profile() at the end of the run. Off, the
// timers keep the kinds' sums only.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tessera::kernels {

struct OpSum {
  double ms = 0.0;
  int64_t calls = 0;
  void add(double op_ms) {
    ms += op_ms;
    ++calls;
  }
  void merge(const OpSum& other) {
    ms += other.ms;
    calls += other.calls;
  }
};

// Keyed by the op's name as a string literal (#fn in kernels/ops.cpp): one pointer hash per op.
// Equal names at different addresses are merged when printed.
using OpSums = std::unordered_map<const char*, OpSum>;

inline void add_op_sums(OpSums& into, const OpSums& from) {
  for (const auto& [name, sum] : from) into[name].merge(sum);
}

// A run's profile: the ops of `steps` steps, CPU ops in host time, CUDA ops in device time.
struct OpProfile {
  OpSums cpu, cuda;
  int64_t steps = 0;
};

// Whether the timers keep per-op sums: TESSERA_OP_PROFILE=1 at start-up, or set_op_profile().
inline std::atomic<bool>& op_profile_switch() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("TESSERA_OP_PROFILE");
    return v && std::string_view(v) == "1";
  }()};
  return on;
}
inline bool op_profile_enabled() { return op_profile_switch().load(std::memory_order_relaxed); }
inline void set_op_profile(bool on) { op_profile_switch().store(on, std::memory_order_relaxed); }

// Sets the switch for its lifetime, then puts back the previous setting.
class OpProfileScope {
 public:
  explicit OpProfileScope(bool on) : previous_(op_profile_enabled()) { set_op_profile(on); }
  ~OpProfileScope() { set_op_profile(previous_); }
  OpProfileScope(const OpProfileScope&) = delete;
  OpProfileScope& operator=(const OpProfileScope&) = delete;

 private:
  bool previous_;
};

// The profile as a table: one row per op name and device, by total time descending, with the
// calls, the total and per-step milliseconds and the share of all the profiled time.
std::string format_op_profile(const OpProfile& profile);

}  // namespace tessera::kernels
