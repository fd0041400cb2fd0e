// Where a training step's time goes: every kernels/ops.h call on the CPU is timed on the calling
// thread and added to its kind (GEMMs, attention, the optimizer: the update, the gradient norm
// and zeroing the gradients; everything else), as is the wait for the step's data, until
// take_kernel_times() hands the sums over and starts again (the trainer does so once per step:
// gemm_ms, attention_ms, optimizer_ms, other_kernels_ms, data_ms in the metrics; comm_ms comes
// from the communicators). CUDA ops run asynchronously, so a host-side timer would time their
// launch only: they are timed on the device instead (kernels/cuda/op_timing.h) and added here.
// Under TESSERA_OP_PROFILE=1 each op's time is kept by name too (kernels/op_profile.h).
#pragma once
#include <chrono>
#include <string_view>

#include "kernels/op_profile.h"

namespace tessera::kernels {

enum class KernelKind { gemm, attention, optimizer, other, data };
constexpr int kKernelKinds = 5;

// The kind of a kernel by its name in kernels/cpu/cpu_ops.h.
constexpr KernelKind kernel_kind(std::string_view name) {
  if (name.starts_with("gemm")) return KernelKind::gemm;
  if (name.starts_with("attention")) return KernelKind::attention;
  if (name.starts_with("adamw") || name.ends_with("sum_squares")) return KernelKind::optimizer;  // the update, the norm
  return KernelKind::other;
}

// The profile's name for a timer given no op name: its kind in brackets.
constexpr const char* unnamed_op(KernelKind kind) {
  constexpr const char* names[kKernelKinds] = {"[gemm]", "[attention]", "[optimizer]", "[other]", "[data]"};
  return names[static_cast<int>(kind)];
}

struct KernelTimes {
  double ms[kKernelKinds] = {};
  double of(KernelKind k) const { return ms[static_cast<int>(k)]; }
};

// The calling thread's sums since the last call; resets them. Its per-op sums (CPU and CUDA) are
// added to *profile, counting one step, or dropped when profile is null.
KernelTimes take_kernel_times(OpProfile* profile = nullptr);

// Times one kernel call into the calling thread's sums (and, profiling, into its op's by name).
class KernelTimer {
 public:
  explicit KernelTimer(KernelKind kind, const char* name = nullptr)
      : kind_(kind), name_(name), start_(std::chrono::steady_clock::now()) {}
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  KernelKind kind_;
  const char* name_;  // a string literal, or null
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::kernels
